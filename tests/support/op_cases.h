#pragma once
// Gradient-check cases, registered by each op's test file and run by tests/ops/gradcheck_test.cpp.
// The coverage test (tests/ops/coverage_test.cpp) requires at least one case for every
// differentiable op in ops/op_list.def. Register at namespace scope in a test file:
//
//   static const bool kMulCases = precis::testing::register_grad_cases({
//       {OpId::mul, "broadcast", [] { return TensorList{randn_input({3, 1}), randn_input({4})}; },
//        [](const TensorList& x) { return TensorList{mul(x[0], x[1])}; }},
//   });
#include <functional>
#include <string>
#include <vector>

#include "autograd/gradcheck.h"
#include "ops/op_table.h"

namespace precis::testing {

using autograd::TensorList;

struct GradCase {
  OpId op;
  std::string label;
  /// Builds the f64 inputs; those with requires_grad are checked.
  std::function<TensorList()> inputs;
  std::function<TensorList(const TensorList&)> fn;
  autograd::GradcheckOptions options{};
};

bool register_grad_cases(std::vector<GradCase> cases);
const std::vector<GradCase>& grad_cases();

}  // namespace precis::testing
