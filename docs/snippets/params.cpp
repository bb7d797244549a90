// Wrapper for optimizer snippets over bare tensors: `w` (4, 1) and `b` (1) f32 leaves, `b16` a bf16
// leaf, and `params` = {w, b}; every one has a gradient (from a small regression loss).
#include <precis/precis.h>

#include <cmath>
#include <iostream>
#include <vector>

using namespace precis;

int main() {
  Tensor w = randn({4, 1}).requires_grad_();
  Tensor b = zeros({1}).requires_grad_();
  Tensor b16 = zeros({1}, {.dtype = DType::bf16}).requires_grad_();
  std::vector<Tensor> params = {w, b};
  const Tensor x = randn({16, 4});
  mse_loss(matmul(x, w) + b, x.sum(1, true)).backward();
  b16.set_grad(ones({1}, {.dtype = DType::bf16}));

  // @snippet

  return 0;
}
