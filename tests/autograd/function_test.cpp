#include <catch2/catch.hpp>

#include "autograd/function.h"
#include "autograd/gradcheck.h"
#include "ops/functional.h"
#include "tests/support/tensor_testing.h"

namespace precis {
namespace {

using autograd::FunctionContext;
using autograd::TensorList;

// x^3 whose backward returns slope·x^2·g: the right derivative for slope 3, and a deliberately
// wrong one (WrongCube) that gradcheck must catch.
// The slope in tenths: clang 14 (the sanitizer build) takes no floating-point template argument.
template <int SlopeTenths>
struct CubeWithSlope : autograd::Function<CubeWithSlope<SlopeTenths>> {
  static Tensor forward(FunctionContext& ctx, const Tensor& x) {
    ctx.save_for_backward({x});
    return x * x * x;
  }
  static TensorList backward(FunctionContext& ctx, const TensorList& g) {
    Tensor x = ctx.saved()[0];
    return {g[0] * x * x * (SlopeTenths / 10.0)};
  }
};
using Cube = CubeWithSlope<30>;
using WrongCube = CubeWithSlope<29>;

struct ScaleBy : autograd::Function<ScaleBy> {
  static Tensor forward(FunctionContext& ctx, const Tensor& x, double s) {
    ctx.values = {s};
    return x * s;
  }
  static TensorList backward(FunctionContext& ctx, const TensorList& g) { return {g[0] * ctx.values[0]}; }
};

TEST_CASE("a custom Function records its backward", "[autograd]") {
  Tensor x = from_vector<double>({1.0, 2.0}).requires_grad_();
  Tensor y = Cube::apply(x);
  REQUIRE(y.grad_fn() != nullptr);
  CHECK(y.grad_fn()->name().find("Cube") != std::string::npos);
  sum(y).backward();
  CHECK(x.grad().to_vector<double>() == std::vector<double>{3.0, 12.0});
  Tensor z = ScaleBy::apply(x, 4.0);
  CHECK(z.to_vector<double>() == std::vector<double>{4.0, 8.0});
}

TEST_CASE("gradcheck passes a correct backward and catches a wrong one", "[autograd][grad]") {
  Tensor x = testing::randn_input({3, 2});
  auto good = autograd::gradcheck([](const TensorList& in) { return TensorList{Cube::apply(in[0])}; }, {x});
  INFO(good.message);
  CHECK(good.ok);
  auto bad = autograd::gradcheck([](const TensorList& in) { return TensorList{WrongCube::apply(in[0])}; }, {x});
  CHECK_FALSE(bad.ok);
  CHECK(bad.message.find("analytic") != std::string::npos);
  // The random-direction mode (large input) also catches it.
  Tensor big = testing::randn_input({40, 30});
  auto bad_big = autograd::gradcheck([](const TensorList& in) { return TensorList{WrongCube::apply(in[0])}; }, {big});
  CHECK_FALSE(bad_big.ok);
  auto good_big = autograd::gradcheck([](const TensorList& in) { return TensorList{Cube::apply(in[0])}; }, {big});
  CHECK(good_big.ok);
}

TEST_CASE("gradcheck refuses non-f64 inputs", "[autograd][grad]") {
  Tensor x = testing::randn_input({2}, true, 0, DType::f32);
  CHECK_THROWS_AS(autograd::gradcheck([](const TensorList& in) { return in; }, {x}), DTypeError);
}

}  // namespace
}  // namespace precis
