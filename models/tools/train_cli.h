#pragma once
// precis-train's command line (CLI11) → train::TrainOptions. Separate from main so that the
// mapping is one readable table.
#include <optional>
#include <ostream>

#include "models/train/train_options.h"

namespace precis::train {

/// Parses argv. Returns the options, or nothing after printing help (exit code 0 in *exit_code)
/// or a parse error with the usage (exit code 2 in *exit_code) to `out` / `err`.
std::optional<TrainOptions> parse_train_cli(int argc, const char* const* argv, std::ostream& out, std::ostream& err,
                                            int* exit_code);

}  // namespace precis::train
