#pragma once
// precis-train's command line (CLI11) → train::TrainOptions. Separate from main so that the
// mapping is one readable table.
#include <optional>
#include <ostream>
#include <string>

#include "models/train/train_options.h"

namespace precis::train {

/// Parses argv. Returns the options, or nothing after printing help (exit code 0 in *exit_code)
/// to `out` or a one-line usage error (exit code 2 in *exit_code) to `err`.
std::optional<TrainOptions> parse_train_cli(int argc, const char* const* argv, std::ostream& out, std::ostream& err,
                                            int* exit_code);

/// The line precis-train prints for an error `message`: "precis-train: error: " and the message,
/// without the program's name a library message may start with.
std::string cli_error_line(std::string message);

}  // namespace precis::train
