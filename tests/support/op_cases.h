#pragma once
// Gradient-check cases, registered by each op's test file and run by tests/ops/gradcheck_test.cpp,
// and bad-input cases, run by tests/ops/bad_input_cases_test.cpp. The coverage test
// (tests/ops/coverage_test.cpp) requires at least one gradient check for every differentiable op
// in ops/op_list.def, and at least two bad-input cases for every op. Register at namespace scope
// in a test file:
//
//   static const bool kMulCases = precis::testing::register_grad_cases({
//       {OpId::mul, "broadcast", [] { return TensorList{randn_input({3, 1}), randn_input({4})}; },
//        [](const TensorList& x) { return TensorList{mul(x[0], x[1])}; }},
//   });
#include <functional>
#include <string>
#include <vector>

#include "autograd/gradcheck.h"
#include "core/error.h"
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

/// A bad-input case: an op called with an operand or argument it must refuse. It must throw the
/// precis::Error subclass `expected_type` names (not a bare std::exception, not a crash) with every
/// one of `message_parts` in its message. Run by tests/ops/bad_input_cases_test.cpp; the coverage
/// test requires at least two per row of ops/op_list.def. Build them with error_case<Type>(...).
struct ErrorCase {
  OpId op;
  std::string label;
  std::function<void()> call;
  std::function<bool(const Error&)> is_expected;
  std::string expected_type;
  std::vector<std::string> message_parts;
};

template <typename ErrorType>
ErrorCase error_case(OpId op, std::string label, std::function<void()> call, std::string expected_type,
                     std::vector<std::string> message_parts) {
  return {op, std::move(label), std::move(call),
          [](const Error& e) { return dynamic_cast<const ErrorType*>(&e) != nullptr; }, std::move(expected_type),
          std::move(message_parts)};
}

/// error_case for `expr` (evaluated in a lambda) expected to throw ErrorType, e.g.
///   PRECIS_BAD_INPUT(add, ShapeError, "shapes that do not broadcast", add(ones({2}), ones({3})), "[2]", "[3]")
#define PRECIS_BAD_INPUT(op, ErrorType, label, expr, ...)                                             \
  ::precis::testing::error_case<ErrorType>(::precis::OpId::op, label, [] { (void)(expr); }, #ErrorType, \
                                           {__VA_ARGS__})

bool register_error_cases(std::vector<ErrorCase> cases);
const std::vector<ErrorCase>& error_cases();

}  // namespace precis::testing
