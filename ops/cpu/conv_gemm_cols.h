#pragma once
// im2col and col2im for channels-last (NHWC) activations: the column matrix of the GEMM route of
// conv2d (ops/cpu/conv_gemm.cpp). Header-only and free of precis's tensors so that the probe
// (benchmarks/tools/conv_gemm_probe.cpp) times the very loops the kernel runs.
//
// Shapes (groups 1, dilation 1):
//   x, dx  (N, H, W, C) contiguous               = (N·H·W, C) row-major
//   cols   (M, K) row-major, M = N·Ho·Wo, K = C·kh·kw
//          row m = (n, oh, ow); column k = (c·kh + i)·kw + j, the order of the weight (O, C, kh, kw),
//          so the weight is the (O, K) row-major matrix as it lies
//   cols[(n, oh, ow), (c, i, j)] = x[n, oh·sh − ph + i, ow·sw − pw + j, c], 0 in the padding.
// Each function handles a range of rows so the caller splits the work over its threads.
#include <cstdint>

namespace precis::cpu {

struct ColsShape {
  int64_t n, h, w, c, ho, wo, kh, kw, sh, sw, ph, pw;
  int64_t m() const { return n * ho * wo; }
  int64_t k() const { return c * kh * kw; }
};

/// cols rows [m0, m1) from x (see above).
template <typename T>
void im2col_nhwc(const ColsShape& s, const T* x, T* cols, int64_t m0, int64_t m1) {
  const int64_t kk = s.kh * s.kw, k = s.k();
  for (int64_t m = m0; m < m1; ++m) {
    const int64_t ow = m % s.wo, oh = (m / s.wo) % s.ho, n = m / (s.wo * s.ho);
    T* row = cols + m * k;
    for (int64_t i = 0; i < s.kh; ++i) {
      const int64_t ih = oh * s.sh - s.ph + i;
      for (int64_t j = 0; j < s.kw; ++j) {
        const int64_t iw = ow * s.sw - s.pw + j;
        T* dst = row + i * s.kw + j;
        if (ih < 0 || ih >= s.h || iw < 0 || iw >= s.w) {
          for (int64_t c = 0; c < s.c; ++c) dst[c * kk] = T(0.0f);
          continue;
        }
        const T* src = x + ((n * s.h + ih) * s.w + iw) * s.c;
        if (kk == 1) {
          for (int64_t c = 0; c < s.c; ++c) dst[c] = src[c];
        } else {
          for (int64_t c = 0; c < s.c; ++c) dst[c * kk] = src[c];
        }
      }
    }
  }
}

/// dx rows [p0, p1) of (N·H·W, C) = the sum of every cols entry read from that position (the
/// adjoint of im2col), accumulated in float per element and rounded once; acc holds C floats.
/// cols may be float for a bf16 dx (the GEMM's unrounded sums: one rounding in all).
/// A gather (each output written once), so the split over threads is race-free and the summation
/// order fixed: deterministic.
template <typename C, typename T>
void col2im_nhwc(const ColsShape& s, const C* cols, T* dx, float* acc, int64_t p0, int64_t p1) {
  const int64_t kk = s.kh * s.kw, k = s.k();
  for (int64_t p = p0; p < p1; ++p) {
    const int64_t iw = p % s.w, ih = (p / s.w) % s.h, n = p / (s.w * s.h);
    for (int64_t c = 0; c < s.c; ++c) acc[c] = 0.0f;
    for (int64_t i = 0; i < s.kh; ++i) {
      const int64_t th = ih + s.ph - i;  // = oh·sh
      if (th < 0 || th % s.sh != 0 || th / s.sh >= s.ho) continue;
      const int64_t oh = th / s.sh;
      for (int64_t j = 0; j < s.kw; ++j) {
        const int64_t tw = iw + s.pw - j;
        if (tw < 0 || tw % s.sw != 0 || tw / s.sw >= s.wo) continue;
        const int64_t ow = tw / s.sw;
        const C* src = cols + ((n * s.ho + oh) * s.wo + ow) * k + i * s.kw + j;
        for (int64_t c = 0; c < s.c; ++c) acc[c] += static_cast<float>(src[c * kk]);
      }
    }
    T* out = dx + p * s.c;
    for (int64_t c = 0; c < s.c; ++c) out[c] = T(acc[c]);
  }
}

}  // namespace precis::cpu
