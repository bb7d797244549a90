#pragma once
// One row of the CPU dropout kernel (ops/cpu/dropout.cpp): the elements first .. first + n − 1
// (row-major indices) of a contiguous output from an input row of any stride. A header of its
// own so tests can run rows that start anywhere inside a Philox block
// (tests/ops/dropout_vec_test.cpp); the kernel's parallel_rows only hands out such rows for
// some shapes and thread counts.
#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "core/half.h"
#include "core/opmath.h"
#include "ops/cpu/philox_vec.h"
#include "ops/math/dropout_math.h"

#if defined(__AVX2__)
#include <immintrin.h>
#endif

namespace precis::cpu {

namespace dropout_detail {

// Elements per step of a row: the Philox lanes and (for f16/bf16, or a strided input) the fp32
// values of one step live in stack buffers small enough to stay in L1.
inline constexpr int64_t kStep = 256;

// The input's values of a step in the compute type C, or the input itself when it already is
// (contiguous f32/f64). Bulk conversions for contiguous f16/bf16 (vectorised, exact as the scalar
// ones).
template <typename T, typename C = opmath_t<T>>
inline const C* load_step(const T* x, int64_t stride, int64_t len, C* buf) {
  if constexpr (std::is_same_v<T, C>) {
    if (stride == 1) return x;
  } else if constexpr (std::is_same_v<T, BFloat16>) {
    if (stride == 1) {
      bfloat16_to_float(x, buf, len);
      return buf;
    }
  } else if constexpr (std::is_same_v<T, Half>) {
    if (stride == 1) {
      half_to_float(x, buf, len);
      return buf;
    }
  }
  for (int64_t j = 0; j < len; ++j) buf[j] = convert<C>(x[j * stride]);
  return buf;
}

// Stores a step's results (computed in C, in `res`) as T, unless they were written in place.
template <typename T, typename C = opmath_t<T>>
inline void store_step(const C* res, T* o, int64_t len) {
  if constexpr (std::is_same_v<T, BFloat16>) {
    float_to_bfloat16(res, o, len);
  } else if constexpr (std::is_same_v<T, Half>) {
    float_to_half(res, o, len);
  } else if constexpr (!std::is_same_v<T, C>) {
    for (int64_t j = 0; j < len; ++j) o[j] = convert<T>(res[j]);
  }
}

// dst[j] = src[j]·scale where lane bits[j] keeps element j, else 0 (the scalar rule of
// ops/math/dropout_math.h, same products), 32 bytes at a time; with kAdd, plus add[j] (dropout_add's
// residual, ops/cpu/dropout_add.cpp: the sum is order-free, so it is the unfused pair's add).
// Written on GCC/Clang vector extensions: GCC sinks the multiply of the plain loop into the kept
// branch and then cannot vectorise it (under -ftrapping-math it may not speculate the multiply),
// while a vector select computes both.
template <typename C, bool kAdd = false>
inline void apply_mask(const C* src, const uint32_t* bits, C* dst, int64_t len, C scale, uint32_t threshold,
                       const C* add = nullptr) {
  constexpr int W = 32 / sizeof(C);
  typedef C V __attribute__((vector_size(32)));
  typedef uint32_t U __attribute__((vector_size(W * 4)));
  typedef std::conditional_t<sizeof(C) == 4, int32_t, int64_t> I1;
  typedef I1 I __attribute__((vector_size(32)));
  int64_t j = 0;
  for (; j + W <= len; j += W) {
    V x;
    U b;
    std::memcpy(&x, src + j, sizeof x);
    std::memcpy(&b, bits + j, sizeof b);
    const I keep = __builtin_convertvector((b >> 8) < threshold, I);
    V r = keep ? x * scale : V{};
    if constexpr (kAdd) {
      V a;
      std::memcpy(&a, add + j, sizeof a);
      r = a + r;
    }
    std::memcpy(dst + j, &r, sizeof r);
  }
  for (; j < len; ++j) {
    const C d = kernels::dropout_keep(bits[j], threshold) ? kernels::dropout_scaled(src[j], scale) : C(0);
    if constexpr (kAdd) {
      dst[j] = add[j] + d;
    } else {
      dst[j] = d;
    }
  }
}

// Packs the keep decisions of lanes[0 .. len) into words: bit j % 32 of keep[j / 32] for element j
// (j from 0 at a 32-aligned element; bits past len are 0). Written a byte (eight lanes, one
// movemask where the build has AVX2) at a time: on a little-endian machine byte j / 8 of the
// words holds bits j .. j + 7.
inline void pack_keep(const uint32_t* lanes, uint32_t* keep, int64_t len, uint32_t threshold) {
  static_assert(std::endian::native == std::endian::little, "the mask's bytes are its words' low bytes first");
  auto* bytes = reinterpret_cast<uint8_t*>(keep);
  int64_t j = 0;
#if defined(__AVX2__)
  typedef uint32_t U __attribute__((vector_size(32)));
  typedef int32_t I __attribute__((vector_size(32)));
  for (; j + 8 <= len; j += 8) {
    U b;
    std::memcpy(&b, lanes + j, sizeof b);
    const I kept = (b >> 8) < threshold;
    bytes[j / 8] = static_cast<uint8_t>(_mm256_movemask_ps(_mm256_castsi256_ps(reinterpret_cast<__m256i>(kept))));
  }
#endif
  for (; j < len; j += 8) {
    uint8_t byte = 0;
    for (int64_t k = 0; k < 8 && j + k < len; ++k)
      byte |= static_cast<uint8_t>(kernels::dropout_keep(lanes[j + k], threshold) ? 1u << k : 0u);
    bytes[j / 8] = byte;
  }
  for (int64_t b = (len + 7) / 8; b % 4 != 0; ++b) bytes[b] = 0;  // the last word's unused bytes
}

// dst[j] = src[j]·scale where bit j of the packed mask `keep` (as pack_keep writes it, element 0
// at bit 0 of keep[0]) is set, else 0: apply_mask's products from a kept mask instead of the
// Philox lanes. len ≤ 32·words; W lanes share one word's shifted bits.
template <typename C>
inline void apply_keep(const C* src, const uint32_t* keep, C* dst, int64_t len, C scale) {
  constexpr int W = 32 / sizeof(C);
  typedef C V __attribute__((vector_size(32)));
  typedef std::conditional_t<sizeof(C) == 4, int32_t, int64_t> I1;
  typedef I1 I __attribute__((vector_size(32)));
  I bit;
  for (int l = 0; l < W; ++l) bit[l] = I1(1) << l;
  int64_t j = 0;
  for (; j + W <= len; j += W) {
    V x;
    std::memcpy(&x, src + j, sizeof x);
    const I kept = ((I{} + static_cast<I1>(keep[j / 32] >> (j % 32))) & bit) != 0;
    const V r = kept ? x * scale : V{};
    std::memcpy(dst + j, &r, sizeof r);
  }
  for (; j < len; ++j) dst[j] = (keep[j / 32] >> (j % 32)) & 1u ? kernels::dropout_scaled(src[j], scale) : C(0);
}

}  // namespace dropout_detail

/// o[j] = x[j·x_stride]·scale (in C = opmath_t<T>) where element first + j is kept under
/// (seed, offset, threshold), else 0, for j < n: the rule of ops/math/dropout_math.h bit for bit.
/// Each step of kStep elements draws the Philox blocks it uses with the vector generator (a row
/// may start and end inside a block), converts f16/bf16 or strided input to C in a stack buffer,
/// and applies the mask 32 bytes at a time.
/// With `keep`, also writes the row's mask, packed as dropout_detail::pack_keep packs it (bit
/// j % 32 of keep[j / 32] for element first + j): what masked_row applies again without the draw.
template <typename T, typename C = opmath_t<T>>
void dropout_row(T* o, const T* x, int64_t x_stride, int64_t n, int64_t first, uint64_t seed, uint64_t offset,
                 uint32_t threshold, C scale, uint32_t* keep = nullptr) {
  using namespace dropout_detail;
  static_assert(kStep % 32 == 0, "a step fills whole mask words");
  alignas(64) uint32_t lanes[kStep + 8];  // kStep / 4 + 1 blocks when the start is mid-block
  alignas(64) C buf[kStep];
  for (int64_t j0 = 0; j0 < n; j0 += kStep) {
    const int64_t len = std::min(kStep, n - j0), idx = first + j0;
    const int64_t b0 = idx / 4, blocks = (idx + len - 1) / 4 - b0 + 1;
    philox_stream_lanes(seed, offset + static_cast<uint64_t>(b0), blocks, lanes);
    if (keep != nullptr) pack_keep(lanes + (idx & 3), keep + j0 / 32, len, threshold);
    const C* src = load_step<T>(x + j0 * x_stride, x_stride, len, buf);
    C* dst = buf;
    if constexpr (std::is_same_v<T, C>) dst = o + j0;
    apply_mask(src, lanes + (idx & 3), dst, len, scale, threshold);
    store_step<T>(buf, o + j0, len);
  }
}

/// dropout_row's o from a mask it packed into `keep` (the row's words) instead of a draw: the same
/// values bit for bit, without the Philox rounds (x contiguous).
template <typename T, typename C = opmath_t<T>>
void masked_row(T* o, const T* x, int64_t n, const uint32_t* keep, C scale) {
  using namespace dropout_detail;
  alignas(64) C buf[kStep];
  for (int64_t j0 = 0; j0 < n; j0 += kStep) {
    const int64_t len = std::min(kStep, n - j0);
    const C* src = load_step<T>(x + j0, 1, len, buf);
    C* dst = buf;
    if constexpr (std::is_same_v<T, C>) dst = o + j0;
    apply_keep(src, keep + j0 / 32, dst, len, scale);
    store_step<T>(buf, o + j0, len);
  }
}

}  // namespace precis::cpu
