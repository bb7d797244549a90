#pragma once
// fp16 and bf16 storage types. Arithmetic on them is done in fp32: convert, compute, round back.
// Conversions round to nearest, ties to even, and keep NaN (quiet), infinities and subnormals.
#include <cstdint>
#include <cstring>

namespace precis {

namespace detail {
/// Exact widening of binary16 bits; a NaN comes back quiet with its payload (as vcvtph2ps does).
float half_bits_to_float(uint16_t h);
/// Rounds to nearest, ties to even; overflow (|f| >= 65520) gives ±inf, tiny values give
/// subnormals or ±0, and a NaN gives a quiet NaN keeping the top payload bits (as vcvtps2ph does).
/// Independent of the floating-point environment (rounding mode, FTZ/DAZ).
uint16_t float_to_half_bits(float f);
/// Exact widening of bfloat16 bits (NaNs are passed through unchanged).
inline float bf16_bits_to_float(uint16_t b) {
  uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
/// Rounds to nearest, ties to even (subnormals included); a NaN gives a quiet NaN (top half | 0x40).
inline uint16_t float_to_bf16_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest even
  return static_cast<uint16_t>(u >> 16);
}

/// The instruction set the bulk conversions below use.
enum class SimdLevel : uint8_t { scalar, avx2, avx512 };
SimdLevel conversion_simd_level();
/// For tests and benchmarks: makes the bulk conversions use at most `level` (clamped to what the
/// CPU supports), so every path can be checked on one machine. Not thread-safe: call it while no
/// conversion runs.
void set_conversion_simd_level(SimdLevel level);
}  // namespace detail

/// IEEE 754 binary16.
struct Half {
  uint16_t bits = 0;  ///< the binary16 encoding (sign, 5 exponent, 10 mantissa bits); 0 is +0
  Half() = default;
  /// Rounds `f` to nearest even (overflow to ±inf, NaN kept quiet); implicit, like a float.
  Half(float f) : bits(detail::float_to_half_bits(f)) {}  // NOLINT: implicit like a float
  /// The exact float value.
  operator float() const { return detail::half_bits_to_float(bits); }
  /// The Half with encoding `b` (no rounding).
  static Half from_bits(uint16_t b) { Half h; h.bits = b; return h; }
};

/// bfloat16: the top 16 bits of an fp32.
struct BFloat16 {
  uint16_t bits = 0;  ///< the top 16 bits of the fp32 encoding; 0 is +0
  BFloat16() = default;
  /// Rounds `f` to nearest even (NaN kept quiet); implicit, like a float.
  BFloat16(float f) : bits(detail::float_to_bf16_bits(f)) {}  // NOLINT
  /// The exact float value.
  operator float() const { return detail::bf16_bits_to_float(bits); }
  /// The BFloat16 with encoding `b` (no rounding).
  static BFloat16 from_bits(uint16_t b) { BFloat16 h; h.bits = b; return h; }
};

static_assert(sizeof(Half) == 2 && sizeof(BFloat16) == 2);

/// Bulk conversions, vectorised (F16C / AVX-512 when the CPU has them; scalar otherwise). Each
/// element gives exactly the result of the scalar conversion above. n >= 0; src and dst must not
/// overlap. No alignment is required.
void float_to_half(const float* src, Half* dst, int64_t n);
void half_to_float(const Half* src, float* dst, int64_t n);
void float_to_bfloat16(const float* src, BFloat16* dst, int64_t n);
void bfloat16_to_float(const BFloat16* src, float* dst, int64_t n);

}  // namespace precis
