// docs/models.md's example, compiled and run by the test suite: a ResNet BasicBlock written as a
// module, its PyTorch-style names, a few training steps, a checkpoint round trip and a clone.
#include <precis/precis.h>
#include "tensor/state_dict.h"

#include <cstdio>
#include <iostream>

using namespace precis;

class BasicBlock : public nn::Module {
 public:
  BasicBlock(int64_t in, int64_t out, int64_t stride = 1)
      : conv1_(add("conv1", nn::Conv2d(in, out, 3, {.stride = stride, .padding = 1, .bias = false}))),
        bn1_(add("bn1", nn::BatchNorm2d(out))),
        conv2_(add("conv2", nn::Conv2d(out, out, 3, {.padding = 1, .bias = false}))),
        bn2_(add("bn2", nn::BatchNorm2d(out))) {
    if (stride != 1 || in != out)
      down_ = add("downsample", nn::Sequential{nn::Conv2d(in, out, 1, {.stride = stride, .bias = false}),
                                               nn::BatchNorm2d(out)});
  }

  Tensor forward(const Tensor& x) override {
    Tensor y = relu(bn1_(conv1_(x)));
    y = bn2_(conv2_(y));
    return relu(y + (down_ ? down_(x) : x));
  }

 private:
  nn::Child<nn::Conv2d> conv1_;
  nn::Child<nn::BatchNorm2d> bn1_;
  nn::Child<nn::Conv2d> conv2_;
  nn::Child<nn::BatchNorm2d> bn2_;
  nn::Child<nn::Sequential> down_;  // empty for the identity shortcut
};

int main() {
  manual_seed(0);
  BasicBlock block(3, 8, 2);
  for (const auto& [name, p] : block.named_parameters()) std::cout << name << " " << shape_str(p.sizes()) << "\n";
  // conv1.weight [8, 3, 3, 3] ... downsample.0.weight [8, 3, 1, 1], downsample.1.weight [8]

  optim::SGD opt(block.parameters(), {.lr = 0.1, .momentum = 0.9});
  const Tensor x = randn({4, 3, 8, 8});
  const Tensor target = randn({4, 8, 4, 4});
  double first = 0, last = 0;
  for (int step = 0; step < 20; ++step) {
    opt.zero_grad();
    Tensor loss = mse_loss(block(x), target);
    loss.backward();
    opt.step();
    (step == 0 ? first : last) = loss.item<double>();
  }
  std::cout << "loss " << first << " -> " << last << "\n";

  // Checkpoint: state_dict → safetensors → a fresh block, strictly.
  const StateDict sd = block.state_dict();
  save_state_dict("basic_block_example.safetensors", sd);
  BasicBlock restored(3, 8, 2);
  restored.load_state_dict(load_state_dict_file("basic_block_example.safetensors"));
  std::remove("basic_block_example.safetensors");

  block.eval();
  restored.eval();
  auto copy = block.clone<BasicBlock>();  // a deep copy with the same names
  const float a = sum(block(x)).item<float>(), b = sum(restored(x)).item<float>(), c = sum((*copy)(x)).item<float>();
  std::cout << "eval outputs agree: " << (a == b && a == c ? "yes" : "no") << "\n";
  return (last < first && a == b && a == c) ? 0 : 1;
}
