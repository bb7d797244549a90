// PyTorch-style members (x.shape(), x.sum(1), x.mean({0, 2}), x.argmax(1)), precis::argmax and the
// DType spellings of PyTorch (DType::float32, ...).
#include <catch2/catch.hpp>

#include <limits>

#include "ops/functional.h"
#include "tests/support/tensor_testing.h"

using namespace precis;

TEST_CASE("tensor methods: sum and mean as x.sum(), x.sum(dim), x.sum({dims}, keepdim)", "[tensor]") {
  const Tensor x = arange(24.0).view({2, 3, 4});
  CHECK(x.shape() == Shape{2, 3, 4});
  CHECK(x.sum().item<double>() == 276.0);
  CHECK(x.sum(1).sizes() == Shape{2, 4});
  PRECIS_REQUIRE_CLOSE(x.sum(1), sum(x, {1}), DType::f32);
  PRECIS_REQUIRE_CLOSE(x.sum(-1, true), sum(x, {2}, true), DType::f32);
  PRECIS_REQUIRE_CLOSE(x.sum({0, 2}), sum(x, {0, 2}), DType::f32);
  PRECIS_REQUIRE_CLOSE(x.sum({1}), sum(x, {1}), DType::f32);  // a one-element list is one dim
  CHECK(x.sum({}).item<double>() == 276.0);                    // an empty list: every dim, as precis::sum
  const std::vector<int64_t> dims{0, 1};
  PRECIS_REQUIRE_CLOSE(x.sum(dims, true), sum(x, dims, true), DType::f32);
  CHECK(x.mean().item<double>() == 11.5);
  PRECIS_REQUIRE_CLOSE(x.mean(1), mean(x, {1}), DType::f32);
  PRECIS_REQUIRE_CLOSE(x.mean({0, 2}, true), mean(x, {0, 2}, true), DType::f32);
  PRECIS_REQUIRE_CLOSE(x.mean(dims), mean(x, dims), DType::f32);
  // Differentiable like the functions.
  Tensor w = randn({3, 4}).requires_grad_();
  w.mean(1).sum().backward();
  PRECIS_REQUIRE_CLOSE(w.grad(), full({3, 4}, 0.25), DType::f32);
  PRECIS_REQUIRE_THROWS_WITH_ALL(x.sum(3), IndexError, "3");
}

TEST_CASE("argmax as torch.argmax: first maximum, NaN wins, flattened without dim", "[tensor]") {
  const Tensor x = from_vector<float>({1, 5, 5, 2, 7, 0}, {2, 3});
  CHECK(x.argmax(1).to_vector<int64_t>() == std::vector<int64_t>{1, 1});
  CHECK(x.argmax(0).to_vector<int64_t>() == std::vector<int64_t>{1, 1, 0});
  CHECK(x.argmax(1, true).sizes() == Shape{2, 1});
  CHECK(x.argmax().item<int64_t>() == 4);
  CHECK(x.argmax().dim() == 0);
  CHECK(argmax(x, 1).dtype() == DType::i64);
  CHECK(argmax(x).item<int64_t>() == 4);
  CHECK(argmax(x, std::nullopt, true).sizes() == Shape{1, 1});  // torch.argmax(x, keepdim=True)
  CHECK(argmax(x, -1).to_vector<int64_t>() == std::vector<int64_t>{1, 1});
  const float nan = std::numeric_limits<float>::quiet_NaN();
  CHECK(from_vector<float>({1, nan, 3, nan}).argmax().item<int64_t>() == 1);
  // Not differentiable: the index of a tensor that requires grad records no graph.
  Tensor w = randn({3, 4}).requires_grad_();
  CHECK_FALSE(w.argmax(1).requires_grad());
  // Accuracy the PyTorch way.
  const Tensor logits = from_vector<float>({0.1f, 2.0f, -1.0f, 3.0f, 0.0f, 0.5f}, {3, 2});
  const Tensor target = from_vector<int64_t>({1, 1, 0});  // argmax is {1, 1, 1}
  CHECK(eq(logits.argmax(1), target).to(DType::f32).mean().item<double>() == Approx(2.0 / 3.0));
  PRECIS_REQUIRE_THROWS_WITH_ALL(argmax(zeros({0})), ValueError, "size 0");
}

TEST_CASE("DType has PyTorch's spellings as aliases", "[tensor][core]") {
  static_assert(DType::float32 == DType::f32 && DType::float64 == DType::f64 && DType::float16 == DType::f16 &&
                DType::half == DType::f16 && DType::bfloat16 == DType::bf16 && DType::int64 == DType::i64 &&
                DType::int32 == DType::i32);
  const Tensor t = zeros({2}, {.dtype = DType::bfloat16});
  CHECK(t.dtype() == DType::bf16);
  CHECK(dtype_name(DType::float32) == "f32");
  CHECK(randn({2}).to(DType::float16).dtype() == DType::f16);
}
