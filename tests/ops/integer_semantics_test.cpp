// Integer results that used to be undefined behaviour (issue 13, fuzz/open findings of fuzz_ops):
// casts of out-of-range or NaN floats to integer dtypes saturate (NaN gives 0); integer add, sub
// and mul wrap around modulo 2^bits; a Scalar written into an integer tensor (a fill value, add's
// alpha) that the dtype cannot hold raises a typed ValueError naming the op, as PyTorch raises
// "value cannot be converted to type ... without overflow"; cat and stack of empty views work.
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "ops/functional.h"
#include "tests/support/tensor_testing.h"

using namespace precis;

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr int32_t kMax32 = std::numeric_limits<int32_t>::max();
constexpr int32_t kMin32 = std::numeric_limits<int32_t>::min();
constexpr int64_t kMax64 = std::numeric_limits<int64_t>::max();
constexpr int64_t kMin64 = std::numeric_limits<int64_t>::min();

Tensor i32(const std::vector<int32_t>& v) { return from_vector<int32_t>(v); }
Tensor i64(const std::vector<int64_t>& v) { return from_vector<int64_t>(v); }

// The naive reference of a saturating cast: the value clamped to I's range in long double.
template <typename I>
std::vector<I> saturate_reference(const std::vector<double>& v) {
  std::vector<I> out;
  for (double x : v) {
    const long double lo = std::numeric_limits<I>::min(), hi = std::numeric_limits<I>::max();
    out.push_back(std::isnan(x) ? I(0) : x <= lo ? std::numeric_limits<I>::min()
                                     : x >= hi ? std::numeric_limits<I>::max()
                                               : static_cast<I>(std::trunc(static_cast<long double>(x))));
  }
  return out;
}

const std::vector<double> kHostile = {2.3e11, -2.3e11, 1.4e308, -1.4e308, kInf,  -kInf,  kNaN,   0x1p63, -0x1p63,
                                      0x1p31, -0x1p31, 2147483647.5, -2147483648.5, -2.75, 3.99, 0.0, -0.0, 1e-300};

}  // namespace

TEST_CASE("cast of out-of-range and NaN floats to integer dtypes saturates", "[ops][cast][integer]") {
  const Tensor x = from_vector<double>(kHostile);
  CHECK(cast(x, DType::i32).to_vector<int32_t>() == saturate_reference<int32_t>(kHostile));
  CHECK(cast(x, DType::i64).to_vector<int64_t>() == saturate_reference<int64_t>(kHostile));
  // Strided source (the general copy loop) and f32 / f16 sources (converted through float).
  const Tensor wide = stack({x, x}, 1).select(1, 1);
  REQUIRE(!wide.is_contiguous());
  CHECK(cast(wide, DType::i32).to_vector<int32_t>() == saturate_reference<int32_t>(kHostile));
  const std::vector<double> as_float = cast(x, DType::f32).to(DType::f64).to_vector<double>();
  CHECK(cast(cast(x, DType::f32), DType::i64).to_vector<int64_t>() == saturate_reference<int64_t>(as_float));
  const Tensor h = cast(from_vector<double>({1e6, -1e6, kNaN, -3.5}), DType::f16);  // inf, -inf, nan, -3.5
  CHECK(cast(h, DType::i32).to_vector<int32_t>() == std::vector<int32_t>{kMax32, kMin32, 0, -3});
  // copy_ into an integer tensor converts the same way.
  Tensor dst = zeros({3}, {.dtype = DType::i32});
  dst.copy_(from_vector<double>({1e10, kNaN, -7.9}));
  CHECK(dst.to_vector<int32_t>() == std::vector<int32_t>{kMax32, 0, -7});
}

TEST_CASE("integer add, sub and mul wrap around on overflow", "[ops][binary][integer]") {
  CHECK(add(i32({kMax32, 5}), i32({1, 1})).to_vector<int32_t>() == std::vector<int32_t>{kMin32, 6});
  CHECK(sub(i32({kMin32}), i32({1})).to_vector<int32_t>() == std::vector<int32_t>{kMax32});
  CHECK(mul(i32({1 << 30, -3}), i32({4, 5})).to_vector<int32_t>() == std::vector<int32_t>{0, -15});
  CHECK(add(i64({kMax64}), i64({2})).to_vector<int64_t>() == std::vector<int64_t>{kMin64 + 1});
  CHECK(mul(i64({kMax64}), i64({2})).to_vector<int64_t>() == std::vector<int64_t>{-2});
  // alpha: a + alpha * b, each step wrapping (the fuzz input: add(i32, i32, alpha) near 2^30).
  CHECK(add(i32({-(1 << 30)}), i32({-(1 << 30)}), -3).to_vector<int32_t>() ==
        std::vector<int32_t>{static_cast<int32_t>(static_cast<uint32_t>(int64_t{-(1 << 30)} + 3 * (int64_t{1} << 30)))});
  CHECK(sub(i32({0, 10}), i32({1 << 30, 2}), 4).to_vector<int32_t>() == std::vector<int32_t>{0, 2});
  // Broadcast operands (the stride-0 loops) wrap too.
  CHECK(add(i32({kMax32, kMax32 - 1}), i32({2})).to_vector<int32_t>() == std::vector<int32_t>{kMin32 + 1, kMin32});
}

TEST_CASE("add/sub refuse an alpha the integer dtype cannot hold", "[ops][binary][integer]") {
  const Tensor a = i32({1, 2}), b = i32({3, 4});
  PRECIS_REQUIRE_THROWS_WITH_ALL(add(a, b, 9e15), ValueError, "add", "alpha", "9e+15", "i32", "[2] i32 cpu",
                                 "without overflow", "DType::f64");
  PRECIS_REQUIRE_THROWS_WITH_ALL(sub(a, b, int64_t{1} << 40), ValueError, "sub", "alpha", "1099511627776", "i32");
  PRECIS_REQUIRE_THROWS_WITH_ALL(add(a, b, kInf), ValueError, "add", "alpha", "inf");
  PRECIS_REQUIRE_THROWS_WITH_ALL(add(i64({1}), i64({1}), 0x1p63), ValueError, "add", "9.223372036854776e+18", "i64");
  PRECIS_REQUIRE_THROWS_WITH_ALL(add(a, b, kNaN), DTypeError, "add", "alpha must be an integer", "nan");
  // The bounds themselves are fine; a floating dtype takes any alpha.
  CHECK(add(i32({0}), i32({1}), -2147483648.0).to_vector<int32_t>() == std::vector<int32_t>{kMin32});
  CHECK(add(i64({0}), i64({1}), kMin64).to_vector<int64_t>() == std::vector<int64_t>{kMin64});
  CHECK(std::isinf(add(ones({1}), ones({1}), 1e300).item<float>()));
}

TEST_CASE("full, fill_, masked_fill and pad refuse values an integer dtype cannot hold", "[ops][fill][integer]") {
  // The fuzz input: full({2}, 1.4e308, i64).
  PRECIS_REQUIRE_THROWS_WITH_ALL(full({2}, 1.4e308, {.dtype = DType::i64}), ValueError, "full", "fill value", "1.4e+308",
                                 "i64", "shape [2]", "device cpu", "without overflow");
  PRECIS_REQUIRE_THROWS_WITH_ALL(full({2}, 3e9, {.dtype = DType::i32}), ValueError, "full", "3e+09", "i32");
  PRECIS_REQUIRE_THROWS_WITH_ALL(full({}, kNaN, {.dtype = DType::i32}), ValueError, "full", "nan");
  PRECIS_REQUIRE_THROWS_WITH_ALL(scalar_tensor(-kInf, {.dtype = DType::i64}), ValueError, "-inf");
  PRECIS_REQUIRE_THROWS_WITH_ALL(zeros({2, 3}, {.dtype = DType::i32}).fill_(int64_t{1} << 31), ValueError, "fill_",
                                 "2147483648", "[2, 3] i32 cpu");
  const Tensor x = i32({1, 2, 3});
  const Tensor m = from_vector<bool>({true, false, true});
  PRECIS_REQUIRE_THROWS_WITH_ALL(masked_fill(x, m, 1e10), ValueError, "masked_fill", "1e+10", "x [3] i32 cpu",
                                 "mask [3] bool cpu");
  PRECIS_REQUIRE_THROWS_WITH_ALL(pad(x, {1, 1}, -1e20), ValueError, "pad", "padding value", "-1e+20", "[3] i32 cpu");
  // In range: truncated toward zero (as PyTorch); the extremes are exact.
  CHECK(full({2}, -2.9, {.dtype = DType::i32}).to_vector<int32_t>() == std::vector<int32_t>{-2, -2});
  CHECK(full({1}, kMin64, {.dtype = DType::i64}).to_vector<int64_t>() == std::vector<int64_t>{kMin64});
  CHECK(full({1}, -0x1p63, {.dtype = DType::i64}).to_vector<int64_t>() == std::vector<int64_t>{kMin64});
  CHECK(masked_fill(x, m, -7).to_vector<int32_t>() == std::vector<int32_t>{-7, 2, -7});
  CHECK(pad(x, {1, 0}, kMax32).to_vector<int32_t>() == std::vector<int32_t>{kMax32, 1, 2, 3});
  // Floating and bool dtypes take any value: past the range is +-inf (IEEE), NaN stays NaN.
  CHECK(std::isinf(full({1}, 1e300).item<float>()));
  CHECK(std::isnan(full({1}, kNaN, {.dtype = DType::f16}).item<float>()));
  CHECK(full({1}, 1e300, {.dtype = DType::boolean}).item<bool>());
}

TEST_CASE("an integer scalar past i32's range next to an i32 tensor: exact comparisons, wrapped arithmetic",
          "[ops][binary][integer]") {
  const Tensor x = i32({1, -5, kMax32});
  const int64_t big = (int64_t{1} << 32) + 1;  // wraps to 1 in i32
  // Arithmetic: the result is i32, wrapped once (what PyTorch's wraparound gives).
  const Tensor s = add(x, big);
  CHECK(s.dtype() == DType::i32);
  CHECK(s.to_vector<int32_t>() == std::vector<int32_t>{2, -4, kMin32});
  CHECK(mul(x, big).to_vector<int32_t>() == std::vector<int32_t>{1, -5, kMax32});
  // Comparisons are exact, not against the wrapped value.
  CHECK(eq(x, big).to_vector<bool>() == std::vector<bool>{false, false, false});
  CHECK(lt(x, int64_t{1} << 40).to_vector<bool>() == std::vector<bool>{true, true, true});
  CHECK(gt(x, -(int64_t{1} << 40)).to_vector<bool>() == std::vector<bool>{true, true, true});
  // where with such a scalar selects it wrapped into i32.
  const Tensor w = where(from_vector<bool>({true, false, false}), x, big + 6);
  CHECK(w.dtype() == DType::i32);
  CHECK(w.to_vector<int32_t>() == std::vector<int32_t>{1, 7, 7});
}

TEST_CASE("cat and stack of empty views with a storage offset", "[ops][index][empty]") {
  // A slice of an empty tensor keeps a non-zero offset on a storage of 0 bytes: data_ptr() must
  // not add the offset to the null base (undefined behaviour: fuzz/open cat-empty-null-plus-offset).
  const Tensor e = empty({0, 4}).slice(1, 2, 4);
  REQUIRE(e.storage_offset() == 2);
  REQUIRE(e.numel() == 0);
  CHECK(e.data_ptr() == nullptr);
  const Tensor c = cat({e, e, empty({0, 2})}, 0);
  CHECK(c.sizes() == Shape{0, 2});
  CHECK(cat({e, e}, 1).sizes() == Shape{0, 4});
  CHECK(stack({e, e}, 0).sizes() == Shape{2, 0, 2});
  CHECK(stack({e, e}, 2).sizes() == Shape{0, 2, 2});
  // Non-empty tensors still address their first element past the offset.
  const Tensor p = arange(6.0);
  const Tensor v = p.slice(0, 2, 6);
  CHECK(static_cast<const char*>(v.data_ptr()) == static_cast<const char*>(p.data_ptr()) + 2 * p.element_size());
  CHECK(cat({v, e.flatten()}, 0).to_vector<float>() == std::vector<float>{2, 3, 4, 5});
}
