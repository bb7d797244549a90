// Wrapper for the BasicBlock of docs/models.md: the class at file scope, then main() builds one
// with a projection shortcut, checks the PyTorch parameter names and runs forward and backward.
#include <precis/precis.h>

#include <iostream>

using namespace precis;

// @snippet

int main() {
  BasicBlock block(4, 8, 2);
  const auto params = block.named_parameters();
  if (params.front().first != "conv1.weight" || params.back().first != "downsample.1.bias") return 1;
  Tensor y = block(randn({2, 4, 8, 8}));
  if (y.sizes() != Shape{2, 8, 4, 4}) return 1;
  y.sum().backward();
  return block.named_parameters().front().second.grad().defined() ? 0 : 1;
}
