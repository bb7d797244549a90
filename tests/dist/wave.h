#pragma once
// Deterministic test values with no RNG, so that every rank can rebuild every rank's data.
#include <cmath>
#include <vector>

#include "tensor/factory.h"

namespace precis::dist_testing {

/// amp·sin(seed·13.1 + 0.7·k) at flat index k, f32, of `shape`.
inline Tensor wave(const Shape& shape, double seed, double amp = 0.3) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t k = 0; k < n; ++k) v[static_cast<size_t>(k)] = static_cast<float>(amp * std::sin(seed * 13.1 + k * 0.7));
  return from_vector<float>(v, shape);
}

}  // namespace precis::dist_testing
