// Integer conversions and arithmetic of core/opmath.h, shared by the CPU and CUDA kernels: a
// floating value stored into an integer type saturates (NaN gives 0) and integer add/sub/mul
// wrap around, where the plain C++ operations are undefined behaviour (fuzz/open findings of
// issue 13: float-cast-overflow in store_op, signed-integer-overflow in AddAlphaOp).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <limits>

#include "core/opmath.h"

using namespace precis;

namespace {

// The reference: the exact mathematical value clamped to I's range, computed in long double
// (64-bit mantissa: every int64 bound and every double below 2^64 is exact).
template <typename I>
I clamp_reference(long double v) {
  if (std::isnan(v)) return 0;
  const long double lo = static_cast<long double>(std::numeric_limits<I>::min());
  const long double hi = static_cast<long double>(std::numeric_limits<I>::max());
  if (v <= lo) return std::numeric_limits<I>::min();
  if (v >= hi) return std::numeric_limits<I>::max();
  return static_cast<I>(std::trunc(v));
}

template <typename I, typename F>
void check_saturation() {
  constexpr F inf = std::numeric_limits<F>::infinity();
  const F two63 = std::ldexp(F(1), 63), two31 = std::ldexp(F(1), 31);
  const F values[] = {F(0), F(-0.0), F(0.5), F(-0.5), F(-0.99), F(1.99), F(-2.5), F(1e6), F(-1e6),
                      two31, -two31, std::nextafter(two31, F(0)), std::nextafter(-two31, F(0)),
                      two31 + F(1024), -two31 - F(1024), two63, -two63, std::nextafter(two63, F(0)),
                      std::nextafter(-two63, F(0)), std::nextafter(-two63, -inf), std::nextafter(two63, inf),
                      F(1e30), F(-1e30), std::numeric_limits<F>::max(), std::numeric_limits<F>::lowest(),
                      std::numeric_limits<F>::denorm_min(), inf, -inf, std::numeric_limits<F>::quiet_NaN(),
                      -std::numeric_limits<F>::quiet_NaN()};
  for (F v : values) {
    INFO("value " << static_cast<long double>(v) << " into a " << sizeof(I) * 8 << "-bit integer");
    CHECK(saturating_float_to_int<I>(v) == clamp_reference<I>(v));
    CHECK(store_op<I>(v) == clamp_reference<I>(v));
  }
}

}  // namespace

TEST_CASE("opmath: a floating value stored into an integer type saturates, NaN gives 0", "[core][opmath]") {
  check_saturation<int32_t, float>();
  check_saturation<int32_t, double>();
  check_saturation<int64_t, float>();
  check_saturation<int64_t, double>();
  // The bounds themselves: -2^63 and -2^31 are exact and in range; 2^63 and 2^31 are not.
  CHECK(store_op<int64_t>(-0x1p63) == std::numeric_limits<int64_t>::min());
  CHECK(store_op<int64_t>(0x1p63) == std::numeric_limits<int64_t>::max());
  CHECK(store_op<int32_t>(-0x1p31) == std::numeric_limits<int32_t>::min());
  CHECK(store_op<int32_t>(0x1p31) == std::numeric_limits<int32_t>::max());
  CHECK(store_op<int32_t>(2147483647.0) == 2147483647);
  // Through the 16-bit floats (converted via float): f16's inf and NaN.
  CHECK(convert<int32_t>(Half::from_bits(0x7c00)) == std::numeric_limits<int32_t>::max());
  CHECK(convert<int64_t>(Half::from_bits(0xfc00)) == std::numeric_limits<int64_t>::min());
  CHECK(convert<int32_t>(BFloat16::from_bits(0x7fc0)) == 0);
  CHECK(convert<int32_t>(Half(-7.75f)) == -7);
  // Unsigned targets (not a precis dtype, but the template allows them): below 0 gives 0.
  CHECK(saturating_float_to_int<uint8_t>(-3.0) == 0);
  CHECK(saturating_float_to_int<uint8_t>(-0.5) == 0);
  CHECK(saturating_float_to_int<uint8_t>(255.9) == 255);
  CHECK(saturating_float_to_int<uint8_t>(256.0) == 255);
  CHECK(saturating_float_to_int<uint64_t>(0x1p64) == std::numeric_limits<uint64_t>::max());
  // bool and the floating types are unchanged.
  CHECK(store_op<bool>(std::numeric_limits<double>::quiet_NaN()) == true);
  CHECK(store_op<float>(1e300) == std::numeric_limits<float>::infinity());
}

TEST_CASE("opmath: integer add, sub and mul wrap around modulo 2^bits", "[core][opmath]") {
  constexpr int32_t max32 = std::numeric_limits<int32_t>::max(), min32 = std::numeric_limits<int32_t>::min();
  constexpr int64_t max64 = std::numeric_limits<int64_t>::max(), min64 = std::numeric_limits<int64_t>::min();
  CHECK(wrapping_add(max32, int32_t{1}) == min32);
  CHECK(wrapping_sub(min32, int32_t{1}) == max32);
  CHECK(wrapping_mul(int32_t{1} << 30, int32_t{4}) == 0);
  CHECK(wrapping_mul(int32_t{-1}, min32) == min32);
  CHECK(wrapping_mul(int32_t{65537}, int32_t{65537}) == 131073);  // 2^32 + 2^17 + 1
  CHECK(wrapping_add(max64, int64_t{1}) == min64);
  CHECK(wrapping_sub(min64, int64_t{2}) == max64 - 1);
  CHECK(wrapping_mul(max64, int64_t{2}) == -2);
  // In range: the exact result; floating types: the plain operators.
  CHECK(wrapping_add(int32_t{-5}, int32_t{7}) == 2);
  CHECK(wrapping_mul(int64_t{-3}, int64_t{1} << 40) == -(int64_t{3} << 40));
  CHECK(wrapping_add(0.1, 0.2) == 0.1 + 0.2);
  CHECK(std::isinf(wrapping_mul(1e300, 1e300)));
  // Every pair of a grid against 64-bit arithmetic reduced modulo 2^32.
  for (int64_t a = min32; a <= max32; a += 0x1234567) {
    for (int64_t b = min32; b <= max32; b += 0x2345679) {
      const auto a32 = static_cast<int32_t>(a), b32 = static_cast<int32_t>(b);
      CHECK(wrapping_add(a32, b32) == static_cast<int32_t>(static_cast<uint32_t>(a + b)));
      CHECK(wrapping_sub(a32, b32) == static_cast<int32_t>(static_cast<uint32_t>(a - b)));
      CHECK(wrapping_mul(a32, b32) == static_cast<int32_t>(static_cast<uint32_t>(static_cast<uint64_t>(a) * static_cast<uint64_t>(b))));
    }
  }
}
