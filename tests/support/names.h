#pragma once
// The names of (name, tensor) lists such as Module::named_parameters(), for comparing a module's
// naming with PyTorch's.
#include <string>
#include <utility>
#include <vector>

#include "tensor/tensor.h"

namespace precis::testing {

/// The names of `named`, in order.
inline std::vector<std::string> names_of(const std::vector<std::pair<std::string, Tensor>>& named) {
  std::vector<std::string> out;
  for (const auto& [n, t] : named) out.push_back(n);
  return out;
}

}  // namespace precis::testing
