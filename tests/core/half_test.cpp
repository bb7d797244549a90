// Half / BFloat16: exhaustive scalar checks against an independent double-precision reference, and
// the bulk (vector) conversions against the scalar ones on every SIMD level the CPU has.
#include <catch2/catch.hpp>

#include <bit>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "core/half.h"

using namespace precis;

namespace {

// Independent decoders, written with ldexp instead of bit manipulation.
double ref_half_value(uint16_t h) {
  const int e = (h >> 10) & 0x1f;
  const int m = h & 0x3ff;
  const double s = (h & 0x8000) ? -1.0 : 1.0;
  if (e == 0x1f) return m ? std::nan("") : s * INFINITY;
  if (e == 0) return s * std::ldexp(m, -24);
  return s * std::ldexp(1024 + m, e - 25);
}

// Rounds |x| to a binary format with `mant_bits` stored mantissa bits, minimum normal exponent
// `emin` and maximum exponent `emax`, ties to even, in exact double arithmetic. Returns +inf on
// overflow. x must be a float (so every quotient below is exact).
double ref_round_abs(double x, int mant_bits, int emin, int emax) {
  const double a = std::fabs(x);
  if (a == 0) return 0;
  if (std::isinf(a)) return INFINITY;
  const int e = std::max(std::ilogb(a), emin);
  const double ulp = std::ldexp(1.0, e - mant_bits);
  const double q = a / ulp;
  double n = std::floor(q);
  const double rem = q - n;
  if (rem > 0.5 || (rem == 0.5 && std::fmod(n, 2.0) == 1.0)) n += 1;
  const double v = n * ulp;
  if (v >= std::ldexp(1.0, emax + 1)) return INFINITY;
  return v;
}

void check_half_rounding(float f) {
  const uint16_t h = detail::float_to_half_bits(f);
  if (std::isnan(f)) {
    REQUIRE((h & 0x7c00) == 0x7c00);
    REQUIRE((h & 0x0200) != 0);  // quiet
    REQUIRE(bool(h & 0x8000) == std::signbit(f));
    return;
  }
  const double want = ref_round_abs(f, 10, -14, 15);
  INFO("f = " << f << " bits 0x" << std::hex << std::bit_cast<uint32_t>(f) << " -> 0x" << h);
  REQUIRE(std::fabs(ref_half_value(h)) == want);
  REQUIRE(bool(h & 0x8000) == std::signbit(f));
}

void check_bf16_rounding(float f) {
  const uint16_t b = detail::float_to_bf16_bits(f);
  if (std::isnan(f)) {
    REQUIRE((b & 0x7f80) == 0x7f80);
    REQUIRE((b & 0x0040) != 0);
    REQUIRE(bool(b & 0x8000) == std::signbit(f));
    return;
  }
  const double want = ref_round_abs(f, 7, -126, 127);
  INFO("f = " << f << " bits 0x" << std::hex << std::bit_cast<uint32_t>(f) << " -> 0x" << b);
  REQUIRE(std::fabs(static_cast<double>(detail::bf16_bits_to_float(b))) == want);
  REQUIRE(bool(b & 0x8000) == std::signbit(f));
}

// Floats that probe rounding: every representable value of the 16-bit format, the midpoints
// between neighbours (ties), and one float ulp either side of each; plus special values and
// random bit patterns.
std::vector<float> probe_floats(double (*value)(uint16_t), uint16_t max_finite) {
  std::vector<float> out;
  for (uint32_t h = 0; h <= max_finite; ++h) {
    const auto v = static_cast<float>(value(static_cast<uint16_t>(h)));
    const auto next = static_cast<float>(value(static_cast<uint16_t>(h + 1)));  // may be inf
    const auto mid = static_cast<float>((static_cast<double>(v) + next) / 2);
    for (float x : {v, mid, std::nextafter(mid, 0.0f), std::nextafter(mid, INFINITY),
                    std::nextafter(v, INFINITY)}) {
      out.push_back(x);
      out.push_back(-x);
    }
  }
  for (float x : {0.0f, -0.0f, INFINITY, -INFINITY, NAN, -NAN, 65504.0f, 65519.996f, 65520.0f,
                  std::nextafter(65520.0f, 0.0f), 0x1p-24f, 0x1p-25f, std::nextafter(0x1p-25f, 1.0f),
                  0x1.8p-25f, 0x1p-14f, std::nextafter(0x1p-14f, 0.0f), 1e-45f, 1e-40f,
                  std::numeric_limits<float>::max(), std::numeric_limits<float>::min(),
                  std::nextafter(std::numeric_limits<float>::min(), 0.0f)})
    out.push_back(x);
  std::mt19937 rng(1234);
  for (int i = 0; i < 300000; ++i) out.push_back(std::bit_cast<float>(static_cast<uint32_t>(rng())));
  return out;
}

double bf16_value(uint16_t b) { return detail::bf16_bits_to_float(b); }

const char* level_name(detail::SimdLevel l) {
  switch (l) {
    case detail::SimdLevel::scalar: return "scalar";
    case detail::SimdLevel::avx2: return "avx2";
    case detail::SimdLevel::avx512: return "avx512";
  }
  return "?";
}

// Restores the best level when a test section ends.
struct LevelGuard {
  detail::SimdLevel saved = detail::conversion_simd_level();
  ~LevelGuard() { detail::set_conversion_simd_level(saved); }
};

}  // namespace

TEST_CASE("half: every bit pattern widens exactly and round-trips", "[core][half]") {
  for (uint32_t i = 0; i < 65536; ++i) {
    const auto h = static_cast<uint16_t>(i);
    const float f = detail::half_bits_to_float(h);
    const double want = ref_half_value(h);
    INFO("h = 0x" << std::hex << i);
    if (std::isnan(want)) {
      REQUIRE(std::isnan(f));
      const uint16_t back = detail::float_to_half_bits(f);
      REQUIRE((back & 0x7c00) == 0x7c00);
      REQUIRE((back & 0x3ff) != 0);
      REQUIRE((back & 0x8000) == (h & 0x8000));
      REQUIRE((std::bit_cast<uint32_t>(f) & 0x00400000u) != 0);  // widened NaN is quiet
    } else {
      REQUIRE(static_cast<double>(f) == want);
      REQUIRE(std::signbit(f) == bool(h & 0x8000));
      REQUIRE(detail::float_to_half_bits(f) == h);
      REQUIRE(Half(static_cast<float>(Half::from_bits(h))).bits == h);
    }
  }
}

TEST_CASE("half: float rounding matches a double-precision reference", "[core][half]") {
  CHECK(detail::float_to_half_bits(65504.0f) == 0x7bff);
  CHECK(detail::float_to_half_bits(65519.996f) == 0x7bff);
  CHECK(detail::float_to_half_bits(65520.0f) == 0x7c00);  // the overflow threshold
  CHECK(detail::float_to_half_bits(-65520.0f) == 0xfc00);
  CHECK(detail::float_to_half_bits(0x1p-25f) == 0x0000);  // tie to even: zero
  CHECK(detail::float_to_half_bits(std::nextafter(0x1p-25f, 1.0f)) == 0x0001);
  CHECK(detail::float_to_half_bits(0x1.8p-24f) == 0x0002);  // 1.5 ulp ties up to 2
  CHECK(detail::float_to_half_bits(1.0f + 0x1p-11f) == 0x3c00);  // tie to even: down
  CHECK(detail::float_to_half_bits(1.0f + 0x3p-11f) == 0x3c02);  // tie to even: up
  CHECK(detail::float_to_half_bits(-0.0f) == 0x8000);
  for (float f : probe_floats(ref_half_value, 0x7bff)) check_half_rounding(f);
}

TEST_CASE("bfloat16: every bit pattern round-trips", "[core][half]") {
  for (uint32_t i = 0; i < 65536; ++i) {
    const auto b = static_cast<uint16_t>(i);
    const float f = detail::bf16_bits_to_float(b);
    INFO("b = 0x" << std::hex << i);
    REQUIRE(std::bit_cast<uint32_t>(f) == i << 16);
    if (std::isnan(f)) {
      const uint16_t back = detail::float_to_bf16_bits(f);
      REQUIRE((back & 0x7f80) == 0x7f80);
      REQUIRE((back & 0x7f) != 0);
      REQUIRE((back & 0x8000) == (b & 0x8000));
    } else {
      REQUIRE(detail::float_to_bf16_bits(f) == b);
      REQUIRE(BFloat16(static_cast<float>(BFloat16::from_bits(b))).bits == b);
    }
  }
}

TEST_CASE("bfloat16: float rounding matches a double-precision reference", "[core][half]") {
  CHECK(detail::float_to_bf16_bits(std::bit_cast<float>(0x7f7fffffu)) == 0x7f80);  // overflow
  CHECK(detail::float_to_bf16_bits(std::bit_cast<float>(0x807fffffu)) == 0x8080);  // subnormal
  CHECK(detail::float_to_bf16_bits(std::bit_cast<float>(0x3f808000u)) == 0x3f80);  // tie down
  CHECK(detail::float_to_bf16_bits(std::bit_cast<float>(0x3f818000u)) == 0x3f82);  // tie up
  CHECK(detail::float_to_bf16_bits(std::bit_cast<float>(0x7f800001u)) == 0x7fc0);  // sNaN quiet
  for (float f : probe_floats(bf16_value, 0x7f7f)) check_bf16_rounding(f);
}

TEST_CASE("bulk conversions equal the scalar path on every SIMD level", "[core][half]") {
  LevelGuard guard;
  const detail::SimdLevel best = guard.saved;

  // Inputs: specials first so the short lengths see them too, then every half/bf16 pattern
  // widened (covers NaNs, subnormals, ties of the other format) and random float bits.
  std::vector<float> fsrc = {NAN, -INFINITY, 65520.0f, 0x1p-25f, -0.0f, 1e-40f,
                             std::bit_cast<float>(0x7f800001u), std::bit_cast<float>(0x807fffffu),
                             std::bit_cast<float>(0x3f808000u)};
  std::vector<uint16_t> hsrc = {0x7c01, 0xfe00, 0x0001, 0x83ff, 0x7c00, 0x7bff, 0xff81};
  std::mt19937 rng(99);
  for (uint32_t i = 0; i < 65536; ++i) {
    hsrc.push_back(static_cast<uint16_t>(i * 40503u));  // every pattern, shuffled (odd multiplier)
    fsrc.push_back(detail::half_bits_to_float(static_cast<uint16_t>(i)));
    fsrc.push_back(std::bit_cast<float>(static_cast<uint32_t>(rng())));
    fsrc.push_back(std::bit_cast<float>(i << 16 | 0x8000u));  // bf16 ties
  }

  for (int li = 0; li <= static_cast<int>(best); ++li) {
    const auto level = static_cast<detail::SimdLevel>(li);
    detail::set_conversion_simd_level(level);
    REQUIRE(detail::conversion_simd_level() == level);
    INFO("level " << level_name(level));
    std::vector<int64_t> lengths;
    for (int64_t n = 0; n <= 100; ++n) lengths.push_back(n);
    lengths.push_back(static_cast<int64_t>(hsrc.size()) - 1);  // long, odd length
    for (int64_t n : lengths) {
      for (int64_t off : {int64_t{0}, int64_t{1}}) {  // also unaligned starts
        if (off + n > static_cast<int64_t>(hsrc.size())) continue;
        INFO("n = " << n << " offset " << off);
        const float* f = fsrc.data() + off;
        const uint16_t* h = hsrc.data() + off;
        // One guard element past the end must stay untouched.
        std::vector<Half> ho(n + 1, Half::from_bits(0x5555));
        std::vector<BFloat16> bo(n + 1, BFloat16::from_bits(0x5555));
        std::vector<float> fo(n + 1, 7.0f), go(n + 1, 7.0f);
        float_to_half(f, ho.data(), n);
        float_to_bfloat16(f, bo.data(), n);
        half_to_float(reinterpret_cast<const Half*>(h), fo.data(), n);
        bfloat16_to_float(reinterpret_cast<const BFloat16*>(h), go.data(), n);
        int64_t bad = -1;
        for (int64_t i = 0; i < n && bad < 0; ++i) {
          const bool same =
              ho[i].bits == detail::float_to_half_bits(f[i]) &&
              bo[i].bits == detail::float_to_bf16_bits(f[i]) &&
              std::bit_cast<uint32_t>(fo[i]) == std::bit_cast<uint32_t>(detail::half_bits_to_float(h[i])) &&
              std::bit_cast<uint32_t>(go[i]) == std::bit_cast<uint32_t>(detail::bf16_bits_to_float(h[i]));
          if (!same) bad = i;
        }
        INFO("first mismatch at " << bad);
        REQUIRE(bad == -1);
        REQUIRE(ho[n].bits == 0x5555);
        REQUIRE(bo[n].bits == 0x5555);
        REQUIRE(fo[n] == 7.0f);
        REQUIRE(go[n] == 7.0f);
      }
    }
  }
}
