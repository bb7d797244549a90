// precis-train: trains the bundled ResNet and BERT-mini models (docs/training.md).
//
//   precis-train resnet --precision bf16 --epochs 4
//   precis-train bert-mini --precision bf16 --max-tokens 4096 --checkpoint ckpt
//
// Exit codes: 0 success, 1 a runtime error (data, checkpoint, numerics), 2 a usage error.
#include <cstdlib>
#include <exception>
#include <iostream>

#include "core/error.h"
#include "dist/process_group.h"
#include "models/tools/fault_inject.h"
#include "models/tools/train_cli.h"
#include "models/train/trainer.h"

int main(int argc, char** argv) {
  int code = 0;
  std::optional<precis::train::TrainOptions> options =
      precis::train::parse_train_cli(argc, argv, std::cout, std::cerr, &code);
  if (!options) return code;
  if (const std::string bad = precis::train::install_fault_injection_from_env(); !bad.empty()) {
    std::cerr << precis::train::cli_error_line(bad) << "\n";
    return 2;
  }
  try {
    precis::train::validate(*options);
  } catch (const std::exception& e) {
    std::cerr << precis::train::cli_error_line(e.what()) << "\n";
    return 2;
  }
  try {
    precis::train::TrainSummary summary = precis::train::train(*options, std::cout);
    if (!options->distributed || precis::dist::init_process_group()->rank() == 0)
      std::cout << summary.json() << std::endl;
  } catch (const std::exception& e) {
    std::cout.flush();
    // Other ranks may be waiting in a collective for this one: end the whole job.
    if (options->distributed) precis::dist::abort_job(precis::train::cli_error_line(e.what()));
    std::cerr << precis::train::cli_error_line(e.what()) << "\n";
    return 1;
  }
  return 0;
}
