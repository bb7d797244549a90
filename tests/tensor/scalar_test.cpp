// Scalar's conversions (tensor/scalar.h): to_int64 is defined for every double (it was a plain
// static_cast, undefined past int64's range: fuzz/open finding of issue 13), and fits() says
// whether an integer dtype holds the value, which the ops that write a Scalar into a tensor check.
#include <cmath>
#include <cstdint>
#include <limits>

#include "tests/support/tensor_testing.h"

using namespace precis;

namespace {
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
constexpr int64_t kMin = std::numeric_limits<int64_t>::min();
}  // namespace

TEST_CASE("Scalar::to_int64 truncates, saturates past int64 and maps NaN to 0", "[tensor][scalar]") {
  CHECK(Scalar(2.9).to_int64() == 2);
  CHECK(Scalar(-2.9).to_int64() == -2);
  CHECK(Scalar(1.4e308).to_int64() == kMax);
  CHECK(Scalar(-1.4e308).to_int64() == kMin);
  CHECK(Scalar(0x1p63).to_int64() == kMax);
  CHECK(Scalar(-0x1p63).to_int64() == kMin);
  CHECK(Scalar(kInf).to_int64() == kMax);
  CHECK(Scalar(-kInf).to_int64() == kMin);
  CHECK(Scalar(kNaN).to_int64() == 0);
  CHECK(Scalar(kMax).to_int64() == kMax);  // integral scalars are kept exactly
  CHECK(Scalar(true).to_int64() == 1);
}

TEST_CASE("Scalar::fits: integer dtypes hold finite values whose truncation is in range", "[tensor][scalar]") {
  // i32: truncation toward zero decides, so -2^31 - 0.5 fits and -2^31 - 1 does not.
  CHECK(Scalar(2147483647.9).fits(DType::i32));
  CHECK_FALSE(Scalar(2147483648.0).fits(DType::i32));
  CHECK(Scalar(-2147483648.5).fits(DType::i32));
  CHECK_FALSE(Scalar(-2147483649.0).fits(DType::i32));
  CHECK(Scalar(int64_t{2147483647}).fits(DType::i32));
  CHECK_FALSE(Scalar(int64_t{2147483648}).fits(DType::i32));
  CHECK_FALSE(Scalar(int64_t{-2147483649}).fits(DType::i32));
  // i64: -2^63 is exact and in range, 2^63 is one past the maximum.
  CHECK(Scalar(-0x1p63).fits(DType::i64));
  CHECK_FALSE(Scalar(0x1p63).fits(DType::i64));
  CHECK(Scalar(std::nextafter(0x1p63, 0.0)).fits(DType::i64));
  CHECK_FALSE(Scalar(std::nextafter(-0x1p63, -kInf)).fits(DType::i64));
  CHECK(Scalar(kMax).fits(DType::i64));
  CHECK(Scalar(kMin).fits(DType::i64));
  for (DType dt : {DType::i32, DType::i64}) {
    CHECK_FALSE(Scalar(kNaN).fits(dt));
    CHECK_FALSE(Scalar(kInf).fits(dt));
    CHECK_FALSE(Scalar(-kInf).fits(dt));
    CHECK(Scalar(false).fits(dt));
  }
  // Floating dtypes and bool take anything (past the range rounds to +-inf, IEEE).
  for (DType dt : {DType::f32, DType::f64, DType::f16, DType::bf16, DType::boolean}) {
    CHECK(Scalar(1e308).fits(dt));
    CHECK(Scalar(kNaN).fits(dt));
    CHECK(Scalar(kMax).fits(dt));
  }
}
