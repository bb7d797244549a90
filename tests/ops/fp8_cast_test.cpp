// scaled_fp8_cast, the fp8 recipe's one-pass cast (ops/functional.h): against the composed ops it
// replaces — (x · scale) clamped to ±max then cast, and max |x| — bit for bit, on every floating
// input dtype, both formats, special values, several chunks and thread counts, strided, 0-d and
// empty inputs; and its bad inputs. (Every f16/bf16 input against the host rule, and the CUDA
// kernel against the CPU's: tests/amp/fp8_recipe_test.cpp.)
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "core/float8.h"
#include "core/thread_pool.h"
#include "ops/functional.h"
#include "tensor/factory.h"
#include "tests/support/op_cases.h"
#include "tests/support/tensor_testing.h"

namespace precis::testing {
namespace {

std::vector<uint8_t> bytes_of(const Tensor& t) {
  const Tensor c = t.contiguous();
  const auto* p = static_cast<const uint8_t*>(c.data_ptr());
  return std::vector<uint8_t>(p, p + c.numel());
}

// What amp's cast composed before the kernel existed.
ScaledFp8Cast composed(const Tensor& x, const Tensor& scale, DType fp8) {
  const double m = fp8_max(fp8 == DType::f8_e4m3 ? Fp8Format::e4m3 : Fp8Format::e5m2);
  const Tensor scaled = mul(x.to(DType::f32), scale.reshape({}));
  return {minimum(maximum(scaled, -m), m).to(fp8).contiguous(),
          x.numel() == 0 ? zeros({}) : max(abs(x)).to(DType::f32)};
}

void check_equal(const ScaledFp8Cast& got, const ScaledFp8Cast& want) {
  REQUIRE(got.data.sizes() == want.data.sizes());
  CHECK(got.data.dtype() == want.data.dtype());
  CHECK(bytes_of(got.data) == bytes_of(want.data));
  REQUIRE(got.amax.dim() == 0);
  CHECK(got.amax.dtype() == DType::f32);
  const float a = got.amax.item<float>(), b = want.amax.item<float>();
  if (std::isnan(b)) {
    CHECK(std::isnan(a));
  } else {
    CHECK(a == b);
  }
}

// Random values over many binades plus the edges: ±0, ±inf, the formats' maxima and the halfway
// points past them, subnormal magnitudes, and values that round up across a binade.
Tensor test_values(int64_t n, DType dtype, uint64_t seed) {
  Generator g(seed);
  Tensor x = mul(randn({n}, {}, &g), exp(mul(randn({n}, {}, &g), 4.0)));
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> edges = {0.0f, -0.0f, inf, -inf, 448.0f, 464.0f, 480.0f, -480.0f, 57344.0f, 61439.0f,
                                    61440.0f, -65504.0f, 1e-40f, -1e-39f, 0.0009765625f, 1.9375f, 1e30f, -3e38f};
  Tensor head = from_vector<float>(edges);
  x.narrow(0, 0, static_cast<int64_t>(edges.size())).copy_(head);
  return x.to(dtype);
}

TEST_CASE("scaled_fp8_cast equals the composed cast and amax bit for bit", "[ops][fp8]") {
  for (DType dtype : {DType::f32, DType::f64, DType::f16, DType::bf16}) {
    // 40 000 elements: three of the CPU kernel's chunks.
    const Tensor x = test_values(40000, dtype, 7);
    for (DType fp8 : {DType::f8_e4m3, DType::f8_e5m2}) {
      for (float s : {1.0f, 0.37f, 1024.0f, 1.0f / 1024.0f, 3e38f}) {
        INFO(dtype_name(dtype) << " -> " << dtype_name(fp8) << ", scale " << s);
        const Tensor scale = full({}, s);
        check_equal(scaled_fp8_cast(x, scale, fp8), composed(x, scale, fp8));
      }
    }
  }
}

TEST_CASE("scaled_fp8_cast: NaN, strided, 0-d and empty inputs, any thread count", "[ops][fp8]") {
  Tensor x = test_values(1 << 15, DType::f32, 3);
  x.narrow(0, 30000, 1).fill_(std::numeric_limits<float>::quiet_NaN());
  const Tensor scale = full({1}, 2.5f);
  const ScaledFp8Cast want = composed(x, scale, DType::f8_e4m3);
  CHECK(std::isnan(want.amax.item<float>()));
  const int saved = get_num_threads();
  for (int threads : {1, 2, 3}) {
    set_num_threads(threads);
    check_equal(scaled_fp8_cast(x, scale, DType::f8_e4m3), want);
  }
  set_num_threads(saved);
  const Tensor strided = x.view({128, 256}).t();
  const ScaledFp8Cast s = scaled_fp8_cast(strided, scale, DType::f8_e5m2);
  CHECK(s.data.sizes() == Shape{256, 128});
  CHECK(s.data.is_contiguous());
  check_equal(s, composed(strided, scale, DType::f8_e5m2));
  check_equal(scaled_fp8_cast(full({}, -700.0f), scale, DType::f8_e4m3), composed(full({}, -700.0f), scale, DType::f8_e4m3));
  const ScaledFp8Cast e = scaled_fp8_cast(zeros({0, 3}, {.dtype = DType::bf16}), scale, DType::f8_e4m3);
  CHECK(e.data.sizes() == Shape{0, 3});
  CHECK(e.amax.item<float>() == 0.0f);
}

const bool kBadInputs = register_error_cases({
    PRECIS_BAD_INPUT(fp8_scaled_cast, DTypeError, "an integer input",
                     scaled_fp8_cast(zeros({4}, {.dtype = DType::i64}), full({}, 1.0f), DType::f8_e4m3),
                     "scaled_fp8_cast", "[4] i64 cpu", "floating"),
    PRECIS_BAD_INPUT(fp8_scaled_cast, DTypeError, "an f64 scale",
                     scaled_fp8_cast(zeros({4}), full({}, 1.0, {.dtype = DType::f64}), DType::f8_e4m3),
                     "scaled_fp8_cast", "scale is [] f64 cpu", "f32"),
    PRECIS_BAD_INPUT(fp8_scaled_cast, DTypeError, "a bf16 target", scaled_fp8_cast(zeros({4}), full({}, 1.0f), DType::bf16),
                     "scaled_fp8_cast", "f8_e4m3 or f8_e5m2", "bf16"),
    PRECIS_BAD_INPUT(fp8_scaled_cast, ShapeError, "a per-row scale",
                     scaled_fp8_cast(zeros({2, 4}), ones({2}), DType::f8_e4m3), "scaled_fp8_cast", "one value",
                     "[2] f32 cpu"),
    PRECIS_BAD_INPUT(fp8_scaled_cast, ValueError, "an undefined scale",
                     scaled_fp8_cast(zeros({4}), Tensor(), DType::f8_e4m3), "scaled_fp8_cast", "undefined"),
    PRECIS_BAD_INPUT(fp8_scaled_cast, ValueError, "an undefined input",
                     scaled_fp8_cast(Tensor(), full({}, 1.0f), DType::f8_e4m3), "scaled_fp8_cast", "undefined"),
});

}  // namespace
}  // namespace precis::testing
