// Views under autograd: gradients flow back to the base with the right shape and placement,
// in-place writes into views of tensors that require grad are refused, and saved tensors detect
// writes through any view (they share the version counter). Gradient checks of the view ops
// themselves live in tests/ops/view_grad_test.cpp.
#include "autograd/grad_mode.h"
#include "ops/functional.h"
#include "tests/support/tensor_testing.h"

using namespace precis;

namespace {
Tensor leaf(const Shape& shape) {
  Tensor t = arange(static_cast<double>(shape_numel(shape)), {.dtype = DType::f64}).view(shape).clone();
  t.requires_grad_(true);
  return t;
}
}  // namespace

TEST_CASE("gradients of views land in the right elements of the base", "[tensor][views][autograd]") {
  SECTION("slice with a step") {
    Tensor x = leaf({6});
    sum(x.slice(0, 1, 6, 2)).backward();
    REQUIRE(x.grad().to_vector<double>() == std::vector<double>{0, 1, 0, 1, 0, 1});
  }
  SECTION("select and narrow") {
    Tensor x = leaf({3, 4});
    sum(x.select(1, -1) * 2.0 + sum(x.narrow(0, 1, 1))).backward();
    // select: column 3 gets 2 from each of its 3 uses; narrow: row 1 gets 3 (the inner sum is
    // broadcast over the 3 elements of the select).
    REQUIRE(x.grad().to_vector<double>() == std::vector<double>{0, 0, 0, 2, 3, 3, 3, 5, 0, 0, 0, 2});
  }
  SECTION("expand sums over the broadcast dims") {
    Tensor x = leaf({3, 1});
    sum(x.expand({2, 3, 4})).backward();
    REQUIRE(x.grad().sizes() == Shape{3, 1});
    REQUIRE(x.grad().to_vector<double>() == std::vector<double>{8, 8, 8});
  }
  SECTION("permute and transpose map gradients back") {
    Tensor x = leaf({2, 3});
    Tensor w = arange(6.0, {.dtype = DType::f64}).view({3, 2});
    sum(x.t() * w).backward();  // d/dx[i][j] = w[j][i]
    REQUIRE(x.grad().to_vector<double>() == std::vector<double>{0, 2, 4, 1, 3, 5});
  }
  SECTION("view, reshape of a non-contiguous input, flatten, squeeze, unsqueeze") {
    Tensor x = leaf({2, 3});
    Tensor w = arange(6.0, {.dtype = DType::f64});
    sum(x.t().reshape({6}) * w + x.unsqueeze(0).squeeze(0).flatten() * 0.0).backward();
    REQUIRE(x.grad().sizes() == Shape{2, 3});
    REQUIRE(x.grad().to_vector<double>() == std::vector<double>{0, 2, 4, 1, 3, 5});
  }
  SECTION("to(dtype) casts the gradient back") {
    Tensor x = leaf({3});
    sum(x.to(DType::f32) * 2.0).backward();
    REQUIRE(x.grad().dtype() == DType::f64);
    REQUIRE(x.grad().to_vector<double>() == std::vector<double>{2, 2, 2});
  }
  SECTION("views of a requires-grad tensor are non-leaves with a grad_fn") {
    Tensor x = leaf({2, 2});
    Tensor v = x.view({4});
    REQUIRE(v.requires_grad());
    REQUIRE_FALSE(v.is_leaf());
    REQUIRE(v.grad_fn() != nullptr);
    REQUIRE(x.t().str().find("grad_fn=<") != std::string::npos);
    REQUIRE(x.str().find("requires_grad=true") != std::string::npos);
    REQUIRE_FALSE(x.detach().requires_grad());
    NoGradGuard no_grad;
    REQUIRE_FALSE(x.view({4}).requires_grad());
  }
}

TEST_CASE("in-place writes into views of tensors that require grad are refused", "[tensor][views][autograd]") {
  Tensor x = leaf({2, 3});
  PRECIS_REQUIRE_THROWS_WITH_ALL(x.select(0, 0).fill_(1.0), StateError, "fill_", "requires grad", "NoGradGuard");
  PRECIS_REQUIRE_THROWS_WITH_ALL(x.t().copy_(zeros({3, 2}, {.dtype = DType::f64})), StateError, "copy_");
  {
    NoGradGuard no_grad;  // what optimizers do
    x.select(0, 0).fill_(1.0);
  }
  REQUIRE(x.to_vector<double>() == std::vector<double>{1, 1, 1, 3, 4, 5});
  // A tensor that is not a view takes the history of what is copied into it (tests/autograd/inplace_test.cpp).
  Tensor plain = zeros({3}, {.dtype = DType::f64});
  plain.copy_(x.select(0, 1));
  sum(plain * 2.0).backward();
  REQUIRE(x.grad().to_vector<double>() == std::vector<double>{0, 0, 0, 2, 2, 2});
}

TEST_CASE("a saved tensor modified through a view is detected in backward", "[tensor][views][autograd]") {
  Tensor x = leaf({3});
  Tensor base = ones({2, 3}, {.dtype = DType::f64});
  Tensor row = base.select(0, 0);
  Tensor y = sum(x * row);  // saves row (shares base's version counter)
  base.select(0, 1).fill_(5.0);  // a write to another row still bumps the shared counter
  REQUIRE_THROWS_AS(y.backward(), StateError);
}
