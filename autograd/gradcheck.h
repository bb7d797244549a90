#pragma once
// Finite-difference gradient checking in f64 (torch.autograd.gradcheck).
#include <functional>
#include <string>

#include "autograd/node.h"

namespace precis::autograd {

/// Options of gradcheck (torch.autograd.gradcheck's names where it has them).
struct GradcheckOptions {
  double eps = 1e-6;   ///< central-difference step
  double atol = 1e-5;  ///< absolute tolerance of |analytic − numeric|
  double rtol = 1e-3;  ///< relative tolerance, times |numeric|
  /// Inputs with more elements than this are checked along random directions instead of the
  /// full Jacobian.
  int64_t full_jacobian_max_numel = 256;
  int num_random_directions = 8;  ///< directions per large input
  uint64_t seed = 0;               ///< seeds the directions and the output weighting
};

/// What gradcheck found.
struct GradcheckResult {
  bool ok = true;       ///< every checked gradient within tolerance
  std::string message;  ///< the first mismatch: input, element, analytic vs numeric
};

/// Compares the analytic gradients of fn (through backward) with central differences, for every
/// input that requires grad. Inputs must be f64. fn's outputs are reduced with a fixed random
/// weighting so that every output element contributes.
GradcheckResult gradcheck(const std::function<TensorList(const TensorList&)>& fn, const TensorList& inputs,
                          const GradcheckOptions& options = {});

}  // namespace precis::autograd
