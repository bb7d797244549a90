#pragma once
// The erf form of gelu and its derivative in fp32, vectorised: y = x·Φ(x) and
// gelu'(x) = Φ(x) + x·φ(x), with Φ and φ sharing one exponential. Eigen's fp32 erf (a rational
// function with a division per element) and a separate exp cost gelu's backward and linear_gelu's
// epilogue about 3.6 ms per BERT-mini layer at 2048 tokens on an AMX core (GEMM 1.8 ms): the
// elementwise pass, not the GEMM, was the price of recomputing that layer under checkpointing.
//
// Φ(x) = ½·erfc(−x/√2) with z = |x|/√2 and erfc(z) = e^(−z²)·t·S(t), t = 1/(1 + z/2), S a
// degree-9 polynomial (the erfc form of Numerical Recipes' erfcc, with the exponential outside
// the polynomial): Φ = ½erfc(z) for x < 0 and 1 − ½erfc(z) otherwise, no cancellation on either
// side. e^(−z²) = e^(−x²/2) comes from vec_exp.h's exp_nonpositive with −x²/2 split into hi + lo
// by an FMA and lo applied as e^hi·(1 + lo): the rounding of x²/2 alone would cost x²/2·2^−24 of
// relative error in the tail (3e-6 at |x| = 10). Measured over every fp32 x in [−14, 14]
// against f64: gelu within 4.3e-7 of |gelu(x)| and gelu' within 4.2e-7 of |Φ(x)| + |x·φ(x)| down
// to 1e-37 (Eigen's erf: 1.5e-7 relative to |x|, which is worse where gelu(x) is small; its
// 1 + erf cancelled to an absolute ~1e-7 from x < −3 on); below that e^(−x²/2) is under FLT_MIN
// and flushed, an absolute error under 1e-37. tests/ops/vec_gelu_test.cpp checks it.
//
// Cost on one Zen 5 core (kBlock = 256 values in L1, ns per value, Eigen's erf form before):
// gelu 0.30 (0.30), gelu with gelu' 0.33 (0.63), g·gelu' 0.33 (0.62).
//
// Every lane runs the same sequence of fp32 operations with explicit FMAs (no contraction left to
// the compiler), so the AVX2, AVX-512 and scalar paths give the same bits and the result does not
// depend on how a caller splits the work: gelu, gelu_backward and linear_gelu's epilogue stay bit
// for bit the unfused pair's in any split. Special values: ±inf → Φ = 1/0 (gelu(+inf) = inf,
// gelu(−inf) = NaN as in PyTorch), NaN propagates to both outputs.
#include <cmath>
#include <cstdint>
#include <cstring>

#include "ops/cpu/vec_exp.h"

namespace precis::cpu {

namespace gelu_vec_detail {

inline constexpr float kInvSqrt2Pi = 0.39894228040143267794f;
inline constexpr float kClamp = 16.0f;  // e^(−x²/2) is 0 in fp32 from |x| = 13.2 on
// S(t) ≈ erfc(z)·e^(z²)/t on t = 1/(1 + z/2) ∈ [0.17, 1] (z from 9.8, past the 9.3 where e^(−z²)
// is flushed, down to 0), lowest degree first: a degree-9 fit, 1.9e-8 relative (3.8e-8 with the
// coefficients in fp32).
inline constexpr float kS[10] = {2.8206274678e-01f, 2.8289356323e-01f, 2.3832240048e-01f,  2.2712663999e-01f,
                                 -1.0310934240e-01f, 4.3054366760e-01f, -6.8152983319e-01f, 4.3779551320e-01f,
                                 -1.2711417887e-01f, 1.3008804571e-02f};

/// vec_exp.h's exp_nonpositive (AVX2 form) on one lane: the same operations, so the same bits.
inline float exp_nonpositive_scalar(float d) {
  using vec_detail::kExpQ0, vec_detail::kExpQ1, vec_detail::kExpQ2, vec_detail::kExpQ3, vec_detail::kExpQ4;
  d = 0.0f < d ? 0.0f : d;
  const float t = std::fma(d, vec_detail::kLog2e, vec_detail::kRoundMagic);
  const float n = t - vec_detail::kRoundMagic;
  float r = std::fma(-n, 0.693359375f, d);
  r = std::fma(n, 2.12194440e-4f, r);
  float q = std::fma(kExpQ4, r, kExpQ3);
  q = std::fma(q, r, kExpQ2);
  q = std::fma(q, r, kExpQ1);
  q = std::fma(q, r, kExpQ0);
  q = std::fma(q, r, 1.0f);
  const float e = std::fma(q, r, 1.0f);
  uint32_t ti;  // unsigned: the shift of a NaN's or an out-of-range t's bits must not overflow
  std::memcpy(&ti, &t, 4);
  const uint32_t bits = (ti - (0x4B400000u - 127u)) << 23;
  float p2;
  std::memcpy(&p2, &bits, 4);
  return d < vec_detail::kExpLo ? 0.0f : e * p2;
}

// Every lane function below computes y = gelu(x) when kY and d = gelu'(x) when kD, and only
// those: the forward alone skips the clamp and product gelu' needs, the backward gelu's product.
// The shared part gives the same bits either way.
inline constexpr float kHalfSqrt1_2 = 0.35355339059327376220f;  // t = 1/(1 + |x|·½/√2)

/// One element: the reference the vector paths match bit for bit.
template <bool kY, bool kD>
inline void gelu_erf_scalar(float x, float& y, float& d) {
  const float ax = std::fabs(x);
  const float axc = kClamp < ax ? kClamp : ax;  // min(kClamp, ax) as the vector min: NaN stays NaN
  // −x²/2 = hi + lo exactly (h = −axc/2 is exact), e = e^hi·(1 + lo).
  const float h = axc * -0.5f;
  const float hi = axc * h, lo = std::fma(axc, h, -hi);
  float e = exp_nonpositive_scalar(hi);
  e = std::fma(e, lo, e);
  const float t = 1.0f / std::fma(kHalfSqrt1_2, ax, 1.0f);
  // ½·S(t): the halving folded into the coefficients (exact).
  float s = std::fma(0.5f * kS[9], t, 0.5f * kS[8]);
  for (int k = 7; k >= 0; --k) s = std::fma(s, t, 0.5f * kS[k]);
  const float q = (e * t) * s;
  const float phi = x < 0.0f ? q : 1.0f - q;
  if constexpr (kY) y = x * phi;
  if constexpr (kD) {
    const float xc = x > kClamp ? kClamp : (x < -kClamp ? -kClamp : x);
    d = std::fma(xc * e, kInvSqrt2Pi, phi);
  }
}

#if PRECIS_VEC_EXP_AVX512
template <bool kY, bool kD>
[[gnu::target("avx2,fma")]] inline void gelu_erf_avx2_lanes(__m256 x, __m256& y, __m256& d) {
  const __m256 ax = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), x);
  // min/max return their second operand when it is NaN: a NaN x reaches every result.
  const __m256 axc = _mm256_min_ps(_mm256_set1_ps(kClamp), ax);
  const __m256 h = _mm256_mul_ps(axc, _mm256_set1_ps(-0.5f));
  const __m256 hi = _mm256_mul_ps(axc, h);
  const __m256 lo = _mm256_fmsub_ps(axc, h, hi);
  __m256 n;
  __m256 e = vec_detail::exp_nonpositive_avx2(hi, n);
  e = _mm256_fmadd_ps(e, lo, e);
  const __m256 t =
      _mm256_div_ps(_mm256_set1_ps(1.0f), _mm256_fmadd_ps(_mm256_set1_ps(kHalfSqrt1_2), ax, _mm256_set1_ps(1.0f)));
  __m256 s = _mm256_fmadd_ps(_mm256_set1_ps(0.5f * kS[9]), t, _mm256_set1_ps(0.5f * kS[8]));
  for (int k = 7; k >= 0; --k) s = _mm256_fmadd_ps(s, t, _mm256_set1_ps(0.5f * kS[k]));
  const __m256 q = _mm256_mul_ps(_mm256_mul_ps(e, t), s);
  const __m256 neg = _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_LT_OQ);
  const __m256 phi = _mm256_blendv_ps(_mm256_sub_ps(_mm256_set1_ps(1.0f), q), q, neg);
  if constexpr (kY) y = _mm256_mul_ps(x, phi);
  if constexpr (kD) {
    const __m256 xc = _mm256_min_ps(_mm256_set1_ps(kClamp), _mm256_max_ps(_mm256_set1_ps(-kClamp), x));
    d = _mm256_fmadd_ps(_mm256_mul_ps(xc, e), _mm256_set1_ps(kInvSqrt2Pi), phi);
  }
}

// GCC 12 reports its own _mm512_undefined_ps inside _mm512_max_ps/_mm512_min_ps as maybe
// uninitialised where they inline here (the false positive vec_exp.h silences for its include).
#pragma GCC diagnostic push
#ifndef __clang__
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
template <bool kY, bool kD>
[[gnu::target("avx512f")]] inline void gelu_erf_avx512_lanes(__m512 x, __m512& y, __m512& d) {
  const __m512 ax = _mm512_abs_ps(x);
  const __m512 axc = _mm512_min_ps(_mm512_set1_ps(kClamp), ax);
  const __m512 h = _mm512_mul_ps(axc, _mm512_set1_ps(-0.5f));
  const __m512 hi = _mm512_mul_ps(axc, h);
  const __m512 lo = _mm512_fmsub_ps(axc, h, hi);
  __m512 e = vec_detail::exp_nonpositive_avx512(hi);
  e = _mm512_fmadd_ps(e, lo, e);
  const __m512 t =
      _mm512_div_ps(_mm512_set1_ps(1.0f), _mm512_fmadd_ps(_mm512_set1_ps(kHalfSqrt1_2), ax, _mm512_set1_ps(1.0f)));
  __m512 s = _mm512_fmadd_ps(_mm512_set1_ps(0.5f * kS[9]), t, _mm512_set1_ps(0.5f * kS[8]));
  for (int k = 7; k >= 0; --k) s = _mm512_fmadd_ps(s, t, _mm512_set1_ps(0.5f * kS[k]));
  const __m512 q = _mm512_mul_ps(_mm512_mul_ps(e, t), s);
  const __mmask16 neg = _mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_LT_OQ);
  const __m512 phi = _mm512_mask_blend_ps(neg, _mm512_sub_ps(_mm512_set1_ps(1.0f), q), q);
  if constexpr (kY) y = _mm512_mul_ps(x, phi);
  if constexpr (kD) {
    const __m512 xc = _mm512_min_ps(_mm512_set1_ps(kClamp), _mm512_max_ps(_mm512_set1_ps(-kClamp), x));
    d = _mm512_fmadd_ps(_mm512_mul_ps(xc, e), _mm512_set1_ps(kInvSqrt2Pi), phi);
  }
}

/// The loops below: y = gelu(x) when kY, d = gelu'(x) when kD, and then d = g·gelu'(x) where g is
/// non-null. Tails run in padded vectors (the same lane arithmetic).
template <bool kY, bool kD>
[[gnu::target("avx2,fma")]] inline void gelu_erf_avx2(const float* g, const float* x, float* y, float* d, int64_t n) {
  for (int64_t i = 0; i < n; i += 8) {
    const int64_t m = n - i < 8 ? n - i : 8;
    alignas(32) float tmp[8] = {};
    std::memcpy(tmp, x + i, static_cast<size_t>(m) * sizeof(float));
    __m256 yv = _mm256_setzero_ps(), dv = _mm256_setzero_ps();
    gelu_erf_avx2_lanes<kY, kD>(_mm256_load_ps(tmp), yv, dv);
    if (kD && g != nullptr) {
      std::memcpy(tmp, g + i, static_cast<size_t>(m) * sizeof(float));
      dv = _mm256_mul_ps(_mm256_load_ps(tmp), dv);
    }
    if (m == 8) {
      if constexpr (kY) _mm256_storeu_ps(y + i, yv);
      if constexpr (kD) _mm256_storeu_ps(d + i, dv);
      continue;
    }
    if constexpr (kY) {
      _mm256_store_ps(tmp, yv);
      std::memcpy(y + i, tmp, static_cast<size_t>(m) * sizeof(float));
    }
    if constexpr (kD) {
      _mm256_store_ps(tmp, dv);
      std::memcpy(d + i, tmp, static_cast<size_t>(m) * sizeof(float));
    }
  }
}

template <bool kY, bool kD>
[[gnu::target("avx512f")]] inline void gelu_erf_avx512(const float* g, const float* x, float* y, float* d,
                                                       int64_t n) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = n - i >= 16 ? __mmask16(0xFFFF) : static_cast<__mmask16>((1u << (n - i)) - 1);
    __m512 yv = _mm512_setzero_ps(), dv = _mm512_setzero_ps();
    gelu_erf_avx512_lanes<kY, kD>(_mm512_maskz_loadu_ps(m, x + i), yv, dv);
    if (kD && g != nullptr) dv = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, g + i), dv);
    if constexpr (kY) _mm512_mask_storeu_ps(y + i, m, yv);
    if constexpr (kD) _mm512_mask_storeu_ps(d + i, m, dv);
  }
}
#pragma GCC diagnostic pop
#endif

template <bool kY, bool kD>
inline void gelu_erf_scalar_loop(const float* g, const float* x, float* y, float* d, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    float yv = 0.0f, dv = 0.0f;
    gelu_erf_scalar<kY, kD>(x[i], yv, dv);
    if (kD && g != nullptr) dv = g[i] * dv;
    if constexpr (kY) y[i] = yv;
    if constexpr (kD) d[i] = dv;
  }
}

template <bool kY, bool kD>
inline void gelu_erf_path(const float* g, const float* x, float* y, float* d, int64_t n) {
#if PRECIS_VEC_EXP_AVX512
  if (vec_detail::use_avx512()) return gelu_erf_avx512<kY, kD>(g, x, y, d, n);
  gelu_erf_avx2<kY, kD>(g, x, y, d, n);
#else
  gelu_erf_scalar_loop<kY, kD>(g, x, y, d, n);
#endif
}

/// y where y is non-null, d (times g where g is non-null) where d is non-null.
inline void gelu_erf_any(const float* g, const float* x, float* y, float* d, int64_t n) {
  if (y != nullptr && d != nullptr) return gelu_erf_path<true, true>(g, x, y, d, n);
  if (y != nullptr) return gelu_erf_path<true, false>(g, x, y, d, n);
  if (d != nullptr) gelu_erf_path<false, true>(g, x, y, d, n);
}

}  // namespace gelu_vec_detail

/// y[i] = gelu(x[i]) (erf form) where y is non-null, and d[i] = gelu'(x[i]) where d is non-null,
/// for i < n. y and d may alias x (not each other).
inline void gelu_erf(const float* x, float* y, float* d, int64_t n) {
  gelu_vec_detail::gelu_erf_any(nullptr, x, y, d, n);
}

/// out[i] = g[i]·gelu'(x[i]) (erf form), the product of g with exactly gelu_erf's d. out may
/// alias g or x.
inline void gelu_erf_backward(const float* g, const float* x, float* out, int64_t n) {
  gelu_vec_detail::gelu_erf_any(g, x, nullptr, out, n);
}

}  // namespace precis::cpu
