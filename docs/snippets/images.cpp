// Wrapper for the loader snippets: `images`, a dataset of 300 random Fashion-MNIST-shaped examples
// (image f32 (1, 28, 28), label i64) held as a std::shared_ptr<data::Dataset>.
#include <precis/precis.h>

#include <iostream>
#include <memory>

using namespace precis;

int main() {
  std::shared_ptr<data::Dataset> images =
      std::make_shared<data::TensorDataset>(std::vector<Tensor>{rand({300, 1, 28, 28}), randint(0, 10, {300})});

  // @snippet

  return 0;
}
