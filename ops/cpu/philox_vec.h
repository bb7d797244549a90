#pragma once
// Philox4x32-10 blocks of one stream, many at a time: the same numbers as philox_stream_block
// (core/philox.h), bit for bit, for the CPU dropout kernel (ops/cpu/dropout.cpp), which needs one
// block per four elements and spent ~3 ns per element in the scalar rounds (issue 16).
//
// Layout: each of the four counter words is one vector (c0..c3, one block per lane), so a round
// is a few whole-vector operations: the 32x32->64 multiplies come from vpmuludq on the even lanes
// and on the odd lanes shifted down, and two blends give the high and the low halves. The blocks
// are given to the lanes in a transposed order (lane 4k + j of a 16-lane vector holds block
// 4j + k; 2j + k for 8 lanes), so that after the rounds the usual 4x4 interleave inside each
// 128-bit lane (unpack lo/hi, 32 then 64 bits) leaves whole blocks in stream order in each output
// vector and no cross-lane shuffle is needed to write lanes in the order the elements use them.
// AVX-512 does 16 blocks per step, AVX2 (the build's baseline) 8; leftovers take the scalar
// function, as does everything off x86-64. The AVX-512 copy is chosen at run time with
// vec_exp.h's check.
#include <cstdint>

#include "core/philox.h"
#include "ops/cpu/vec_exp.h"

#if PRECIS_VEC_EXP_AVX512  // GCC/Clang on x86-64: the vector copies below exist
// GCC 12's AVX-512 headers trip -Wmaybe-uninitialized on their own _mm512_undefined_* helpers
// (a known false positive, as in core/half.cpp); silenced for the intrinsics only.
#pragma GCC diagnostic push
#ifndef __clang__  // clang has no such warning, and warns about the unknown name
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>
#pragma GCC diagnostic pop
#endif

namespace precis::cpu {

namespace philox_detail {

inline constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
inline constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;

// out[4k + l] = lane l of block first + k, for k < n: the scalar form, for tails.
inline void stream_lanes_scalar(uint64_t key, uint64_t first, int64_t n, uint32_t* out) {
  for (int64_t k = 0; k < n; ++k) {
    const PhiloxBlock b = philox_stream_block(key, first + static_cast<uint64_t>(k));
    for (int l = 0; l < 4; ++l) out[4 * k + l] = b.v[l];
  }
}

#if PRECIS_VEC_EXP_AVX512
// 8 blocks (32 lanes) per step. target("avx2") although AVX2 is the library's baseline, so a test
// or tool compiled without -mavx2 can include this header.
[[gnu::target("avx2"), gnu::always_inline]] inline void mulhilo_avx2(__m256i a, __m256i m, __m256i& hi, __m256i& lo) {
  const __m256i even = _mm256_mul_epu32(a, m);                         // lanes 0, 2, ...: 64-bit products
  const __m256i odd = _mm256_mul_epu32(_mm256_srli_epi64(a, 32), m);  // lanes 1, 3, ...
  hi = _mm256_blend_epi32(_mm256_srli_epi64(even, 32), odd, 0xAA);
  lo = _mm256_blend_epi32(even, _mm256_slli_epi64(odd, 32), 0xAA);
}

[[gnu::target("avx2"), gnu::always_inline]] inline void blocks8_avx2(uint64_t key, uint64_t first, uint32_t* out) {
  const __m256i order = _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7);
  const __m256i sign = _mm256_set1_epi32(static_cast<int>(0x80000000u));
  __m256i c0 = _mm256_add_epi32(_mm256_set1_epi32(static_cast<int>(static_cast<uint32_t>(first))), order);
  // The low word wrapped where c0 < order (unsigned): carry one into the high word (-1 there).
  const __m256i carry = _mm256_cmpgt_epi32(_mm256_xor_si256(order, sign), _mm256_xor_si256(c0, sign));
  __m256i c1 = _mm256_sub_epi32(_mm256_set1_epi32(static_cast<int>(static_cast<uint32_t>(first >> 32))), carry);
  __m256i c2 = _mm256_setzero_si256(), c3 = _mm256_setzero_si256();
  const __m256i m0 = _mm256_set1_epi32(static_cast<int>(kM0)), m1 = _mm256_set1_epi32(static_cast<int>(kM1));
  uint32_t k0 = static_cast<uint32_t>(key), k1 = static_cast<uint32_t>(key >> 32);
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      k0 += kW0;
      k1 += kW1;
    }
    __m256i hi0, lo0, hi1, lo1;
    mulhilo_avx2(c0, m0, hi0, lo0);
    mulhilo_avx2(c2, m1, hi1, lo1);
    c0 = _mm256_xor_si256(_mm256_xor_si256(hi1, c1), _mm256_set1_epi32(static_cast<int>(k0)));
    c2 = _mm256_xor_si256(_mm256_xor_si256(hi0, c3), _mm256_set1_epi32(static_cast<int>(k1)));
    c1 = lo1;
    c3 = lo0;
  }
  const __m256i t0 = _mm256_unpacklo_epi32(c0, c1), t1 = _mm256_unpackhi_epi32(c0, c1);
  const __m256i t2 = _mm256_unpacklo_epi32(c2, c3), t3 = _mm256_unpackhi_epi32(c2, c3);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), _mm256_unpacklo_epi64(t0, t2));       // blocks 0, 1
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + 8), _mm256_unpackhi_epi64(t0, t2));   // 2, 3
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + 16), _mm256_unpacklo_epi64(t1, t3));  // 4, 5
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + 24), _mm256_unpackhi_epi64(t1, t3));  // 6, 7
}

// 16·G blocks per step, G independent groups of 16 interleaved: one group's rounds are a chain
// of dependent multiplies (~8 cycles a round), so a second group fills the gaps.
// The 32x32->64 products: vpmuludq on the even lanes and on the odd lanes swapped down (vpshufd),
// then one masked vpshufd each picks the high and the low halves into place. Shuffles rather
// than 64-bit shifts and blends: with 512-bit vectors the shifts share port 0 with the
// multiplies, the shuffles use port 5.
[[gnu::target("avx512f"), gnu::always_inline]] inline void mulhilo_avx512(__m512i a, __m512i m, __m512i& hi,
                                                                        __m512i& lo) {
  const __m512i even = _mm512_mul_epu32(a, m);  // 64-bit products of lanes 0, 2, ...
  const __m512i odd = _mm512_mul_epu32(_mm512_shuffle_epi32(a, _MM_PERM_CDAB), m);  // of lanes 1, 3, ...
  hi = _mm512_mask_shuffle_epi32(odd, 0x5555, even, _MM_PERM_CDAB);
  lo = _mm512_mask_shuffle_epi32(even, 0xAAAA, odd, _MM_PERM_CDAB);
}

template <int G>
[[gnu::target("avx512f"), gnu::always_inline]] inline void blocks16_avx512(uint64_t key, uint64_t first,
                                                                         uint32_t* out) {
  const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  const __m512i m0 = _mm512_set1_epi32(static_cast<int>(kM0)), m1 = _mm512_set1_epi32(static_cast<int>(kM1));
  __m512i c0[G], c1[G], c2[G], c3[G];
  for (int g = 0; g < G; ++g) {
    const uint64_t base = first + 16 * static_cast<uint64_t>(g);
    c0[g] = _mm512_add_epi32(_mm512_set1_epi32(static_cast<int>(static_cast<uint32_t>(base))), order);
    // The low word wrapped where c0 < order (unsigned): carry one into the high word.
    const __mmask16 carry = _mm512_cmplt_epu32_mask(c0[g], order);
    const __m512i high = _mm512_set1_epi32(static_cast<int>(static_cast<uint32_t>(base >> 32)));
    c1[g] = _mm512_mask_add_epi32(high, carry, high, _mm512_set1_epi32(1));
    c2[g] = c3[g] = _mm512_setzero_si512();
  }
  uint32_t k0 = static_cast<uint32_t>(key), k1 = static_cast<uint32_t>(key >> 32);
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      k0 += kW0;
      k1 += kW1;
    }
    const __m512i vk0 = _mm512_set1_epi32(static_cast<int>(k0)), vk1 = _mm512_set1_epi32(static_cast<int>(k1));
    for (int g = 0; g < G; ++g) {
      __m512i hi0, lo0, hi1, lo1;
      mulhilo_avx512(c0[g], m0, hi0, lo0);
      mulhilo_avx512(c2[g], m1, hi1, lo1);
      // 0x96: a ^ b ^ c in one instruction.
      c0[g] = _mm512_ternarylogic_epi32(hi1, c1[g], vk0, 0x96);
      c2[g] = _mm512_ternarylogic_epi32(hi0, c3[g], vk1, 0x96);
      c1[g] = lo1;
      c3[g] = lo0;
    }
  }
  for (int g = 0; g < G; ++g) {
    const __m512i t0 = _mm512_unpacklo_epi32(c0[g], c1[g]), t1 = _mm512_unpackhi_epi32(c0[g], c1[g]);
    const __m512i t2 = _mm512_unpacklo_epi32(c2[g], c3[g]), t3 = _mm512_unpackhi_epi32(c2[g], c3[g]);
    uint32_t* o = out + 64 * g;
    _mm512_storeu_si512(o, _mm512_unpacklo_epi64(t0, t2));       // blocks 0..3 of the group
    _mm512_storeu_si512(o + 16, _mm512_unpackhi_epi64(t0, t2));  // 4..7
    _mm512_storeu_si512(o + 32, _mm512_unpacklo_epi64(t1, t3));  // 8..11
    _mm512_storeu_si512(o + 48, _mm512_unpackhi_epi64(t1, t3));  // 12..15
  }
}
#endif

}  // namespace philox_detail

#if PRECIS_VEC_EXP_AVX512
/// out[4k + l] = lane l of philox_stream_block(key, first + k) for k < n (n >= 0), with AVX2:
/// 8 blocks per step, the scalar function for the rest. Called directly by the tests; kernels
/// call philox_stream_lanes.
[[gnu::target("avx2")]] inline void philox_stream_lanes_avx2(uint64_t key, uint64_t first, int64_t n, uint32_t* out) {
  int64_t k = 0;
  for (; k + 8 <= n; k += 8) philox_detail::blocks8_avx2(key, first + static_cast<uint64_t>(k), out + 4 * k);
  philox_detail::stream_lanes_scalar(key, first + static_cast<uint64_t>(k), n - k, out + 4 * k);
}

/// The same with AVX-512 (32 blocks per step, then 16, then 8, then scalar). Only on CPUs with AVX-512F.
[[gnu::target("avx512f")]] inline void philox_stream_lanes_avx512(uint64_t key, uint64_t first, int64_t n,
                                                                  uint32_t* out) {
  int64_t k = 0;
  for (; k + 32 <= n; k += 32)
    philox_detail::blocks16_avx512<2>(key, first + static_cast<uint64_t>(k), out + 4 * k);
  for (; k + 16 <= n; k += 16)
    philox_detail::blocks16_avx512<1>(key, first + static_cast<uint64_t>(k), out + 4 * k);
  for (; k + 8 <= n; k += 8) philox_detail::blocks8_avx2(key, first + static_cast<uint64_t>(k), out + 4 * k);
  philox_detail::stream_lanes_scalar(key, first + static_cast<uint64_t>(k), n - k, out + 4 * k);
}
#endif

/// out[4k + l] = lane l of philox_stream_block(key, first + k) for k < n, on the widest vectors
/// the CPU has. Counters wrap modulo 2^64 as in the scalar function.
inline void philox_stream_lanes(uint64_t key, uint64_t first, int64_t n, uint32_t* out) {
#if PRECIS_VEC_EXP_AVX512
  if (vec_detail::use_avx512()) return philox_stream_lanes_avx512(key, first, n, out);
  philox_stream_lanes_avx2(key, first, n, out);
#else
  philox_detail::stream_lanes_scalar(key, first, n, out);
#endif
}

}  // namespace precis::cpu
