#include "tests/support/op_cases.h"

namespace precis::testing {

namespace {
std::vector<GradCase>& registry() {
  static std::vector<GradCase> cases;
  return cases;
}
}  // namespace

bool register_grad_cases(std::vector<GradCase> cases) {
  for (auto& c : cases) registry().push_back(std::move(c));
  return true;
}

const std::vector<GradCase>& grad_cases() { return registry(); }

namespace {
std::vector<ErrorCase>& error_registry() {
  static std::vector<ErrorCase> cases;
  return cases;
}
}  // namespace

bool register_error_cases(std::vector<ErrorCase> cases) {
  for (auto& c : cases) error_registry().push_back(std::move(c));
  return true;
}

const std::vector<ErrorCase>& error_cases() { return error_registry(); }

}  // namespace precis::testing
