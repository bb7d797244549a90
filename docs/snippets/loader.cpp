// Wrapper for snippets that run a loader over epochs: `loader` (batches of 8 from 40 random
// examples), `epochs` (2) and `train_step(batch)`, which counts the batches; the program fails
// unless every batch of every epoch reached train_step.
#include <precis/precis.h>

#include <iostream>
#include <memory>

using namespace precis;

int main() {
  auto dataset = std::make_shared<data::TensorDataset>(std::vector<Tensor>{randn({40, 3}), randint(0, 2, {40})});
  data::DataLoader loader(dataset, {.batch_size = 8, .shuffle = true, .seed = 1});
  const int64_t epochs = 2;
  int64_t steps = 0;
  auto train_step = [&](const data::Batch& b) { steps += b[0].size(0) == 8; };

  // @snippet

  return steps == 10 ? 0 : 1;
}
