// The checked size arithmetic (core/checked_math.h) and OutOfMemoryError from the allocators
// (issue 13: sizes multiplied unchecked, out-of-memory raised as the base Error).
#include <catch2/catch.hpp>

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "core/allocator.h"
#include "core/checked_math.h"
#include "core/error.h"

using namespace precis;

namespace {
constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
constexpr int64_t kMin = std::numeric_limits<int64_t>::min();
}  // namespace

TEST_CASE("checked_add, checked_sub, checked_mul detect int64 overflow", "[core][checked]") {
  REQUIRE(checked_add(2, 3) == 5);
  REQUIRE(checked_add(kMax, 0) == kMax);
  REQUIRE_FALSE(checked_add(kMax, 1).has_value());
  REQUIRE_FALSE(checked_add(kMin, -1).has_value());
  REQUIRE(checked_sub(kMin + 1, 1) == kMin);
  REQUIRE_FALSE(checked_sub(kMin, 1).has_value());
  REQUIRE_FALSE(checked_sub(0, kMin).has_value());
  REQUIRE(checked_mul(int64_t{1} << 31, int64_t{1} << 31) == int64_t{1} << 62);
  REQUIRE_FALSE(checked_mul(int64_t{1} << 32, int64_t{1} << 31).has_value());
  REQUIRE_FALSE(checked_mul(kMax, 2).has_value());
  REQUIRE_FALSE(checked_mul(kMin, -1).has_value());
  REQUIRE(checked_mul(-3, 4) == -12);
}

TEST_CASE("checked_numel: negative sizes and overflow, zeros counted as ones", "[core][checked]") {
  REQUIRE(checked_numel(std::vector<int64_t>{}) == 1);
  REQUIRE(checked_numel(std::vector<int64_t>{2, 3, 4}) == 24);
  REQUIRE(checked_numel(std::vector<int64_t>{3, 0, 2}) == 0);
  REQUIRE(checked_numel(std::vector<int64_t>{kMax}) == kMax);
  REQUIRE_FALSE(checked_numel(std::vector<int64_t>{2, -1}).has_value());
  REQUIRE_FALSE(checked_numel(std::vector<int64_t>{kMax, 2}).has_value());
  REQUIRE_FALSE(checked_numel(std::vector<int64_t>{int64_t{1} << 40, int64_t{1} << 40}).has_value());
  // No elements, but the contiguous strides of [0, 2^40, 2^40] would be 2^80: refused too.
  REQUIRE_FALSE(checked_numel(std::vector<int64_t>{0, int64_t{1} << 40, int64_t{1} << 40}).has_value());
}

TEST_CASE("checked_nbytes: element count times element size within a 64-bit offset", "[core][checked]") {
  REQUIRE(checked_nbytes(10, 4) == 40u);
  REQUIRE(checked_nbytes(0, 8) == 0u);
  REQUIRE(checked_nbytes(int64_t{1} << 60, 4) == uint64_t{1} << 62);
  // 2^62 f32 elements are 2^64 bytes: the product wraps to 0 in size_t (issue 13's empty()).
  REQUIRE_FALSE(checked_nbytes(int64_t{1} << 62, 4).has_value());
  // 2^61 f64 elements are 2^64 bytes too; 2^61 f32 are 2^63, one past the limit.
  REQUIRE_FALSE(checked_nbytes(int64_t{1} << 61, 8).has_value());
  REQUIRE_FALSE(checked_nbytes(int64_t{1} << 61, 4).has_value());
  REQUIRE_FALSE(checked_nbytes(-1, 4).has_value());
  REQUIRE(ceil_div(0, 3) == 0);
  REQUIRE(ceil_div(7, 3) == 3);
  REQUIRE(ceil_div(kMax, kMax) == 1);
  REQUIRE(ceil_div(5, kMax) == 1);  // (5 + kMax - 1) / kMax would overflow
}

TEST_CASE("cpu allocator: a request it cannot serve raises OutOfMemoryError naming bytes and device",
          "[core][allocator][checked]") {
  Allocator& a = cpu_allocator();
  const size_t allocated_before = a.stats().allocated;
  // 2^62 bytes: beyond the 47-bit user address space, so mmap fails whatever the overcommit policy.
  const size_t huge = size_t{1} << 62;
  try {
    (void)a.allocate(huge);
    FAIL("no exception");
  } catch (const OutOfMemoryError& e) {
    CHECK(e.requested_bytes() == huge);
    CHECK(e.device() == "cpu");
    const std::string msg = e.what();
    CHECK(msg.find("4611686018427387904 bytes") != std::string::npos);
    CHECK(msg.find("cpu") != std::string::npos);
  }
  // More than a 64-bit offset addresses: refused before rounding to a size class can overflow.
  try {
    (void)a.allocate(SIZE_MAX - 5);
    FAIL("no exception");
  } catch (const OutOfMemoryError& e) {
    CHECK(e.requested_bytes() == SIZE_MAX - 5);
    CHECK(std::string(e.what()).find("64-bit offset") != std::string::npos);
  }
  // OutOfMemoryError is a precis::Error, so code catching the base still catches it.
  REQUIRE_THROWS_AS(a.allocate(huge), Error);
  // The failed requests are not counted as allocated bytes, and the allocator still works.
  REQUIRE(a.stats().allocated == allocated_before);
  void* p = a.allocate(100);
  REQUIRE(p != nullptr);
  a.deallocate(p, 100);
}
