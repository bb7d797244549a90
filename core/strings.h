#pragma once
// Small string helpers for error messages ("did you mean ...?").
#include <cstddef>
#include <string_view>

namespace precis {

/// Levenshtein distance (insertions, deletions, substitutions each cost 1).
size_t edit_distance(std::string_view a, std::string_view b);

}  // namespace precis
