#include <catch2/catch.hpp>

#include <array>
#include <cstdint>

#include "core/rng.h"

using namespace precis;

using Block = std::array<uint32_t, 4>;

TEST_CASE("philox4x32-10 matches the Random123 known-answer vectors", "[core][rng]") {
  // Our key is one uint64: the low 32 bits are Random123's key word 0.
  REQUIRE(philox4x32({0, 0, 0, 0}, 0) == Block{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8});
  REQUIRE(philox4x32({0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, 0xffffffffffffffffULL) ==
          Block{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd});
  REQUIRE(philox4x32({0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
                     (uint64_t{0x299f31d0} << 32) | 0xa4093822) ==
          Block{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1});
}

TEST_CASE("Generator: reserve advances the offset, block is a pure function", "[core][rng]") {
  Generator g(42);
  REQUIRE(g.seed() == 42);
  REQUIRE(g.offset() == 0);
  REQUIRE(g.reserve(10) == 0);
  REQUIRE(g.reserve(5) == 10);
  REQUIRE(g.offset() == 15);

  // block(i) depends only on (seed, i): another generator with the same seed agrees.
  Generator h(42);
  REQUIRE(g.block(12) == h.block(12));
  REQUIRE(g.block(12) == philox4x32({12, 0, 0, 0}, 42));
  REQUIRE(g.block((uint64_t{3} << 32) | 5) == philox4x32({5, 3, 0, 0}, 42));
  REQUIRE(g.block(0) != g.block(1));
  REQUIRE(Generator(43).block(0) != g.block(0));

  g.set_state(7, 100);
  REQUIRE(g.seed() == 7);
  REQUIRE(g.offset() == 100);
  g.manual_seed(9);
  REQUIRE(g.seed() == 9);
  REQUIRE(g.offset() == 0);
}

TEST_CASE("Generator: draw outside a graph capture is (seed, reserve(n)) with no device base", "[core][rng]") {
  Generator g(77);
  (void)g.reserve(5);
  const PhiloxDraw d = g.draw(3);
  CHECK(d.seed == 77);
  CHECK(d.offset == 5);
  CHECK(d.offset_base == nullptr);
  CHECK(g.offset() == 8);
}

TEST_CASE("default generator and manual_seed", "[core][rng]") {
  manual_seed(1234);
  REQUIRE(default_generator().seed() == 1234);
  REQUIRE(default_generator().offset() == 0);
  default_generator().reserve(3);
  const Block b = default_generator().block(1);
  manual_seed(1234);
  REQUIRE(default_generator().offset() == 0);
  REQUIRE(default_generator().block(1) == b);
  REQUIRE(&default_generator() == &default_generator());
}

TEST_CASE("uint32_to_unit_float gives values from 0 up to but excluding 1", "[core][rng]") {
  REQUIRE(uint32_to_unit_float(0) == 0.0f);
  REQUIRE(uint32_to_unit_float(0xffffffffu) < 1.0f);
  REQUIRE(uint32_to_unit_float(0x80000000u) == 0.5f);
  // Rough uniformity: the mean of many draws is near 1/2.
  double sum = 0;
  const int n = 1 << 16;
  for (int i = 0; i < n / 4; ++i)
    for (uint32_t x : philox4x32({static_cast<uint32_t>(i), 0, 0, 0}, 5)) sum += uint32_to_unit_float(x);
  REQUIRE(sum / n == Approx(0.5).margin(0.01));
}
