// Wrapper for snippets over a bundled model: `model`, a std::shared_ptr to a CIFAR-style
// resnet20 (width 4, 1 input channel, 10 classes). The program fails unless the state after the
// snippet equals the state before (a save/load round trip must not change it).
#include <precis/precis.h>

#include <iostream>

using namespace precis;

int main() {
  auto model = models::resnet20({.num_classes = 10, .in_channels = 1, .width = 4});
  StateDict before;
  for (const auto& [name, t] : model->state_dict()) before[name] = t.clone();

  // @snippet

  for (const auto& [name, t] : model->state_dict())
    if (eq(t, before.at(name)).sum().item<int64_t>() != t.numel()) return 1;
  return 0;
}
