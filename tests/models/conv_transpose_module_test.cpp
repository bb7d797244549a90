// nn::ConvTranspose2d and nn::Conv1d: PyTorch's parameter layout and initialisation, forward
// through precis::conv_transpose2d / conv1d, the decoder's upsampling, printing and bad options.
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
  PRECIS_REQUIRE_THROWS_WITH_ALL(up(randn({3, 5, 5, 7})), ShapeError, "nn::ConvTranspose2d(4, 2)", "[3, 5, 5, 7]",
                                 "(N, 4, H, W) or (4, H, W)");
}

TEST_CASE("nn::Conv1d: PyTorch's layout, initial bounds and repr, forward through conv1d", "[models][conv]") {
  Generator gen(13);
  nn::Conv1d conv(4, 6, 3, {.stride = 2, .padding = 1, .groups = 2, .generator = &gen});
  REQUIRE(conv.weight.sizes() == Shape{6, 2, 3});
  REQUIRE(conv.bias.sizes() == Shape{6});
  const double bound = 1.0 / std::sqrt(6.0);  // fan_in = 2·3
  for (const Tensor& p : {conv.weight, conv.bias}) {
    const std::vector<float> v = p.to_vector<float>();
    CHECK(*std::max_element(v.begin(), v.end()) <= bound);
    CHECK(*std::min_element(v.begin(), v.end()) >= -bound);
  }
  std::ostringstream printed;
  printed << conv;
  CHECK(printed.str() == "Conv1d(4, 6, kernel_size=(3,), stride=(2,), padding=(1,), groups=2)");
  const Tensor x = randn({2, 4, 9}, {}, &gen);
  PRECIS_REQUIRE_SAME_BITS(conv(x), conv1d(x, conv.weight, conv.bias, 2, 1, 1, 2));
  CHECK(conv(x).sizes() == Shape{2, 6, 5});
  PRECIS_REQUIRE_THROWS_WITH_ALL(conv(randn({2, 5, 9})), ShapeError, "nn::Conv1d(4, 6)", "(N, 4, L)");
  PRECIS_REQUIRE_THROWS_WITH_ALL(nn::Conv1d(4, 6, 3, {.groups = 4}), ValueError, "nn::Conv1d", "groups (4)");
}

TEST_CASE("nn::ConvTranspose2d: forward(x, output_size) picks the output_padding, as PyTorch's", "[models][conv]") {
  Generator gen(14);
  nn::ConvTranspose2d up(4, 2, 3, {.stride = 2, .padding = 1, .generator = &gen});
  const Tensor x = randn({1, 4, 4, 5}, {}, &gen);
  CHECK(up(x).sizes() == Shape{1, 2, 7, 9});
  // A U-Net's skip connection of an even size: output_padding 1 in both dims.
  const Tensor skip = zeros({1, 2, 8, 10});
  const Tensor y = up.forward(x, skip.sizes());
  REQUIRE(y.sizes() == Shape{1, 2, 8, 10});
  PRECIS_REQUIRE_SAME_BITS(y, conv_transpose2d(x, up.weight, up.bias, {2}, {1}, {1}));
  CHECK(up.forward(x, {7, 10}).sizes() == Shape{1, 2, 7, 10});
  CHECK(up.forward(x.select(0, 0), {8, 9}).sizes() == Shape{2, 8, 9});
  PRECIS_REQUIRE_THROWS_WITH_ALL(up.forward(x, {9, 9}), ValueError, "output_size [9, 9]", "height of 9", "7 to 8");
  PRECIS_REQUIRE_THROWS_WITH_ALL(up.forward(x, {9}), ValueError, "height and width");
}

TEST_CASE("nn::MaxPool1d and nn::AvgPool1d: the functional ops, PyTorch's defaults, a 1-D CNN", "[models][conv]") {
  const Tensor x = randn({2, 4, 11});
  nn::MaxPool1d mp(3, {.stride = 2, .padding = 1});
  nn::AvgPool1d ap(2);
  PRECIS_REQUIRE_SAME_BITS(mp(x), max_pool1d(x, 3, 2, 1));
  PRECIS_REQUIRE_SAME_BITS(ap(x), avg_pool1d(x, 2));
  CHECK(ap(x).sizes() == Shape{2, 4, 5});  // stride defaults to the kernel size
  CHECK(mp.str() == "MaxPool1d(kernel_size=3, stride=2, padding=1, dilation=1, ceil_mode=false)");
  CHECK(ap.str() == "AvgPool1d(kernel_size=(2,), stride=(2,), padding=(0,))");
  nn::Sequential cnn{nn::Conv1d(4, 8, 3, {.padding = 1}), nn::ReLU(), nn::MaxPool1d(2), nn::Conv1d(8, 8, 3),
                     nn::AvgPool1d(3)};
  CHECK(cnn(x).sizes() == Shape{2, 8, 1});
  PRECIS_REQUIRE_THROWS_WITH_ALL(nn::MaxPool1d(0), ValueError, "nn::MaxPool1d", "positive");
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
