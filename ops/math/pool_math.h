#pragma once
// The window math of the 2-D pooling kernels as host/device functions: one output element of each
// forward pass, and one input element of each backward pass computed by gathering from the output
// windows that cover it (no scattered additions, so no atomics: deterministic). The CUDA kernels
// (ops/cuda/pool.cu) call these per thread; tests/ops/index_pool_math_test.cpp runs them on the
// host against the CPU kernels (ops/cpu/pool.cpp), which they match bit for bit: the windows and
// divisors are the same, each forward sums its window in the same order, and each backward adds
// an input element's contributions in the same (oh, ow) order the CPU's scatter does, in the same
// accumulator type. Internal header: nvcc compiles it, so plain structs and PRECIS_HD only.
#include <cmath>
#include <cstdint>

#include "core/opmath.h"

namespace precis::kernels {

/// One (N, C) plane's pooling geometry: input (h, w), output (ho, wo), and the window as
/// Pool2dParams (ops/contracts/kernels_conv.h) describes it; [0] is the height, [1] the width.
struct PoolGeometry {
  int64_t h = 0, w = 0, ho = 0, wo = 0;
  int64_t kernel[2] = {1, 1};
  int64_t stride[2] = {1, 1};
  int64_t padding[2] = {0, 0};
  int64_t dilation[2] = {1, 1};
  bool count_include_pad = true;
  int64_t divisor_override = 0;
};

/// One plane's geometry: input (h, w), output (ho, wo) and the window of `p`, a Pool2dParams
/// (ops/contracts/kernels_conv.h; a template parameter so that nvcc's view of this header needs no Tensor).
/// Every backend and the tests build their PoolGeometry here, so that none can drop the window: the
/// CUDA max-pool backward once gathered from default 1×1 windows and got every gradient wrong.
template <typename Params>
PoolGeometry pool_geometry(int64_t h, int64_t w, int64_t ho, int64_t wo, const Params& p) {
  PoolGeometry g;
  g.h = h;
  g.w = w;
  g.ho = ho;
  g.wo = wo;
  for (int d = 0; d < 2; ++d) {
    g.kernel[d] = p.kernel[d];
    g.stride[d] = p.stride[d];
    g.padding[d] = p.padding[d];
    g.dilation[d] = p.dilation[d];
  }
  g.count_include_pad = p.count_include_pad;
  g.divisor_override = p.divisor_override;
  return g;
}

/// a / b rounded toward −∞ for b > 0.
PRECIS_HD_INLINE int64_t floor_div(int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }
PRECIS_HD_INLINE int64_t min_i64(int64_t a, int64_t b) { return a < b ? a : b; }
PRECIS_HD_INLINE int64_t max_i64(int64_t a, int64_t b) { return a > b ? a : b; }

/// The output positions [lo, hi] along one dim whose windows (start o·stride − pad, `span` long)
/// can contain input position i, clipped to [0, out − 1] (empty when lo > hi).
struct OutRange {
  int64_t lo, hi;
};
PRECIS_HD_INLINE OutRange covering_outputs(int64_t i, int64_t span, int64_t stride, int64_t pad, int64_t out) {
  // start <= i  and  start + span > i,  start = o·stride − pad
  const int64_t lo = floor_div(i + pad - span, stride) + 1;
  const int64_t hi = floor_div(i + pad, stride);
  return {max_i64(lo, 0), min_i64(hi, out - 1)};
}

// ---- max pooling ---------------------------------------------------------------------------------

/// A window's maximum (in the compute type) and its flat position h·W + w in the plane; index −1
/// (and value −∞) for a window wholly in the padding.
template <typename A>
struct MaxPoolResult {
  A value;
  int64_t index;
};

/// The maximum of output (oh, ow)'s window over `plane` (h × w, contiguous). NaN wins and stays
/// (the last NaN of the window, as the CPU's `v > best || isnan(v)`); otherwise the first maximum.
template <typename T>
PRECIS_HD_INLINE MaxPoolResult<opmath_t<T>> max_pool2d_window(const T* plane, const PoolGeometry& g, int64_t oh,
                                                              int64_t ow) {
  using A = opmath_t<T>;
  const int64_t dh = g.dilation[0], dw = g.dilation[1];
  const int64_t h0 = oh * g.stride[0] - g.padding[0], w0 = ow * g.stride[1] - g.padding[1];
  // First and one-past-last taps that land inside the input.
  const int64_t k0 = h0 < 0 ? (-h0 + dh - 1) / dh : 0;
  const int64_t j0 = w0 < 0 ? (-w0 + dw - 1) / dw : 0;
  const int64_t k1 = g.h - 1 - h0 < 0 ? 0 : min_i64(g.kernel[0], (g.h - 1 - h0) / dh + 1);
  const int64_t j1 = g.w - 1 - w0 < 0 ? 0 : min_i64(g.kernel[1], (g.w - 1 - w0) / dw + 1);
  A best = -static_cast<A>(INFINITY);
  if (k0 >= k1 || j0 >= j1) return {best, -1};
  int64_t best_i = (h0 + k0 * dh) * g.w + (w0 + j0 * dw);
  for (int64_t k = k0; k < k1; ++k) {
    const int64_t row = (h0 + k * dh) * g.w;
    for (int64_t j = j0; j < j1; ++j) {
      const int64_t i = row + w0 + j * dw;
      const A v = load_op(plane[i]);
      if (v > best || v != v) {
        best = v;
        best_i = i;
      }
    }
  }
  return {best, best_i};
}

/// The gradient of input (ih, iw): the sum, in (oh, ow) order, of grad_out at the outputs whose
/// index (from max_pool2d_window) is this element. grad_out and indices: one (ho × wo) plane.
template <typename T>
PRECIS_HD_INLINE opmath_t<T> max_pool2d_backward_at(const T* grad_out, const int64_t* indices, const PoolGeometry& g,
                                                   int64_t ih, int64_t iw) {
  using A = opmath_t<T>;
  const OutRange rh = covering_outputs(ih, (g.kernel[0] - 1) * g.dilation[0] + 1, g.stride[0], g.padding[0], g.ho);
  const OutRange rw = covering_outputs(iw, (g.kernel[1] - 1) * g.dilation[1] + 1, g.stride[1], g.padding[1], g.wo);
  const int64_t me = ih * g.w + iw;
  A acc = A(0);
  for (int64_t oh = rh.lo; oh <= rh.hi; ++oh)
    for (int64_t ow = rw.lo; ow <= rw.hi; ++ow)
      if (indices[oh * g.wo + ow] == me) acc += load_op(grad_out[oh * g.wo + ow]);
  return acc;
}

// ---- average pooling -----------------------------------------------------------------------------

/// Output o's window along one dim clipped to the input, and its size clipped to the padded input
/// only (PyTorch's count_include_pad divisor).
struct AvgWindow {
  int64_t begin, end, padded_size;
};
PRECIS_HD_INLINE AvgWindow avg_window(int64_t o, int64_t k, int64_t stride, int64_t pad, int64_t in) {
  const int64_t start = o * stride - pad;
  const int64_t end = min_i64(start + k, in + pad);
  return {max_i64(start, 0), min_i64(end, in), end - start};
}

/// The divisor of a window: divisor_override, else the padded or the clipped window's size.
template <typename A>
PRECIS_HD_INLINE A avg_divisor(const AvgWindow& wh, const AvgWindow& ww, const PoolGeometry& g) {
  if (g.divisor_override != 0) return static_cast<A>(g.divisor_override);
  if (g.count_include_pad) return static_cast<A>(wh.padded_size * ww.padded_size);
  return static_cast<A>((wh.end - wh.begin) * (ww.end - ww.begin));
}

/// The mean of output (oh, ow)'s window over `plane` (h × w); 0 for a window wholly in the padding.
template <typename T>
PRECIS_HD_INLINE opmath_t<T> avg_pool2d_window(const T* plane, const PoolGeometry& g, int64_t oh, int64_t ow) {
  using A = opmath_t<T>;
  const AvgWindow wh = avg_window(oh, g.kernel[0], g.stride[0], g.padding[0], g.h);
  const AvgWindow ww = avg_window(ow, g.kernel[1], g.stride[1], g.padding[1], g.w);
  if (wh.begin >= wh.end || ww.begin >= ww.end) return A(0);
  A s = A(0);
  for (int64_t ih = wh.begin; ih < wh.end; ++ih)
    for (int64_t iw = ww.begin; iw < ww.end; ++iw) s += load_op(plane[ih * g.w + iw]);
  return s / avg_divisor<A>(wh, ww, g);
}

/// The gradient of input (ih, iw): Σ grad_out / divisor over the windows containing it, in
/// (oh, ow) order. grad_out: one (ho × wo) plane.
template <typename T>
PRECIS_HD_INLINE opmath_t<T> avg_pool2d_backward_at(const T* grad_out, const PoolGeometry& g, int64_t ih, int64_t iw) {
  using A = opmath_t<T>;
  const OutRange rh = covering_outputs(ih, g.kernel[0], g.stride[0], g.padding[0], g.ho);
  const OutRange rw = covering_outputs(iw, g.kernel[1], g.stride[1], g.padding[1], g.wo);
  A acc = A(0);
  for (int64_t oh = rh.lo; oh <= rh.hi; ++oh) {
    const AvgWindow wh = avg_window(oh, g.kernel[0], g.stride[0], g.padding[0], g.h);
    if (ih < wh.begin || ih >= wh.end) continue;
    for (int64_t ow = rw.lo; ow <= rw.hi; ++ow) {
      const AvgWindow ww = avg_window(ow, g.kernel[1], g.stride[1], g.padding[1], g.w);
      if (iw < ww.begin || iw >= ww.end) continue;
      acc += load_op(grad_out[oh * g.wo + ow]) / avg_divisor<A>(wh, ww, g);
    }
  }
  return acc;
}

// ---- adaptive average pooling --------------------------------------------------------------------

/// Output o's window [begin, end) along a dim of `in` elements pooled to `out`.
PRECIS_HD_INLINE int64_t adaptive_begin(int64_t o, int64_t in, int64_t out) { return o * in / out; }
PRECIS_HD_INLINE int64_t adaptive_end(int64_t o, int64_t in, int64_t out) { return ((o + 1) * in + out - 1) / out; }

/// The mean of output (oh, ow)'s adaptive window over `plane` (h × w).
template <typename T>
PRECIS_HD_INLINE opmath_t<T> adaptive_avg_pool2d_window(const T* plane, const PoolGeometry& g, int64_t oh, int64_t ow) {
  using A = opmath_t<T>;
  const int64_t h0 = adaptive_begin(oh, g.h, g.ho), h1 = adaptive_end(oh, g.h, g.ho);
  const int64_t w0 = adaptive_begin(ow, g.w, g.wo), w1 = adaptive_end(ow, g.w, g.wo);
  A s = A(0);
  for (int64_t ih = h0; ih < h1; ++ih)
    for (int64_t iw = w0; iw < w1; ++iw) s += load_op(plane[ih * g.w + iw]);
  return s / static_cast<A>((h1 - h0) * (w1 - w0));
}

/// The adaptive windows along a dim containing input i: [floor(i·out/in), ceil((i+1)·out/in) − 1].
PRECIS_HD_INLINE OutRange adaptive_covering(int64_t i, int64_t in, int64_t out) {
  return {i * out / in, min_i64(((i + 1) * out + in - 1) / in - 1, out - 1)};
}

/// The gradient of input (ih, iw): Σ grad_out / window size over the adaptive windows containing
/// it, in (oh, ow) order. grad_out: one (ho × wo) plane.
template <typename T>
PRECIS_HD_INLINE opmath_t<T> adaptive_avg_pool2d_backward_at(const T* grad_out, const PoolGeometry& g, int64_t ih,
                                                            int64_t iw) {
  using A = opmath_t<T>;
  const OutRange rh = adaptive_covering(ih, g.h, g.ho), rw = adaptive_covering(iw, g.w, g.wo);
  A acc = A(0);
  for (int64_t oh = rh.lo; oh <= rh.hi; ++oh) {
    const int64_t h0 = adaptive_begin(oh, g.h, g.ho), h1 = adaptive_end(oh, g.h, g.ho);
    if (ih < h0 || ih >= h1) continue;
    for (int64_t ow = rw.lo; ow <= rw.hi; ++ow) {
      const int64_t w0 = adaptive_begin(ow, g.w, g.wo), w1 = adaptive_end(ow, g.w, g.wo);
      if (iw < w0 || iw >= w1) continue;
      acc += load_op(grad_out[oh * g.wo + ow]) / static_cast<A>((h1 - h0) * (w1 - w0));
    }
  }
  return acc;
}

}  // namespace precis::kernels
