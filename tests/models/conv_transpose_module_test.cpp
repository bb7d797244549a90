// nn::ConvTranspose2d: PyTorch's parameter layout and initialisation, forward through
// precis::conv_transpose2d, the decoder's upsampling, printing and bad options.
#include <algorithm>
#include <cmath>
#include <sstream>

#include <catch2/catch.hpp>

#include "models/nn/nn.h"
#include "ops/functional.h"
#include "tensor/factory.h"
#include "tests/support/tensor_testing.h"

namespace precis {
namespace {

TEST_CASE("nn::ConvTranspose2d: PyTorch's parameter layout and initial bounds", "[models][conv]") {
  Generator gen(11);
  nn::ConvTranspose2d up(8, 6, 3, {.stride = 2, .padding = 1, .output_padding = 1, .groups = 2, .generator = &gen});
  REQUIRE(up.weight.sizes() == Shape{8, 3, 3, 3});  // (in, out / groups, kH, kW), as torch
  REQUIRE(up.bias.sizes() == Shape{6});
  const auto params = up.named_parameters();
  REQUIRE(params.size() == 2);
  CHECK(params[0].first == "weight");
  CHECK(params[1].first == "bias");
  // kaiming_uniform_(a = √5) and the bias bound are both 1/√fan_in, fan_in = 3·3·3 (torch's rule).
  const double bound = 1.0 / std::sqrt(27.0);
  for (const Tensor& p : {up.weight, up.bias}) {
    const std::vector<float> v = p.to_vector<float>();
    CHECK(*std::max_element(v.begin(), v.end()) <= bound);
    CHECK(*std::min_element(v.begin(), v.end()) >= -bound);
    CHECK(*std::max_element(v.begin(), v.end()) > 0.5 * bound);  // drawn, not zero
  }
  std::ostringstream printed;
  printed << up;
  CHECK(printed.str() == "ConvTranspose2d(8, 6, kernel_size=(3, 3), stride=(2, 2), padding=(1, 1), "
                         "output_padding=(1, 1), groups=2)");
}

TEST_CASE("nn::ConvTranspose2d: a decoder's upsampling doubles H and W, as conv_transpose2d", "[models][conv]") {
  Generator gen(12);
  nn::ConvTranspose2d up(4, 2, 2, {.stride = 2, .generator = &gen});
  const Tensor x = randn({3, 4, 5, 7}, {}, &gen);
  const Tensor y = up(x);
  REQUIRE(y.sizes() == Shape{3, 2, 10, 14});
  CHECK(y.to_vector<float>() == conv_transpose2d(x, up.weight, up.bias, {2}).to_vector<float>());
  sum(y).backward();
  REQUIRE(up.weight.grad().defined());
  REQUIRE(up.bias.grad().defined());
  CHECK(up.bias.grad().to_vector<float>() == std::vector<float>{420.0f, 420.0f});  // 3·10·14 outputs per channel
  PRECIS_REQUIRE_THROWS_WITH_ALL(up(randn({3, 5, 5, 7})), ShapeError, "nn::ConvTranspose2d(4, 2)", "[3, 5, 5, 7]");
}

TEST_CASE("nn::ConvTranspose2d: bad options name the layer", "[models][conv]") {
  PRECIS_REQUIRE_THROWS_WITH_ALL(nn::ConvTranspose2d(4, 3, 3, {.groups = 2}), ValueError, "nn::ConvTranspose2d",
                                 "groups (2)", "out_channels (3)");
  PRECIS_REQUIRE_THROWS_WITH_ALL(nn::ConvTranspose2d(4, 4, 3, {.stride = 2, .output_padding = 2}), ValueError,
                                 "output_padding (2, 2)", "stride (2, 2)");
  PRECIS_REQUIRE_THROWS_WITH_ALL(nn::ConvTranspose2d(0, 4, 3), ValueError, "positive");
}

}  // namespace
}  // namespace precis
