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

}  // namespace precis::testing
