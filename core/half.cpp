// Scalar and bulk fp16/bf16 conversions.
//
// The scalar functions use integer arithmetic only, so their results do not depend on the
// floating-point environment (rounding mode, FTZ/DAZ) that other libraries may have changed.
// The vector paths are required to give bit-identical results to the scalar ones, NaNs included;
// the tests compare them over all 65536 patterns and long arrays.
#include "core/half.h"

#include <bit>

#if defined(__x86_64__) || defined(_M_X64)
// GCC 12's AVX-512 headers trip -Wmaybe-uninitialized on their own _mm512_undefined_* helpers
// (a known false positive); silence it for the intrinsics only.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
#define PRECIS_X86 1
#else
#define PRECIS_X86 0
#endif

namespace precis {

namespace detail {

float half_bits_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t out;
  if (exp == 0x1f) {
    // Inf stays inf; a NaN is returned quiet with its payload, as vcvtph2ps does, so the scalar
    // and vector paths agree bit for bit.
    out = sign | 0x7f800000u | (mant << 13) | (mant != 0 ? 0x00400000u : 0u);
  } else if (exp != 0) {
    out = sign | ((exp + (127 - 15)) << 23) | (mant << 13);
  } else if (mant == 0) {
    out = sign;
  } else {
    // Subnormal half: normalise so the leading one lands on bit 10 (the implicit bit).
    const int shift = std::countl_zero(mant) - 21;
    mant <<= shift;
    out = sign | (static_cast<uint32_t>(127 - 15 + 1 - shift) << 23) | ((mant & 0x3ffu) << 13);
  }
  return std::bit_cast<float>(out);
}

uint16_t float_to_half_bits(float f) {
  uint32_t u = std::bit_cast<uint32_t>(f);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  u &= 0x7fffffffu;
  if (u > 0x7f800000u) {
    // NaN: keep the top payload bits and force the quiet bit (what vcvtps2ph does).
    return static_cast<uint16_t>(sign | 0x7e00u | ((u >> 13) & 0x3ffu));
  }
  // 65520 = 0x477ff000 is halfway between 65504 (the largest half) and 65536; ties go to the even
  // neighbour, which is the overflow to infinity. Infinity itself lands here too.
  if (u >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);
  if (u >= 0x38800000u) {
    // Normal result. Adding 0xfff plus the lsb of the kept mantissa rounds to nearest even; a
    // carry out of the mantissa correctly bumps the exponent.
    const uint32_t lsb = (u >> 13) & 1u;
    u += 0xfffu + lsb;
    return static_cast<uint16_t>(sign | ((u - ((127u - 15u) << 23)) >> 13));
  }
  // Subnormal or zero result, in units of 2^-24. Anything at or below 2^-25 (the halfway point
  // to the smallest subnormal, whose even neighbour is zero) becomes zero.
  if (u <= 0x33000000u) return sign;
  const uint32_t e = u >> 23;                         // 102 ..= 112
  const uint32_t mant = (u & 0x7fffffu) | 0x800000u;  // with the implicit bit
  const uint32_t shift = 126 - e;                     // 14 ..= 24
  uint32_t r = mant >> shift;
  const uint32_t rem = mant & ((1u << shift) - 1u);
  const uint32_t halfway = 1u << (shift - 1);
  if (rem > halfway || (rem == halfway && (r & 1u))) ++r;  // r == 0x400 is the smallest normal
  return static_cast<uint16_t>(sign | r);
}

}  // namespace detail

namespace {

// ---- scalar loops: the fallback, and the tails of the vector loops --------------------------

void float_to_half_scalar(const float* src, uint16_t* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = detail::float_to_half_bits(src[i]);
}
void half_to_float_scalar(const uint16_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = detail::half_bits_to_float(src[i]);
}
void float_to_bf16_scalar(const float* src, uint16_t* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = detail::float_to_bf16_bits(src[i]);
}
void bf16_to_float_scalar(const uint16_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = detail::bf16_bits_to_float(src[i]);
}

#if PRECIS_X86

constexpr int kRoundNearest = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;

// ---- AVX-512 ----------------------------------------------------------------------------------
// vcvtps2ph / vcvtph2ps take the rounding mode from the immediate (round to nearest even, what the
// scalar path implements) and treat NaNs as the scalar path does. Tails use masked loads and
// stores (AVX-512BW/VL for 16-bit elements), so no scalar tail is needed. Every CPU with
// AVX-512F that matters here (Skylake-SP onwards, Zen 4/5) also has BW and VL.
#define PRECIS_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl")))

PRECIS_AVX512 inline __mmask16 tail_mask(int64_t left) {
  return static_cast<__mmask16>((1u << left) - 1u);  // left < 16
}

PRECIS_AVX512 void float_to_half_avx512(const float* src, uint16_t* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i h = _mm512_cvtps_ph(_mm512_loadu_ps(src + i), kRoundNearest);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), h);
  }
  if (i < n) {
    const __mmask16 m = tail_mask(n - i);
    const __m256i h = _mm512_cvtps_ph(_mm512_maskz_loadu_ps(m, src + i), kRoundNearest);
    _mm256_mask_storeu_epi16(dst + i, m, h);
  }
}

PRECIS_AVX512 void half_to_float_avx512(const uint16_t* src, float* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i));
    _mm512_storeu_ps(dst + i, _mm512_cvtph_ps(h));
  }
  if (i < n) {
    const __mmask16 m = tail_mask(n - i);
    _mm512_mask_storeu_ps(dst + i, m, _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, src + i)));
  }
}

// bf16 rounding of 16 lanes in integer arithmetic, exact for every input (as the scalar path).
PRECIS_AVX512 inline __m256i bf16_round_avx512(__m512i u) {
  const __m512i abs = _mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff));
  const __mmask16 nan = _mm512_cmpgt_epu32_mask(abs, _mm512_set1_epi32(0x7f800000));
  const __m512i hi = _mm512_srli_epi32(u, 16);
  const __m512i lsb = _mm512_and_si512(hi, _mm512_set1_epi32(1));
  __m512i r = _mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff)));
  r = _mm512_srli_epi32(r, 16);
  r = _mm512_mask_mov_epi32(r, nan, _mm512_or_si512(hi, _mm512_set1_epi32(0x40)));
  return _mm512_cvtepi32_epi16(r);
}

// vcvtne2ps2bf16 (AVX-512-BF16) rounds to nearest even and returns NaNs quiet exactly as the
// scalar path does, but treats subnormal inputs as zero (measured on Zen 5: 0x807fffff -> 0x8000
// where rounding gives 0x8080). Blocks holding a subnormal therefore take the integer path; they
// are rare in practice, and the test costs two mask instructions per 16 lanes. On Zen 5 this beat
// the integer path alone (whose 32-to-16-bit narrowing is slow) by ~1.5x.
#define PRECIS_AVX512_BF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))

PRECIS_AVX512_BF16 inline __mmask16 subnormal_lanes(__m512i u) {
  return _mm512_testn_epi32_mask(u, _mm512_set1_epi32(0x7f800000)) &
         _mm512_test_epi32_mask(u, _mm512_set1_epi32(0x007fffff));
}

PRECIS_AVX512_BF16 void float_to_bf16_avx512bf16(const float* src, uint16_t* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m512i a = _mm512_loadu_si512(src + i);
    const __m512i b = _mm512_loadu_si512(src + i + 16);
    if ((subnormal_lanes(a) | subnormal_lanes(b)) == 0) [[likely]] {
      const __m512bh r = _mm512_cvtne2ps_pbh(_mm512_castsi512_ps(b), _mm512_castsi512_ps(a));
      _mm512_storeu_si512(dst + i, reinterpret_cast<const __m512i&>(r));
    } else {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), bf16_round_avx512(a));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i + 16), bf16_round_avx512(b));
    }
  }
  for (; i < n; i += 16) {
    const __mmask16 m = n - i >= 16 ? __mmask16{0xffff} : tail_mask(n - i);
    const __m512i a = _mm512_maskz_loadu_epi32(m, src + i);
    __m256i r;
    if (subnormal_lanes(a) == 0) {
      const __m256bh h = _mm512_cvtneps_pbh(_mm512_castsi512_ps(a));
      r = reinterpret_cast<const __m256i&>(h);
    } else {
      r = bf16_round_avx512(a);
    }
    _mm256_mask_storeu_epi16(dst + i, m, r);
  }
}

#undef PRECIS_AVX512_BF16

PRECIS_AVX512 void bf16_to_float_avx512(const uint16_t* src, float* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i));
    _mm512_storeu_si512(dst + i, _mm512_slli_epi32(_mm512_cvtepu16_epi32(b), 16));
  }
  if (i < n) {
    const __mmask16 m = tail_mask(n - i);
    const __m512i u = _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, src + i)), 16);
    _mm512_mask_storeu_epi32(dst + i, m, u);
  }
}

#undef PRECIS_AVX512

// ---- F16C / AVX2 ------------------------------------------------------------------------------
// The library is compiled with -mf16c -mavx2 (cmake/precis_library.cmake), so these need no
// target attribute; they are the baseline on x86-64.

void float_to_half_avx2(const float* src, uint16_t* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(src + i), kRoundNearest);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), h);
  }
  float_to_half_scalar(src + i, dst + i, n - i);
}

void half_to_float_avx2(const uint16_t* src, float* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));
  }
  half_to_float_scalar(src + i, dst + i, n - i);
}

void float_to_bf16_avx2(const float* src, uint16_t* dst, int64_t n) {
  const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff);
  const __m256i inf = _mm256_set1_epi32(0x7f800000);
  const __m256i one = _mm256_set1_epi32(1);
  const __m256i bias = _mm256_set1_epi32(0x7fff);
  const __m256i quiet = _mm256_set1_epi32(0x40);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m256i r[2];
    for (int k = 0; k < 2; ++k) {
      const __m256i u = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i + 8 * k));
      // Signed compare is right here: |u| < 2^31 on both sides.
      const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, abs_mask), inf);
      const __m256i hi = _mm256_srli_epi32(u, 16);
      const __m256i lsb = _mm256_and_si256(hi, one);
      const __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_add_epi32(bias, lsb)), 16);
      r[k] = _mm256_blendv_epi8(rounded, _mm256_or_si256(hi, quiet), nan);
    }
    // packus works per 128-bit lane; the permute restores element order. Values are < 2^16, so
    // the unsigned saturation never triggers.
    const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(r[0], r[1]), 0xd8);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), packed);
  }
  float_to_bf16_scalar(src + i, dst + i, n - i);
}

void bf16_to_float_avx2(const uint16_t* src, float* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    const __m256i u = _mm256_slli_epi32(_mm256_cvtepu16_epi32(b), 16);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), u);
  }
  bf16_to_float_scalar(src + i, dst + i, n - i);
}

#endif  // PRECIS_X86

// The implementations in use; chosen once from what the CPU supports (tests may lower the level).
struct Kernels {
  detail::SimdLevel level = detail::SimdLevel::scalar;
  void (*f2h)(const float*, uint16_t*, int64_t) = float_to_half_scalar;
  void (*h2f)(const uint16_t*, float*, int64_t) = half_to_float_scalar;
  void (*f2b)(const float*, uint16_t*, int64_t) = float_to_bf16_scalar;
  void (*b2f)(const uint16_t*, float*, int64_t) = bf16_to_float_scalar;
};

detail::SimdLevel best_level() {
#if PRECIS_X86
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl"))
    return detail::SimdLevel::avx512;
#if defined(__F16C__) && defined(__AVX2__)
  return detail::SimdLevel::avx2;
#endif
#endif
  return detail::SimdLevel::scalar;
}

Kernels make_kernels(detail::SimdLevel level) {
  Kernels k;
  k.level = level;
#if PRECIS_X86
  if (level == detail::SimdLevel::avx512) {
    k.f2h = float_to_half_avx512;
    k.h2f = half_to_float_avx512;
    // Without AVX-512-BF16 the AVX2 integer kernel is used: on Zen 5 it outran the same
    // arithmetic on 512-bit vectors, whose narrowing step (vpmovdw) is slow.
    k.f2b = __builtin_cpu_supports("avx512bf16") ? float_to_bf16_avx512bf16 : float_to_bf16_avx2;
    k.b2f = bf16_to_float_avx512;
  }
#if defined(__F16C__) && defined(__AVX2__)
  if (level == detail::SimdLevel::avx2) {
    k.f2h = float_to_half_avx2;
    k.h2f = half_to_float_avx2;
    k.f2b = float_to_bf16_avx2;
    k.b2f = bf16_to_float_avx2;
  }
#endif
#endif
  return k;
}

Kernels& kernels() {
  static Kernels k = make_kernels(best_level());
  return k;
}

}  // namespace

namespace detail {

SimdLevel conversion_simd_level() { return kernels().level; }

void set_conversion_simd_level(SimdLevel level) {
  const SimdLevel best = best_level();
  kernels() = make_kernels(static_cast<int>(level) < static_cast<int>(best) ? level : best);
}

}  // namespace detail

void float_to_half(const float* src, Half* dst, int64_t n) {
  kernels().f2h(src, reinterpret_cast<uint16_t*>(dst), n);
}
void half_to_float(const Half* src, float* dst, int64_t n) {
  kernels().h2f(reinterpret_cast<const uint16_t*>(src), dst, n);
}
void float_to_bfloat16(const float* src, BFloat16* dst, int64_t n) {
  kernels().f2b(src, reinterpret_cast<uint16_t*>(dst), n);
}
void bfloat16_to_float(const BFloat16* src, float* dst, int64_t n) {
  kernels().b2f(reinterpret_cast<const uint16_t*>(src), dst, n);
}

}  // namespace precis
