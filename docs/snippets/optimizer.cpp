// Wrapper for snippets around an optimizer: `model` (nn::Linear(4, 1)), `opt` (SGD with momentum
// over its parameters), `sched` (StepLR) and `micro_batches`, eight (x, y) regression pairs. The
// program fails unless the parameters stay finite.
#include <precis/precis.h>

#include <cmath>
#include <iostream>
#include <utility>
#include <vector>

using namespace precis;

int main() {
  nn::Linear model(4, 1);
  optim::SGD opt(model.parameters(), {.lr = 0.05, .momentum = 0.9});
  optim::StepLR sched(opt, {.step_size = 10, .gamma = 0.5});
  std::vector<std::pair<Tensor, Tensor>> micro_batches;
  for (int i = 0; i < 8; ++i) {
    Tensor x = randn({8, 4});
    micro_batches.emplace_back(x, x.sum(1, true));
  }

  // @snippet

  for (const Tensor& p : model.parameters())
    if (!std::isfinite(sum(abs(p)).item<double>())) return 1;
  return 0;
}
