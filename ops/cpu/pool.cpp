// Pooling kernels on the CPU: direct loops over each output window, split over the intra-op pool
// by (n, c) planes. All tensors are contiguous (N, C, H, W). Low-precision inputs compute in fp32;
// the backward kernels of f16/bf16 sum overlapping windows in an fp32 plane before rounding once.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/thread_pool.h"
#include "ops/cpu/cpu_backend.h"
#include "core/dtype_visit.h"
#include "core/opmath.h"
#include "ops/kernels_conv.h"
#include "ops/op_table.h"

namespace precis::cpu {

namespace {

using kernels::Pool2dParams;

// Planes per parallel chunk so that a chunk does at least ~32k window reads.
int64_t plane_grain(int64_t work_per_plane) { return std::max<int64_t>(1, 32768 / std::max<int64_t>(work_per_plane, 1)); }

struct Planes {
  int64_t count, h, w, ho, wo;
};

Planes planes_of(const Tensor& x, const Tensor& out) {
  return {x.size(0) * x.size(1), x.size(2), x.size(3), out.size(2), out.size(3)};
}

// Accumulates a backward pass into one (H, W) plane of grad_x: directly for f32/f64, through an
// fp32 buffer rounded once at the end for f16/bf16 (overlapping windows add several times).
template <typename T>
class PlaneAccumulator {
 public:
  using Acc = opmath_t<T>;
  PlaneAccumulator(T* dst, int64_t size) : dst_(dst), size_(size) {
    if constexpr (std::is_same_v<Acc, T>) {
      std::fill(dst, dst + size, T(0));
      acc_ = dst;
    } else {
      buffer_.assign(size, Acc(0));
      acc_ = buffer_.data();
    }
  }
  Acc* data() { return acc_; }
  void finish() {
    if constexpr (!std::is_same_v<Acc, T>)
      for (int64_t i = 0; i < size_; ++i) dst_[i] = convert<T>(buffer_[i]);
  }

 private:
  T* dst_;
  int64_t size_;
  Acc* acc_;
  std::vector<Acc> buffer_;
};

// ---- max pooling ---------------------------------------------------------------------------

// out, indices: (N, C, Ho, Wo); x: (N, C, H, W). Compares in fp32 for f16/bf16 (exact: the
// result is one of the inputs).
template <typename T>
void max_pool2d_kernel(const Tensor& out, const Tensor& indices, const Tensor& x, const Pool2dParams& p) {
  using Acc = opmath_t<T>;
  const Planes pl = planes_of(x, out);
  const T* xd = x.data_ptr<T>();
  T* od = out.data_ptr<T>();
  int64_t* id = indices.defined() ? indices.data_ptr<int64_t>() : nullptr;
  const int64_t kh = p.kernel[0], kw = p.kernel[1], sh = p.stride[0], sw = p.stride[1];
  const int64_t ph = p.padding[0], pw = p.padding[1], dh = p.dilation[0], dw = p.dilation[1];
  parallel_for(0, pl.count, plane_grain(pl.ho * pl.wo * kh * kw), [&](int64_t b, int64_t e) {
    for (int64_t plane = b; plane < e; ++plane) {
      const T* xp = xd + plane * pl.h * pl.w;
      T* op = od + plane * pl.ho * pl.wo;
      int64_t* ip = id != nullptr ? id + plane * pl.ho * pl.wo : nullptr;
      for (int64_t oh = 0; oh < pl.ho; ++oh) {
        // First and one-past-last kernel rows that land inside the input.
        const int64_t h0 = oh * sh - ph;
        int64_t k0 = 0;
        while (h0 + k0 * dh < 0) ++k0;
        const int64_t k1 = std::min(kh, (pl.h - 1 - h0) / dh + 1);
        for (int64_t ow = 0; ow < pl.wo; ++ow) {
          const int64_t w0 = ow * sw - pw;
          int64_t j0 = 0;
          while (w0 + j0 * dw < 0) ++j0;
          const int64_t j1 = std::min(kw, (pl.w - 1 - w0) / dw + 1);
          Acc best = -std::numeric_limits<Acc>::infinity();
          int64_t best_i = (h0 + k0 * dh) * pl.w + (w0 + j0 * dw);
          for (int64_t k = k0; k < k1; ++k) {
            const int64_t row = (h0 + k * dh) * pl.w;
            for (int64_t j = j0; j < j1; ++j) {
              const int64_t i = row + w0 + j * dw;
              const Acc v = static_cast<Acc>(xp[i]);
              // NaN wins and stays (no value compares greater than it), as in PyTorch.
              if (v > best || std::isnan(v)) {
                best = v;
                best_i = i;
              }
            }
          }
          // A dilated window can fall wholly in the padding (taps on both sides of a tiny input):
          // -inf with no index, so backward sends that gradient nowhere.
          if (k0 >= k1 || j0 >= j1) best_i = -1;
          op[oh * pl.wo + ow] = convert<T>(best);
          if (ip != nullptr) ip[oh * pl.wo + ow] = best_i;
        }
      }
    }
  });
}

// grad_x: (N, C, H, W) = Σ grad_out at indices; grad_out, indices: (N, C, Ho, Wo).
template <typename T>
void max_pool2d_backward_kernel(const Tensor& grad_x, const Tensor& grad_out, const Tensor& indices) {
  const Planes pl = planes_of(grad_x, grad_out);
  T* gxd = grad_x.data_ptr<T>();
  const T* god = grad_out.data_ptr<T>();
  const int64_t* id = indices.data_ptr<int64_t>();
  parallel_for(0, pl.count, plane_grain(pl.h * pl.w + pl.ho * pl.wo), [&](int64_t b, int64_t e) {
    for (int64_t plane = b; plane < e; ++plane) {
      PlaneAccumulator<T> acc(gxd + plane * pl.h * pl.w, pl.h * pl.w);
      const T* gp = god + plane * pl.ho * pl.wo;
      const int64_t* ip = id + plane * pl.ho * pl.wo;
      for (int64_t i = 0; i < pl.ho * pl.wo; ++i)
        if (ip[i] >= 0) acc.data()[ip[i]] += static_cast<opmath_t<T>>(gp[i]);
      acc.finish();
    }
  });
}

// ---- average pooling -----------------------------------------------------------------------

// The clipped window of output position o along one dim and its size before clipping to the
// input (but after clipping to the padded input), as PyTorch computes the divisor.
struct Window {
  int64_t begin, end, padded_size;
};

Window avg_window(int64_t o, int64_t k, int64_t stride, int64_t pad, int64_t in) {
  const int64_t start = o * stride - pad;
  const int64_t end = std::min(start + k, in + pad);
  return {std::max<int64_t>(start, 0), std::min(end, in), end - start};
}

template <typename Acc>
Acc avg_divisor(const Window& wh, const Window& ww, const Pool2dParams& p) {
  if (p.divisor_override != 0) return static_cast<Acc>(p.divisor_override);
  if (p.count_include_pad) return static_cast<Acc>(wh.padded_size * ww.padded_size);
  return static_cast<Acc>((wh.end - wh.begin) * (ww.end - ww.begin));
}

// out: (N, C, Ho, Wo) = window sums of x: (N, C, H, W) / divisor; sums in fp32 (f64 for f64).
template <typename T>
void avg_pool2d_kernel(const Tensor& out, const Tensor& x, const Pool2dParams& p) {
  using Acc = opmath_t<T>;
  const Planes pl = planes_of(x, out);
  const T* xd = x.data_ptr<T>();
  T* od = out.data_ptr<T>();
  parallel_for(0, pl.count, plane_grain(pl.ho * pl.wo * p.kernel[0] * p.kernel[1]), [&](int64_t b, int64_t e) {
    for (int64_t plane = b; plane < e; ++plane) {
      const T* xp = xd + plane * pl.h * pl.w;
      T* op = od + plane * pl.ho * pl.wo;
      for (int64_t oh = 0; oh < pl.ho; ++oh) {
        const Window wh = avg_window(oh, p.kernel[0], p.stride[0], p.padding[0], pl.h);
        for (int64_t ow = 0; ow < pl.wo; ++ow) {
          const Window ww = avg_window(ow, p.kernel[1], p.stride[1], p.padding[1], pl.w);
          if (wh.begin >= wh.end || ww.begin >= ww.end) {  // a window wholly in the padding
            op[oh * pl.wo + ow] = T(0);
            continue;
          }
          Acc s = 0;
          for (int64_t ih = wh.begin; ih < wh.end; ++ih)
            for (int64_t iw = ww.begin; iw < ww.end; ++iw) s += static_cast<Acc>(xp[ih * pl.w + iw]);
          op[oh * pl.wo + ow] = convert<T>(s / avg_divisor<Acc>(wh, ww, p));
        }
      }
    }
  });
}

template <typename T>
void avg_pool2d_backward_kernel(const Tensor& grad_x, const Tensor& grad_out, const Pool2dParams& p) {
  using Acc = opmath_t<T>;
  const Planes pl = planes_of(grad_x, grad_out);
  T* gxd = grad_x.data_ptr<T>();
  const T* god = grad_out.data_ptr<T>();
  parallel_for(0, pl.count, plane_grain(pl.ho * pl.wo * p.kernel[0] * p.kernel[1]), [&](int64_t b, int64_t e) {
    for (int64_t plane = b; plane < e; ++plane) {
      PlaneAccumulator<T> acc(gxd + plane * pl.h * pl.w, pl.h * pl.w);
      Acc* a = acc.data();
      const T* gp = god + plane * pl.ho * pl.wo;
      for (int64_t oh = 0; oh < pl.ho; ++oh) {
        const Window wh = avg_window(oh, p.kernel[0], p.stride[0], p.padding[0], pl.h);
        for (int64_t ow = 0; ow < pl.wo; ++ow) {
          const Window ww = avg_window(ow, p.kernel[1], p.stride[1], p.padding[1], pl.w);
          if (wh.begin >= wh.end || ww.begin >= ww.end) continue;
          const Acc g = static_cast<Acc>(gp[oh * pl.wo + ow]) / avg_divisor<Acc>(wh, ww, p);
          for (int64_t ih = wh.begin; ih < wh.end; ++ih)
            for (int64_t iw = ww.begin; iw < ww.end; ++iw) a[ih * pl.w + iw] += g;
        }
      }
      acc.finish();
    }
  });
}

// ---- adaptive average pooling ----------------------------------------------------------------

int64_t adaptive_begin(int64_t o, int64_t in, int64_t out) { return o * in / out; }
int64_t adaptive_end(int64_t o, int64_t in, int64_t out) { return ((o + 1) * in + out - 1) / out; }

template <typename T>
void adaptive_avg_pool2d_kernel(const Tensor& out, const Tensor& x) {
  using Acc = opmath_t<T>;
  const Planes pl = planes_of(x, out);
  const T* xd = x.data_ptr<T>();
  T* od = out.data_ptr<T>();
  // Each input element is read about once per output window covering it.
  parallel_for(0, pl.count, plane_grain(pl.h * pl.w + pl.ho * pl.wo), [&](int64_t b, int64_t e) {
    for (int64_t plane = b; plane < e; ++plane) {
      const T* xp = xd + plane * pl.h * pl.w;
      T* op = od + plane * pl.ho * pl.wo;
      for (int64_t oh = 0; oh < pl.ho; ++oh) {
        const int64_t h0 = adaptive_begin(oh, pl.h, pl.ho), h1 = adaptive_end(oh, pl.h, pl.ho);
        for (int64_t ow = 0; ow < pl.wo; ++ow) {
          const int64_t w0 = adaptive_begin(ow, pl.w, pl.wo), w1 = adaptive_end(ow, pl.w, pl.wo);
          Acc s = 0;
          for (int64_t ih = h0; ih < h1; ++ih)
            for (int64_t iw = w0; iw < w1; ++iw) s += static_cast<Acc>(xp[ih * pl.w + iw]);
          op[oh * pl.wo + ow] = convert<T>(s / static_cast<Acc>((h1 - h0) * (w1 - w0)));
        }
      }
    }
  });
}

template <typename T>
void adaptive_avg_pool2d_backward_kernel(const Tensor& grad_x, const Tensor& grad_out) {
  using Acc = opmath_t<T>;
  const Planes pl = planes_of(grad_x, grad_out);
  T* gxd = grad_x.data_ptr<T>();
  const T* god = grad_out.data_ptr<T>();
  parallel_for(0, pl.count, plane_grain(pl.h * pl.w + pl.ho * pl.wo), [&](int64_t b, int64_t e) {
    for (int64_t plane = b; plane < e; ++plane) {
      PlaneAccumulator<T> acc(gxd + plane * pl.h * pl.w, pl.h * pl.w);
      Acc* a = acc.data();
      const T* gp = god + plane * pl.ho * pl.wo;
      for (int64_t oh = 0; oh < pl.ho; ++oh) {
        const int64_t h0 = adaptive_begin(oh, pl.h, pl.ho), h1 = adaptive_end(oh, pl.h, pl.ho);
        for (int64_t ow = 0; ow < pl.wo; ++ow) {
          const int64_t w0 = adaptive_begin(ow, pl.w, pl.wo), w1 = adaptive_end(ow, pl.w, pl.wo);
          const Acc g = static_cast<Acc>(gp[oh * pl.wo + ow]) / static_cast<Acc>((h1 - h0) * (w1 - w0));
          for (int64_t ih = h0; ih < h1; ++ih)
            for (int64_t iw = w0; iw < w1; ++iw) a[ih * pl.w + iw] += g;
        }
      }
      acc.finish();
    }
  });
}

template <typename T>
void register_for() {
  constexpr DType dt = dtype_of<T>();
  register_kernel<kernels::MaxPool2dKernel>(OpId::max_pool2d, DeviceType::cpu, dt, &max_pool2d_kernel<T>);
  register_kernel<kernels::MaxPool2dBackwardKernel>(OpId::max_pool2d_backward, DeviceType::cpu, dt,
                                                    &max_pool2d_backward_kernel<T>);
  register_kernel<kernels::AvgPool2dKernel>(OpId::avg_pool2d, DeviceType::cpu, dt, &avg_pool2d_kernel<T>);
  register_kernel<kernels::AvgPool2dBackwardKernel>(OpId::avg_pool2d_backward, DeviceType::cpu, dt,
                                                    &avg_pool2d_backward_kernel<T>);
  register_kernel<kernels::AdaptiveAvgPool2dKernel>(OpId::adaptive_avg_pool2d, DeviceType::cpu, dt,
                                                    &adaptive_avg_pool2d_kernel<T>);
  register_kernel<kernels::AdaptiveAvgPool2dBackwardKernel>(OpId::adaptive_avg_pool2d_backward, DeviceType::cpu, dt,
                                                            &adaptive_avg_pool2d_backward_kernel<T>);
}

}  // namespace

void register_pool_kernels() {
  register_for<float>();
  register_for<double>();
  register_for<Half>();
  register_for<BFloat16>();
}

}  // namespace precis::cpu
