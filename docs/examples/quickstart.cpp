// The README's example, compiled and run by the test suite (docs/examples/CMakeLists.txt).
#include <precis/precis.h>
#include <iostream>

using namespace precis;

int main() {
  manual_seed(0);
  Tensor w = randn({3, 2}).requires_grad_();        // a leaf that collects gradients
  Tensor x = randn({4, 3});
  Tensor y = from_vector<float>({1, 0, 0, 1, 1, 0, 0, 1}, {4, 2});

  Tensor pred = relu(matmul(x, w));                  // (4, 3) @ (3, 2) -> (4, 2)
  Tensor loss = mean((pred - y) * (pred - y));
  loss.backward();                                   // fills w.grad()

  std::cout << "loss " << loss.item<float>() << "\n" << w.grad() << "\n";
  {
    NoGradGuard no_grad;                             // plain SGD step, not recorded
    w -= w.grad() * 0.1;
  }
}
