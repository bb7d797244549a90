#pragma once
// The 8-bit floats of FP8 training (docs/fp8.md): storage and GEMM-operand formats, not compute
// dtypes. Only copies (casts), fills, views and scaled_matmul take them; other ops reject them
// with a DTypeError/NotImplementedError that says to cast first, as PyTorch does for float8.
//
//   E4M3 ("fn" variant, PyTorch's float8_e4m3fn): bias 7, no infinities, one NaN pattern per sign
//        (0x7F / 0xFF), largest finite 448, smallest subnormal 2^-9.
//   E5M2 (IEEE-like, PyTorch's float8_e5m2): bias 15, ±inf (0x7C / 0xFC), NaNs, largest finite
//        57344, smallest subnormal 2^-16. Its codes are the top byte of the binary16 codes.
//
// Every code of both formats is exactly a bf16, f16 and f32 value, so widening is exact.
// Narrowing rounds to nearest, ties to even, and has two overflow rules:
//
//   plain      (Float8E4M3(float), Tensor::to, the copy kernel): PyTorch 2.15's casts bit for bit
//              (c10 fp8e4m3fn_from_fp32_value / fp8e5m2_from_fp32_value). E4M3 saturates: a value
//              that rounds past 448, and ±inf, give ±448. E5M2 does not: |x| >= 61440 (the
//              halfway point to 65536) and ±inf give ±inf.
//   saturating (float_to_f8_bits_saturating, the scaled casts of the fp8 recipe): what CUDA's
//              cvt.rn.satfinite does, and so Transformer Engine: a finite value that rounds past
//              the largest finite value, and ±inf, give ±max, in both formats. For E4M3 this is
//              the plain rule.
//
// In both, a NaN gives the format's NaN with the input's sign (0x7F | sign), and values below
// half the smallest subnormal give a zero of the input's sign. The functions use integer
// arithmetic only, so the result does not depend on the floating-point environment; they compile
// for the host and, under nvcc, the device, so both backends round the same way.
#include <cstdint>
#include <cstring>

#include "core/opmath.h"

namespace precis {

/// The two fp8 formats, for functions taking either.
enum class Fp8Format : uint8_t { e4m3, e5m2 };

namespace detail {

PRECIS_HD_INLINE uint32_t f8_float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
PRECIS_HD_INLINE float f8_bits_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

/// Exact widening of E4M3 bits. The NaN codes give the quiet NaN 0x7FF00000 with the code's sign
/// (the payload PyTorch's conversion gives).
PRECIS_HD_INLINE float f8e4m3_bits_to_float(uint8_t b) {
  const uint32_t sign = static_cast<uint32_t>(b & 0x80u) << 24;
  const uint32_t exp = (b >> 3) & 0xfu;
  const uint32_t mant = b & 0x7u;
  uint32_t out;
  if ((b & 0x7fu) == 0x7fu) {
    out = sign | 0x7ff00000u;
  } else if (exp != 0) {
    out = sign | ((exp + (127 - 7)) << 23) | (mant << 20);
  } else if (mant == 0) {
    out = sign;
  } else {
    // Subnormal: mant * 2^-9 with mant in 1..7; normalise so the leading one is the implicit bit.
    int e = -9;
    uint32_t m = mant;
    while ((m & 0x8u) == 0) {
      m <<= 1;
      --e;
    }
    // m is now 1.xxx * 2^3 in units of 2^e, i.e. the value is 1.xxx * 2^(e + 3).
    out = sign | (static_cast<uint32_t>(e + 3 + 127) << 23) | ((m & 0x7u) << 20);
  }
  return f8_bits_float(out);
}

/// Exact widening of E5M2 bits (as binary16 bits << 8): ±inf stays, a NaN comes back quiet with
/// its payload, as half_bits_to_float does.
PRECIS_HD_INLINE float f8e5m2_bits_to_float(uint8_t b) {
  const uint32_t sign = static_cast<uint32_t>(b & 0x80u) << 24;
  const uint32_t exp = (b >> 2) & 0x1fu;
  const uint32_t mant = b & 0x3u;
  uint32_t out;
  if (exp == 0x1f) {
    out = sign | 0x7f800000u | (mant << 21) | (mant != 0 ? 0x00400000u : 0u);
  } else if (exp != 0) {
    out = sign | ((exp + (127 - 15)) << 23) | (mant << 21);
  } else if (mant == 0) {
    out = sign;
  } else {
    // Subnormal: mant * 2^-16, mant 1..3.
    const uint32_t e = mant == 1 ? 127 - 16 : 127 - 15;  // 1 -> 2^-16, 2 or 3 -> 1.x * 2^-15
    const uint32_t m = mant == 1 ? 0u : (mant & 1u) << 22;
    out = sign | (e << 23) | m;
  }
  return f8_bits_float(out);
}

/// |x|'s bits (no sign, not NaN, below the smallest normal) rounded to nearest even in units of
/// 2^-k, where `shift_base` = 150 - k; the result is the subnormal code (a carry into the
/// smallest normal's code is correct as it is).
PRECIS_HD_INLINE uint32_t f8_round_subnormal(uint32_t abs_bits, uint32_t shift_base) {
  const uint32_t e = abs_bits >> 23;
  if (e == 0) return 0;  // an f32 subnormal is far below half of any fp8 subnormal
  const uint32_t mant = (abs_bits & 0x7fffffu) | 0x800000u;
  const uint32_t shift = shift_base - e;  // >= 21
  if (shift >= 32) return 0;
  uint32_t r = mant >> shift;
  const uint32_t rem = mant & ((1u << shift) - 1u);
  const uint32_t halfway = 1u << (shift - 1);
  if (rem > halfway || (rem == halfway && (r & 1u))) ++r;
  return r;
}

/// The plain E4M3 cast (PyTorch 2.15): round to nearest even; rounding past 448 and ±inf give
/// ±448; NaN gives 0x7F | sign.
PRECIS_HD_INLINE uint8_t float_to_f8e4m3_bits(float f) {
  uint32_t u = f8_float_bits(f);
  const uint8_t sign = static_cast<uint8_t>((u >> 24) & 0x80u);
  u &= 0x7fffffffu;
  if (u > 0x7f800000u) return static_cast<uint8_t>(sign | 0x7fu);
  if (u >= 0x43f00000u) return static_cast<uint8_t>(sign | 0x7eu);  // >= 480 (and inf): saturate
  if (u < (121u << 23)) return static_cast<uint8_t>(sign | f8_round_subnormal(u, 141));  // < 2^-6
  // Normal: rebias the exponent and round the mantissa to 3 bits (nearest even); a carry bumps
  // the exponent. Only 0x7F (the NaN code, 480 before saturation) can come out of range.
  const uint32_t lsb = (u >> 20) & 1u;
  u += (static_cast<uint32_t>(7 - 127) << 23) + 0x7ffffu + lsb;
  uint8_t r = static_cast<uint8_t>(u >> 20);
  if (r == 0x7fu) r = 0x7eu;
  return static_cast<uint8_t>(sign | r);
}

/// The plain E5M2 cast (PyTorch 2.15): round to nearest even; |x| >= 61440 and ±inf give ±inf;
/// NaN gives 0x7F | sign.
PRECIS_HD_INLINE uint8_t float_to_f8e5m2_bits(float f) {
  uint32_t u = f8_float_bits(f);
  const uint8_t sign = static_cast<uint8_t>((u >> 24) & 0x80u);
  u &= 0x7fffffffu;
  if (u > 0x7f800000u) return static_cast<uint8_t>(sign | 0x7fu);
  if (u >= (143u << 23)) return static_cast<uint8_t>(sign | 0x7cu);  // >= 65536 and inf
  if (u < (113u << 23)) return static_cast<uint8_t>(sign | f8_round_subnormal(u, 134));  // < 2^-14
  // Normal: a carry out of the top finite binade gives 0x7C, infinity, as IEEE rounding does.
  const uint32_t lsb = (u >> 21) & 1u;
  u += (static_cast<uint32_t>(15 - 127) << 23) + 0xfffffu + lsb;
  return static_cast<uint8_t>(sign | static_cast<uint8_t>(u >> 21));
}

/// The saturating cast (CUDA's cvt.rn.satfinite, Transformer Engine's): round to nearest even; a
/// finite value that rounds past the largest finite value, and ±inf, give ±max; NaN gives
/// 0x7F | sign.
PRECIS_HD_INLINE uint8_t float_to_f8_bits_saturating(float f, Fp8Format format) {
  if (format == Fp8Format::e4m3) return float_to_f8e4m3_bits(f);
  const uint32_t u = f8_float_bits(f);
  const uint32_t abs = u & 0x7fffffffu;
  // 61440 (0x47700000) is halfway between 57344 and 65536; it and everything above rounds to inf.
  if (abs >= 0x47700000u && abs <= 0x7f800000u) return static_cast<uint8_t>(((u >> 24) & 0x80u) | 0x7bu);
  return float_to_f8e5m2_bits(f);
}

}  // namespace detail

/// FP8 E4M3 ("fn": finite, one NaN): PyTorch's torch.float8_e4m3fn.
struct Float8E4M3 {
  uint8_t bits = 0;  ///< the encoding (sign, 4 exponent, 3 mantissa bits); 0 is +0
  Float8E4M3() = default;
  /// The plain cast (rounds to nearest even, saturates to ±448, NaN kept); implicit like a float.
  PRECIS_HD Float8E4M3(float f) : bits(detail::float_to_f8e4m3_bits(f)) {}  // NOLINT: like a float
  /// The exact float value.
  PRECIS_HD operator float() const { return detail::f8e4m3_bits_to_float(bits); }
  /// The value with encoding `b` (no rounding).
  static PRECIS_HD Float8E4M3 from_bits(uint8_t b) {
    Float8E4M3 v;
    v.bits = b;
    return v;
  }
  /// The largest finite value, 448.
  static constexpr float max = 448.0f;
};

/// FP8 E5M2 (IEEE-like: infinities and NaNs): PyTorch's torch.float8_e5m2.
struct Float8E5M2 {
  uint8_t bits = 0;  ///< the encoding (sign, 5 exponent, 2 mantissa bits); 0 is +0
  Float8E5M2() = default;
  /// The plain cast (rounds to nearest even, overflows to ±inf, NaN kept); implicit like a float.
  PRECIS_HD Float8E5M2(float f) : bits(detail::float_to_f8e5m2_bits(f)) {}  // NOLINT: like a float
  /// The exact float value.
  PRECIS_HD operator float() const { return detail::f8e5m2_bits_to_float(bits); }
  /// The value with encoding `b` (no rounding).
  static PRECIS_HD Float8E5M2 from_bits(uint8_t b) {
    Float8E5M2 v;
    v.bits = b;
    return v;
  }
  /// The largest finite value, 57344.
  static constexpr float max = 57344.0f;
};

static_assert(sizeof(Float8E4M3) == 1 && sizeof(Float8E5M2) == 1);

/// The largest finite value of `format` (448 or 57344).
constexpr float fp8_max(Fp8Format format) { return format == Fp8Format::e4m3 ? 448.0f : 57344.0f; }

/// fp8 values compute in float (exact widening) and are stored with the plain cast. A double goes
/// in through float, as PyTorch's conversion does.
template <typename T>
struct HostFloat8Traits {
  /// fp8 computes in float.
  using compute = float;
  /// Not a 16-bit float: the kernels that special-case those do not apply.
  static constexpr bool reduced_float = false;
  /// An element widened to float (exact).
  static PRECIS_HD_INLINE float load(T v) { return static_cast<float>(v); }
  /// A computed value cast to T (the plain cast; a double goes through float first).
  template <typename U>
  static PRECIS_HD_INLINE T store(U v) {
    return T(static_cast<float>(v));
  }
};
template <> struct ElementTraits<Float8E4M3> : HostFloat8Traits<Float8E4M3> {};
template <> struct ElementTraits<Float8E5M2> : HostFloat8Traits<Float8E5M2> {};

}  // namespace precis
