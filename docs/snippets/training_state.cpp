// Wrapper for snippets that save or restore training state: a model (nn::Linear), an optimizer
// `opt` (SGD with momentum, one step taken so it has state), a schedule `sched` (StepLR) and a loss
// scaler `scaler`.
#include <precis/precis.h>

#include <iostream>

using namespace precis;

int main() {
  nn::Linear model(4, 2);
  optim::SGD opt(model.parameters(), {.lr = 0.1, .momentum = 0.9});
  optim::StepLR sched(opt, {.step_size = 10, .gamma = 0.5});
  amp::GradScaler scaler;
  scaler.scale(model(ones({3, 4})).sum()).backward();
  scaler.step(opt);
  scaler.update();
  sched.step();

  // @snippet

  return 0;
}
