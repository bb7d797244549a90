#pragma once
// Looking up one row of the op profiler's entries (ops/profiler.h) in tests.
#include <string>
#include <vector>

#include "ops/profiler.h"

namespace precis::testing {

/// Not on a temporary list (find_entry(profiler::entries(), ...)): the pointer would outlive it.
const profiler::Entry* find_entry(std::vector<profiler::Entry>&& all, const std::string& name,
                                  profiler::Direction d) = delete;
/// The entry (name, direction), or nullptr.
inline const profiler::Entry* find_entry(const std::vector<profiler::Entry>& all, const std::string& name,
                                         profiler::Direction d) {
  for (const profiler::Entry& e : all)
    if (e.name == name && e.direction == d) return &e;
  return nullptr;
}

}  // namespace precis::testing
