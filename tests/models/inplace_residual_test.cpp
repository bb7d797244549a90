// torchvision's BasicBlock ends with `out += identity`: a model written that way trains, and its
// gradients are those of `out = out + identity` (converted to out's dtype, as the write does), bit
// for bit, in f32 and under bf16 autocast.
#include <algorithm>
#include <optional>

#include <catch2/catch.hpp>

#include "amp/autocast.h"
#include "models/nn/nn.h"
#include "ops/functional.h"
#include "tensor/factory.h"
#include "tests/support/tensor_testing.h"

namespace precis {
namespace {

class BasicBlock : public nn::Module {
 public:
  explicit BasicBlock(Generator* gen)
      : conv1(add("conv1", nn::Conv2d(4, 4, 3, {.padding = 1, .bias = false, .generator = gen}))),
        bn1(add("bn1", nn::BatchNorm2d(4))),
        conv2(add("conv2", nn::Conv2d(4, 4, 3, {.padding = 1, .bias = false, .generator = gen}))),
        bn2(add("bn2", nn::BatchNorm2d(4))) {}

  Tensor forward(const Tensor& x) override {
    Tensor out = relu(bn1(conv1(x)));
    out = bn2(conv2(out));
    if (in_place) {
      out += x;
    } else {
      out = (out + x).to(out.dtype());  // what an in-place write stores (bf16 under autocast)
    }
    return relu(out);
  }

  bool in_place = true;
  nn::Child<nn::Conv2d> conv1;
  nn::Child<nn::BatchNorm2d> bn1;
  nn::Child<nn::Conv2d> conv2;
  nn::Child<nn::BatchNorm2d> bn2;
};

// The parameters' and the input's gradients after one forward and backward.
std::vector<std::vector<float>> gradients(BasicBlock& block, const Tensor& input, bool autocast) {
  for (Tensor& p : block.parameters()) p.set_grad(Tensor());
  Tensor x = input.detach().requires_grad_();
  {
    std::optional<amp::Autocast> ac;
    if (autocast) ac.emplace(DType::bf16);
    Tensor y = block.forward(x);
    sum(y.to(DType::f32) * y.to(DType::f32)).backward();
  }
  std::vector<std::vector<float>> out{x.grad().to_vector<float>()};
  for (const Tensor& p : block.parameters()) out.push_back(p.grad().to_vector<float>());
  return out;
}

TEST_CASE("a residual block written with out += identity has out + identity's gradients", "[models][inplace]") {
  const bool autocast = GENERATE(false, true);
  Generator gen(7);
  BasicBlock block(&gen);
  const Tensor input = randn({2, 4, 6, 6}, {}, &gen);
  block.in_place = true;
  const auto in_place = gradients(block, input, autocast);
  block.in_place = false;
  const auto out_of_place = gradients(block, input, autocast);
  REQUIRE(in_place.size() == 7);  // the input, two convolution weights, two BatchNorm weights and biases
  for (size_t i = 0; i < in_place.size(); ++i) {
    INFO("gradient " << i << (autocast ? " under bf16 autocast" : " in f32"));
    CHECK(in_place[i] == out_of_place[i]);
    CHECK(std::any_of(in_place[i].begin(), in_place[i].end(), [](float v) { return v != 0.0f; }));
  }
}

}  // namespace
}  // namespace precis
