// Runs every registered bad-input case (tests/support/op_cases.h): each must raise the precis::Error
// subclass it names, with the expected parts in its message. An untyped exception
// (std::bad_alloc, std::out_of_range) or no exception fails; a crash fails the whole executable.
#include <map>
#include <sstream>
#include <string>

#include <catch2/catch.hpp>

#include "tests/support/op_cases.h"

namespace precis::testing {
namespace {

// [cuda]: the registry holds copies to CUDA indices no machine has (bad_inputs_tensor_test.cpp);
// with a GPU present they go through the CUDA backend's device table, which the GPU check covers.
TEST_CASE("every registered bad-input case raises its typed error naming the problem", "[ops][bad_input][cuda]") {
  REQUIRE_FALSE(error_cases().empty());
  std::ostringstream failures;
  int failed = 0;
  for (const ErrorCase& c : error_cases()) {
    const std::string where = std::string(op_name(c.op)) + " / " + c.label;
    std::string problem;
    try {
      c.call();
      problem = "no exception (expected " + c.expected_type + ")";
    } catch (const Error& e) {
      const std::string msg = e.what();
      if (!c.is_expected(e)) {
        problem = "threw a " + std::string(typeid(e).name()) + ", expected " + c.expected_type + ": " + msg;
      } else {
        for (const std::string& part : c.message_parts)
          if (msg.find(part) == std::string::npos) problem += "message lacks \"" + part + "\"; ";
        if (!problem.empty()) problem += "message: " + msg;
      }
    } catch (const std::exception& e) {
      problem = "untyped exception (" + std::string(typeid(e).name()) + "): " + e.what();
    }
    if (!problem.empty()) {
      ++failed;
      failures << "\n  " << where << ": " << problem;
    }
  }
  INFO(failed << " of " << error_cases().size() << " bad-input cases failed:" << failures.str());
  CHECK(failed == 0);
}

}  // namespace
}  // namespace precis::testing
