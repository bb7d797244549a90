// precis-train: trains the bundled ResNet and BERT-mini models (docs/training.md).
//
//   precis-train resnet --precision bf16 --epochs 4
//   precis-train bert-mini --precision bf16 --max-tokens 4096 --checkpoint ckpt
//
// Exit codes: 0 success, 1 a runtime error (data, checkpoint, numerics), 2 a usage error.
#include <unistd.h>

#include <cstdlib>
#include <exception>
#include <iostream>

#include "core/error.h"
#include "models/tools/train_cli.h"
#include "models/train/trainer.h"

int main(int argc, char** argv) {
  // oneDNN runs its primitives on OpenMP threads, beside precis's own pool. With libgomp's default
  // wait policy an idle OpenMP thread spins for a while after every primitive and takes a core
  // from precis's element-wise kernels (and on a shared machine, from everything else): measured
  // 16x slower ResNet training steps on a loaded 2-core VM. libgomp reads OMP_WAIT_POLICY when it
  // is loaded, before main, so set it and re-execute once; an explicit setting is respected.
  if (std::getenv("OMP_WAIT_POLICY") == nullptr) {
    ::setenv("OMP_WAIT_POLICY", "passive", 1);
    ::execv("/proc/self/exe", argv);  // returns only on failure: carry on with the default policy
  }
  int code = 0;
  std::optional<precis::train::TrainOptions> options =
      precis::train::parse_train_cli(argc, argv, std::cout, std::cerr, &code);
  if (!options) return code;
  try {
    precis::train::validate(*options);
  } catch (const std::exception& e) {
    std::cerr << "precis-train: error: " << e.what() << "\nRun with --help for more information.\n";
    return 2;
  }
  try {
    precis::train::TrainSummary summary = precis::train::train(*options, std::cout);
    std::cout << summary.json() << std::endl;
  } catch (const std::exception& e) {
    std::cout.flush();
    std::cerr << "precis-train: error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
