#pragma once
// Vectorised fp32 exponentials and row maxima for the softmax-family kernels
// (ops/cpu/softmax_rows.h). Written on GCC/Clang vector extensions (explicit SIMD without
// intrinsics) rather than left to the auto-vectoriser, which refuses the clamping selects under
// the default -ftrapping-math. The library is built for AVX2; on CPUs with AVX-512 the row loops
// run a 16-lane copy compiled for it (chosen once at run time), which halves the cost of the
// exponential on machines with full-width AVX-512 units. Both paths compute the same value in
// every lane; only the order of the partial sums differs.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#if defined(__GNUC__) && defined(__x86_64__)
#define PRECIS_VEC_EXP_AVX512 1
// GCC 12's AVX-512 headers trip -Wmaybe-uninitialized on their own _mm512_undefined_* helpers
// (a known false positive, as in core/half.cpp); silenced for the intrinsics only.
#pragma GCC diagnostic push
#ifndef __clang__  // clang has no such warning, and warns about the unknown name
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>
#pragma GCC diagnostic pop
#else
#define PRECIS_VEC_EXP_AVX512 0
#endif

namespace precis::cpu {

namespace vec_detail {

template <int W> struct Simd;  // W fp32 / int32 lanes
template <> struct Simd<8> {
  typedef float F __attribute__((vector_size(32)));
  typedef int32_t I __attribute__((vector_size(32)));
};
template <> struct Simd<16> {
  typedef float F __attribute__((vector_size(64)));
  typedef int32_t I __attribute__((vector_size(64)));
};

// Everything below is inlined into the AVX2 or the AVX-512 entry point, so each is compiled for
// that entry point's instruction set. Vectors travel by reference: passing 64-byte vectors by
// value from code not compiled for AVX-512 would be an ABI change (GCC's -Wpsabi).
#define PRECIS_VEC_INLINE [[gnu::always_inline]] inline

template <int W, typename F = typename Simd<W>::F>
PRECIS_VEC_INLINE void load(const float* p, F& v) {
  std::memcpy(&v, p, sizeof v);
}
template <int W, typename F = typename Simd<W>::F>
PRECIS_VEC_INLINE void store(float* p, const F& v) {
  std::memcpy(p, &v, sizeof v);
}
// The first n (< W) lanes from p, the others set to fill.
template <int W, typename F = typename Simd<W>::F>
PRECIS_VEC_INLINE void load_partial(const float* p, int64_t n, float fill, F& v) {
  float tmp[W];
  for (int k = 0; k < W; ++k) tmp[k] = fill;
  std::memcpy(tmp, p, static_cast<size_t>(n) * sizeof(float));
  std::memcpy(&v, tmp, sizeof v);
}
template <int W, typename F = typename Simd<W>::F>
PRECIS_VEC_INLINE void store_partial(float* p, const F& v, int64_t n) {
  std::memcpy(p, &v, static_cast<size_t>(n) * sizeof(float));
}

inline constexpr float kRoundMagic = 12582912.0f;  // 1.5·2^23: adding it rounds to an integer in the low bits
inline constexpr float kLog2e = 1.44269504088896341f;

// exp(x) = 2^n · exp(r): n = round(x·log2 e) and exp(r) for r = x − n·ln2 (Cody-Waite split
// ln2 = 0.693359375 − 2.12194440e-4, |r| <= ln2/2) as 1 + r + r²·P(r), P the Cephes degree-5
// minimax polynomial (about 1 ulp).
template <int W, typename F = typename Simd<W>::F, typename I = typename Simd<W>::I>
PRECIS_VEC_INLINE void exp_reduced(const F& x, I& n_out, F& out) {
  const F t = x * kLog2e + kRoundMagic;
  n_out = (I)t - (I)(F{} + kRoundMagic);
  const F n = t - kRoundMagic;
  F r = x - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  F p = F{} + 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  out = p * (r * r) + r + 1.0f;
}

// Full-range exp: subnormal results come out gradually (2^n applied as two normal factors),
// results below the smallest subnormal are exactly 0 (exp(−inf) = 0), +inf above ln(FLT_MAX),
// NaN propagates.
template <int W, typename F = typename Simd<W>::F, typename I = typename Simd<W>::I>
PRECIS_VEC_INLINE void exp_full(const F& x, F& out) {
  const F lo = F{} - 104.0f, hi = F{} + 88.72283905206835f;
  F xc = x < lo ? lo : x;
  xc = xc > hi ? hi : xc;
  I n;
  F p;
  exp_reduced<W>(xc, n, p);
  const I n1 = n >> 1, n2 = n - n1;  // each in [-75, 64]
  const F v = (p * (F)((n1 + 127) << 23)) * (F)((n2 + 127) << 23);
  out = x > hi ? F{} + std::numeric_limits<float>::infinity() : v;
}

template <int W, typename F = typename Simd<W>::F>
PRECIS_VEC_INLINE float hsum(const F& v) {
  float t = 0;
  for (int k = 0; k < W; ++k) t += v[k];
  return t;
}

template <int W>
PRECIS_VEC_INLINE float max_impl(const float* x, int64_t n) {
  using F = typename Simd<W>::F;
  const float ninf = -std::numeric_limits<float>::infinity();
  F m0 = F{} + ninf, m1 = F{} + ninf, a, b;
  int64_t i = 0;
  for (; i + 2 * W <= n; i += 2 * W) {
    load<W>(x + i, a);
    load<W>(x + i + W, b);
    m0 = a > m0 ? a : m0;
    m1 = b > m1 ? b : m1;
  }
  for (; i < n; i += W) {
    load_partial<W>(x + i, std::min<int64_t>(W, n - i), ninf, a);
    m0 = a > m0 ? a : m0;
  }
  m0 = m1 > m0 ? m1 : m0;
  float m = m0[0];
  for (int k = 1; k < W; ++k) m = m0[k] > m ? m0[k] : m;
  return m;
}

// y[i] = exp(x[i]) − full range.
template <int W>
PRECIS_VEC_INLINE void exp_array_impl(const float* x, float* y, int64_t n) {
  using F = typename Simd<W>::F;
  F a, e;
  int64_t i = 0;
  for (; i + W <= n; i += W) {
    load<W>(x + i, a);
    exp_full<W>(a, e);
    store<W>(y + i, e);
  }
  if (i < n) {
    load_partial<W>(x + i, n - i, 0.0f, a);
    exp_full<W>(a, e);
    store_partial<W>(y + i, e, n - i);
  }
}

#undef PRECIS_VEC_INLINE

// exp(d) for d = x − shift <= 0 (x − max, log-probabilities), the shifted exponential under the
// softmax-family kernels, written on intrinsics with every FMA explicit so that the AVX2 and AVX-512
// paths give the same bits: n = round(d·log2 e) by the 1.5·2^23 trick, r = d − n·ln2 (Cody-Waite,
// as exp_reduced), exp(r) = 1 + r·(1 + r·Q(r)) with Q our own degree-4 relative-minimax fit to
// (e^r − 1 − r)/r² on |r| <= ln2/2 (fit error 4e-9; about 1 ulp after rounding), then ·2^n: a
// shift of the exponent bits (AVX2) or vscalefps (AVX-512), the same exact product either way.
// Results below FLT_MIN (d < −87.34, −inf) are exactly 0; d > 0 is treated as 0; NaN propagates.
// About 15 vector operations for 16 exponentials where the shared exp_reduced form took 21: the
// exponential is most of cross_entropy's and softmax's time at a vocabulary-wide row.
inline constexpr float kExpQ4 = 1.3814610429e-3f, kExpQ3 = 8.3687100559e-3f, kExpQ2 = 4.1668388993e-2f,
                       kExpQ1 = 1.6666521132e-1f, kExpQ0 = 4.9999994040e-1f;
inline constexpr float kExpLo = -87.33654475f;  // ln(FLT_MIN)

#if PRECIS_VEC_EXP_AVX512
[[gnu::target("avx2,fma")]] inline __m256 exp_nonpositive_avx2(__m256 d, __m256& n) {
  d = _mm256_min_ps(_mm256_setzero_ps(), d);  // d > 0 → 0; a NaN d is kept (MINPS returns its second operand)
  const __m256 t = _mm256_fmadd_ps(d, _mm256_set1_ps(kLog2e), _mm256_set1_ps(kRoundMagic));
  n = _mm256_sub_ps(t, _mm256_set1_ps(kRoundMagic));
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), d);
  r = _mm256_fmadd_ps(n, _mm256_set1_ps(2.12194440e-4f), r);
  __m256 q = _mm256_fmadd_ps(_mm256_set1_ps(kExpQ4), r, _mm256_set1_ps(kExpQ3));
  q = _mm256_fmadd_ps(q, r, _mm256_set1_ps(kExpQ2));
  q = _mm256_fmadd_ps(q, r, _mm256_set1_ps(kExpQ1));
  q = _mm256_fmadd_ps(q, r, _mm256_set1_ps(kExpQ0));
  q = _mm256_fmadd_ps(q, r, _mm256_set1_ps(1.0f));
  const __m256 e = _mm256_fmadd_ps(q, r, _mm256_set1_ps(1.0f));
  // 2^n from the integer in t's low mantissa bits: (n + 127) << 23, n in [−126, 0] where kept.
  const __m256i bits = _mm256_slli_epi32(
      _mm256_sub_epi32(_mm256_castps_si256(t), _mm256_set1_epi32(0x4B400000 - 127)), 23);
  const __m256 keep = _mm256_cmp_ps(d, _mm256_set1_ps(kExpLo), _CMP_NLT_UQ);  // d >= lo, or NaN
  return _mm256_and_ps(keep, _mm256_mul_ps(e, _mm256_castsi256_ps(bits)));
}

[[gnu::target("avx2,fma")]] inline float exp_shift_sum_avx2(const float* x, float* y, int64_t n, float shift,
                                                           float scale) {
  const __m256 sh = _mm256_set1_ps(shift), sc = _mm256_set1_ps(scale);
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps(), k0, k1;
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256 e0 = exp_nonpositive_avx2(_mm256_sub_ps(_mm256_loadu_ps(x + i), sh), k0);
    const __m256 e1 = exp_nonpositive_avx2(_mm256_sub_ps(_mm256_loadu_ps(x + i + 8), sh), k1);
    acc0 = _mm256_add_ps(acc0, e0);
    acc1 = _mm256_add_ps(acc1, e1);
    if (y) {
      _mm256_storeu_ps(y + i, _mm256_mul_ps(e0, sc));
      _mm256_storeu_ps(y + i + 8, _mm256_mul_ps(e1, sc));
    }
  }
  for (; i < n; i += 8) {
    const int64_t m = std::min<int64_t>(8, n - i);
    // Padding lanes hold −inf: exp gives exactly 0 there.
    float tmp[8];
    for (int k = 0; k < 8; ++k) tmp[k] = -std::numeric_limits<float>::infinity();
    std::memcpy(tmp, x + i, static_cast<size_t>(m) * sizeof(float));
    const __m256 e0 = exp_nonpositive_avx2(_mm256_sub_ps(_mm256_loadu_ps(tmp), sh), k0);
    acc0 = _mm256_add_ps(acc0, e0);
    if (y) {
      _mm256_storeu_ps(tmp, _mm256_mul_ps(e0, sc));
      std::memcpy(y + i, tmp, static_cast<size_t>(m) * sizeof(float));
    }
  }
  float lanes[8];
  _mm256_storeu_ps(lanes, _mm256_add_ps(acc0, acc1));
  float t = 0;
  for (int k = 0; k < 8; ++k) t += lanes[k];
  return t;
}
#else
// Elsewhere: the same arithmetic on vector extensions (the compiler decides about contraction).
template <int W, typename F = typename Simd<W>::F, typename I = typename Simd<W>::I>
[[gnu::always_inline]] inline void exp_nonpositive(F d, F& out) {
  const F zero{};
  d = zero < d ? zero : d;
  const F t = d * kLog2e + kRoundMagic;
  const F n = t - kRoundMagic;
  F r = d - n * 0.693359375f;
  r = r + n * 2.12194440e-4f;
  F q = (F{} + kExpQ4) * r + kExpQ3;
  q = q * r + kExpQ2;
  q = q * r + kExpQ1;
  q = q * r + kExpQ0;
  q = q * r + 1.0f;
  const F e = q * r + 1.0f;
  const F v = e * (F)(((I)t - (0x4B400000 - 127)) << 23);
  out = d < kExpLo ? zero : v;
}

inline float exp_shift_sum_avx2(const float* x, float* y, int64_t n, float shift, float scale) {
  using F = typename Simd<8>::F;
  F acc0{}, acc1{}, a, b, e0, e1;
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    load<8>(x + i, a);
    load<8>(x + i + 8, b);
    exp_nonpositive<8>(a - shift, e0);
    exp_nonpositive<8>(b - shift, e1);
    acc0 += e0;
    acc1 += e1;
    if (y) {
      store<8>(y + i, e0 * scale);
      store<8>(y + i + 8, e1 * scale);
    }
  }
  for (; i < n; i += 8) {
    const int64_t m = std::min<int64_t>(8, n - i);
    load_partial<8>(x + i, m, -std::numeric_limits<float>::infinity(), a);
    exp_nonpositive<8>(a - shift, e0);
    acc0 += e0;
    if (y) store_partial<8>(y + i, e0 * scale, m);
  }
  return hsum<8>(acc0 + acc1);
}
#endif
inline float max_avx2(const float* x, int64_t n) { return max_impl<8>(x, n); }
inline void exp_array_avx2(const float* x, float* y, int64_t n) { exp_array_impl<8>(x, y, n); }

#if PRECIS_VEC_EXP_AVX512
// exp_nonpositive_avx2's arithmetic on 16 lanes, 2^n by vscalefps (zero-masked where d < lo).
[[gnu::target("avx512f")]] inline __m512 exp_nonpositive_avx512(__m512 d) {
  d = _mm512_min_ps(_mm512_setzero_ps(), d);
  const __m512 t = _mm512_fmadd_ps(d, _mm512_set1_ps(kLog2e), _mm512_set1_ps(kRoundMagic));
  const __m512 n = _mm512_sub_ps(t, _mm512_set1_ps(kRoundMagic));
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), d);
  r = _mm512_fmadd_ps(n, _mm512_set1_ps(2.12194440e-4f), r);
  __m512 q = _mm512_fmadd_ps(_mm512_set1_ps(kExpQ4), r, _mm512_set1_ps(kExpQ3));
  q = _mm512_fmadd_ps(q, r, _mm512_set1_ps(kExpQ2));
  q = _mm512_fmadd_ps(q, r, _mm512_set1_ps(kExpQ1));
  q = _mm512_fmadd_ps(q, r, _mm512_set1_ps(kExpQ0));
  q = _mm512_fmadd_ps(q, r, _mm512_set1_ps(1.0f));
  const __m512 e = _mm512_fmadd_ps(q, r, _mm512_set1_ps(1.0f));
  const __mmask16 keep = _mm512_cmp_ps_mask(d, _mm512_set1_ps(kExpLo), _CMP_NLT_UQ);
  return _mm512_maskz_scalef_ps(keep, e, n);
}

[[gnu::target("avx512f")]] inline float exp_shift_sum_avx512(const float* x, float* y, int64_t n, float shift,
                                                             float scale) {
  const __m512 sh = _mm512_set1_ps(shift), sc = _mm512_set1_ps(scale);
  __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m512 e0 = exp_nonpositive_avx512(_mm512_sub_ps(_mm512_loadu_ps(x + i), sh));
    const __m512 e1 = exp_nonpositive_avx512(_mm512_sub_ps(_mm512_loadu_ps(x + i + 16), sh));
    acc0 = _mm512_add_ps(acc0, e0);
    acc1 = _mm512_add_ps(acc1, e1);
    if (y) {
      _mm512_storeu_ps(y + i, _mm512_mul_ps(e0, sc));
      _mm512_storeu_ps(y + i + 16, _mm512_mul_ps(e1, sc));
    }
  }
  for (; i < n; i += 16) {
    const __mmask16 m = static_cast<__mmask16>((1u << std::min<int64_t>(16, n - i)) - 1);
    // Padding lanes hold −inf: exp gives exactly 0 there.
    const __m512 a = _mm512_mask_loadu_ps(_mm512_set1_ps(-std::numeric_limits<float>::infinity()), m, x + i);
    const __m512 e0 = exp_nonpositive_avx512(_mm512_sub_ps(a, sh));
    acc0 = _mm512_add_ps(acc0, e0);
    if (y) _mm512_mask_storeu_ps(y + i, m, _mm512_mul_ps(e0, sc));
  }
  float lanes[16];
  _mm512_storeu_ps(lanes, _mm512_add_ps(acc0, acc1));
  float t = 0;
  for (int k = 0; k < 16; ++k) t += lanes[k];
  return t;
}
[[gnu::target("avx512f")]] inline float max_avx512(const float* x, int64_t n) { return max_impl<16>(x, n); }
[[gnu::target("avx512f")]] inline void exp_array_avx512(const float* x, float* y, int64_t n) {
  exp_array_impl<16>(x, y, n);
}

// Whether the AVX-512 paths run: the CPU has AVX-512F, unless a test switched them off
// (avx512_switch() = false) to run the AVX2 paths on an AVX-512 CPU through whole kernels, and
// compare their bits or check both against f64 (tests/ops/norm_test.cpp). Kernels read it per
// call, so a test flips it only between kernel calls, and only to false or back.
inline std::atomic<bool>& avx512_switch() {
  static std::atomic<bool> on{[] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") != 0;
  }()};
  return on;
}
inline bool use_avx512() { return avx512_switch().load(std::memory_order_relaxed); }
#endif

}  // namespace vec_detail

/// y[i] = scale·exp(x[i] − shift) for i < n (y may be null: sum only; y may alias x); returns
/// Σ exp(x[i] − shift) in fp32. shift must be >= max(x) (the row max, or a log-sum-exp):
/// x[i] − shift > 0 is treated as 0. Terms below FLT_MIN are 0.
inline float exp_shift_sum(const float* x, float* y, int64_t n, float shift, float scale) {
#if PRECIS_VEC_EXP_AVX512
  if (vec_detail::use_avx512()) return vec_detail::exp_shift_sum_avx512(x, y, n, shift, scale);
#endif
  return vec_detail::exp_shift_sum_avx2(x, y, n, shift, scale);
}
/// The f64 form, with the library exp.
inline double exp_shift_sum(const double* x, double* y, int64_t n, double shift, double scale) {
  double acc[4] = {};
  for (int64_t i = 0; i < n; ++i) {
    const double e = std::exp(x[i] - shift);
    acc[i & 3] += e;
    if (y) y[i] = e * scale;
  }
  return (acc[0] + acc[1]) + (acc[2] + acc[3]);
}

/// max(x[0..n)) (−inf for n == 0). NaNs are skipped (a NaN row still gives a NaN softmax
/// through the sum of exponentials).
inline float row_max_f32(const float* x, int64_t n) {
#if PRECIS_VEC_EXP_AVX512
  if (vec_detail::use_avx512()) return vec_detail::max_avx512(x, n);
#endif
  return vec_detail::max_avx2(x, n);
}

/// y[i] = exp(x[i]) over the full fp32 range (y may alias x): about 1 ulp; exp(−inf) = 0,
/// gradual underflow, +inf on overflow, NaN propagates.
inline void exp_array(const float* x, float* y, int64_t n) {
#if PRECIS_VEC_EXP_AVX512
  if (vec_detail::use_avx512()) return vec_detail::exp_array_avx512(x, y, n);
#endif
  vec_detail::exp_array_avx2(x, y, n);
}
inline void exp_array(const double* x, double* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = std::exp(x[i]);
}

}  // namespace precis::cpu
