#include "tests/support/op_cases.h"

namespace precis::testing {

namespace {
// The cases every test file registered at static initialisation, by kind.
template <typename Case>
std::vector<Case>& registry() {
  static std::vector<Case> cases;
  return cases;
}

template <typename Case>
bool append(std::vector<Case>& cases) {
  for (auto& c : cases) registry<Case>().push_back(std::move(c));
  return true;
}
}  // namespace

bool register_grad_cases(std::vector<GradCase> cases) { return append(cases); }
const std::vector<GradCase>& grad_cases() { return registry<GradCase>(); }

bool register_error_cases(std::vector<ErrorCase> cases) { return append(cases); }
const std::vector<ErrorCase>& error_cases() { return registry<ErrorCase>(); }

}  // namespace precis::testing
