// The op-table coverage test: every row of ops/op_list.def must be complete. A Kernel op needs CPU
// kernels for f32, f64, f16 and bf16 (backward-only rows too: low-precision training calls them
// with f16/bf16 gradients), an Fp8Kernel op CPU kernels for f8_e4m3 and f8_e5m2; a differentiable op needs at least one registered gradient-check case
// (which, run by gradcheck_test.cpp, proves it has a backward); every op needs at least two
// registered bad-input cases (run by bad_input_cases_test.cpp, which checks the typed error).
#include <map>
#include <set>
#include <string>

#include <catch2/catch.hpp>

#include "core/device.h"
#include "ops/op_table.h"
#include "tests/support/op_cases.h"
#include "tests/support/tensor_testing.h"

namespace precis::testing {
namespace {

constexpr int kMinBadInputCases = 2;

// [cuda]: with a GPU present to_device's row must have its gradient-check case too.
TEST_CASE("every op in the table has its kernels and gradient checks", "[ops][coverage][cuda]") {
  const bool gpu = PRECIS_CUDA_PART("to_device's row, whose gradient-check case needs a device");
  std::set<OpId> with_cases;
  for (const GradCase& c : grad_cases()) with_cases.insert(c.op);
  std::map<OpId, int> bad_inputs;
  for (const ErrorCase& c : error_cases()) ++bad_inputs[c.op];
  std::string missing;
  for (int i = 0; i < kNumOps; ++i) {
    const OpId op = static_cast<OpId>(i);
    const OpInfo& info = op_info(op);
    if (info.kind == OpKind::Kernel) {
      for (DType dt : {DType::f32, DType::f64, DType::f16, DType::bf16})
        if (find_kernel(op, DeviceType::cpu, dt) == nullptr)
          missing += std::string(info.name) + ": no CPU kernel for " + std::string(dtype_name(dt)) + "\n";
    }
    if (info.kind == OpKind::Fp8Kernel) {
      for (DType dt : {DType::f8_e4m3, DType::f8_e5m2})
        if (find_kernel(op, DeviceType::cpu, dt) == nullptr)
          missing += std::string(info.name) + ": no CPU kernel for " + std::string(dtype_name(dt)) + "\n";
    }
    // to_device needs a second device: its case is registered only where CUDA is available.
    const bool needs_gpu = op == OpId::to_device && !gpu;
    if (info.differentiable && with_cases.count(op) == 0 && !needs_gpu)
      missing += std::string(info.name) + ": differentiable but no gradient-check case registered\n";
    if (bad_inputs[op] < kMinBadInputCases)
      missing += std::string(info.name) + ": " + std::to_string(bad_inputs[op]) + " bad-input case(s) registered, " +
                 std::to_string(kMinBadInputCases) + " required\n";
  }
  INFO("incomplete rows of ops/op_list.def:\n" << missing);
  CHECK(missing.empty());
}

TEST_CASE("op table names are unique and categories are printable", "[ops][coverage]") {
  std::set<std::string> names;
  for (int i = 0; i < kNumOps; ++i) {
    const OpInfo& info = op_info(static_cast<OpId>(i));
    CHECK(names.insert(info.name).second);
    CHECK(std::string(category_name(info.category)) != "?");
  }
}

TEST_CASE("a missing kernel names the op, device and dtype, and lists what exists", "[ops][coverage]") {
  try {
    throw_missing_kernel(OpId::copy, DeviceType::cuda, DType::f32);
    FAIL("no exception");
  } catch (const NotImplementedError& e) {
    const std::string msg = e.what();
    CHECK(msg.find("copy") != std::string::npos);
    CHECK(msg.find("cuda") != std::string::npos);
    CHECK(msg.find("f32") != std::string::npos);
  }
}

}  // namespace
}  // namespace precis::testing
