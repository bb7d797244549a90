// cross_entropy's options struct: the same results as the positional form, with only the fields
// that differ from PyTorch's defaults named.
#include <catch2/catch.hpp>

#include "ops/functional.h"
#include "tests/support/tensor_testing.h"

using namespace precis;

TEST_CASE("cross_entropy(x, y, {.label_smoothing = ...}) equals the positional form", "[ops][loss]") {
  manual_seed(9);
  const Tensor x = randn({6, 5});
  const Tensor y = from_vector<int64_t>({0, 4, 2, -100, 1, 3});
  const Tensor w = rand({5}) + 0.5;
  PRECIS_REQUIRE_CLOSE(cross_entropy(x, y, {.label_smoothing = 0.1}),
                       cross_entropy(x, y, Tensor(), -100, Reduction::mean, 0.1), DType::f32);
  PRECIS_REQUIRE_CLOSE(cross_entropy(x, y, {.weight = w, .reduction = Reduction::sum}),
                       cross_entropy(x, y, w, -100, Reduction::sum), DType::f32);
  const Tensor y2 = from_vector<int64_t>({0, 4, 2, 3, 1, 3});
  PRECIS_REQUIRE_CLOSE(cross_entropy(x, y2, {.ignore_index = 3, .reduction = Reduction::none}),
                       cross_entropy(x, y2, Tensor(), 3, Reduction::none), DType::f32);
  // Defaults are PyTorch's.
  CrossEntropyOptions o;
  CHECK_FALSE(o.weight.defined());
  CHECK(o.ignore_index == -100);
  CHECK(o.reduction == Reduction::mean);
  CHECK(o.label_smoothing == 0.0);
  PRECIS_REQUIRE_CLOSE(cross_entropy(x, y, o), cross_entropy(x, y), DType::f32);
  // Differentiable through the struct form as well.
  Tensor xg = x.clone().requires_grad_();
  cross_entropy(xg, y, {.label_smoothing = 0.2}).backward();
  CHECK(xg.grad().defined());
  PRECIS_REQUIRE_THROWS_WITH_ALL(cross_entropy(x, from_vector<int64_t>({0, 9, 0, 0, 0, 0}), {.label_smoothing = 0.1}),
                                 IndexError, "9");
}
