// amp::Audit's record of the internal precision of f32 GEMMs and convolutions: on the CPU every
// f32 call is IEEE whatever the settings say (the CPU ignores "high"), and the report lists it as
// "f32"; calls in other dtypes record no f32 precision. The CUDA side (tf32 recorded for a GEMM or
// convolution whose family is set to TF32) is tests/cuda/float32_precision_cuda_test.cpp; both ask
// float32_precision(OpId, DeviceType), whose answers for CUDA are tests/ops/float32_precision_test.cpp.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "amp/audit.h"
#include "amp/autocast.h"
#include "autograd/grad_mode.h"
#include "ops/float32_precision.h"
#include "ops/functional.h"
#include "tests/support/tensor_testing.h"

namespace precis::amp {
namespace {

AuditRecord record_of(const Audit& audit, const std::string& op) {
  for (const AuditRecord& r : audit.records())
    if (r.op == op) return r;
  FAIL("op " << op << " not recorded");
  return {};
}

// The report's row of `op`, from its name to the end of the line.
std::string report_row(const Audit& audit, const std::string& op) {
  const std::string report = audit.report();
  const size_t at = report.find("\n" + op + " ");
  REQUIRE(at != std::string::npos);
  return report.substr(at + 1, report.find('\n', at + 1) - at - 1);
}

TEST_CASE("the audit records IEEE f32 for CPU GEMMs and convolutions under every precision setting",
          "[amp][audit][float32_precision]") {
  const Tensor a = testing::randn_input({4, 8}, false, 1, DType::f32);
  const Tensor b = testing::randn_input({8, 3}, false, 2, DType::f32);
  const Tensor w = testing::randn_input({3, 8}, false, 3, DType::f32);
  const Tensor x = testing::randn_input({2, 3, 6, 6}, false, 4, DType::f32);
  const Tensor k = testing::randn_input({4, 3, 3, 3}, false, 5, DType::f32);
  for (Float32Precision setting : {Float32Precision::ieee, Float32Precision::tf32}) {
    INFO("both families set to " << float32_precision_name(setting));
    Float32PrecisionGuard guard(setting);
    Audit audit;
    NoGradGuard no_grad;
    (void)matmul(a, b);
    (void)linear(a, w);
    (void)conv2d(x, k);
    (void)relu(a);
    for (const char* op : {"matmul", "linear", "conv2d", "relu"}) {
      INFO(op);
      const AuditRecord r = record_of(audit, op);
      CHECK(r.dtypes == std::vector<DType>{DType::f32});
      CHECK(r.f32_precisions == std::vector<Float32Precision>{Float32Precision::ieee});
      const std::string row = report_row(audit, op);
      CHECK(row.find("f32") != std::string::npos);
      CHECK(row.find("tf32") == std::string::npos);
    }
  }
}

TEST_CASE("the audit records no f32 precision for calls that ran in another dtype", "[amp][audit][float32_precision]") {
  Float32PrecisionGuard guard(Float32Precision::tf32);
  const Tensor a = testing::randn_input({4, 8}, false, 1, DType::f32);
  const Tensor b = testing::randn_input({8, 3}, false, 2, DType::f32);
  Audit audit;
  NoGradGuard no_grad;
  {
    Autocast bf16(DType::bf16);
    (void)matmul(a, b);  // Lower: ran in bf16
  }
  (void)matmul(a.to(DType::f64), b.to(DType::f64));
  const AuditRecord r = record_of(audit, "matmul");
  CHECK(r.dtypes == std::vector<DType>{DType::bf16, DType::f64});
  CHECK(r.f32_precisions.empty());
  const std::string row = report_row(audit, "matmul");
  CHECK(row.find("bf16,f64") != std::string::npos);
}

}  // namespace
}  // namespace precis::amp
