// The f32 precision setting (ops/float32_precision.h) as the CUDA kernels honour it: under
// "highest" (IEEE) cuBLAS, cuBLASLt and cuDNN f32 results match the CPU's to fp32 rounding; under
// "high" (TF32) they differ from it by TF32's rounding (inputs read with a 10-bit mantissa:
// ~1e-4..1e-3 relative), and no more. Each setting is run after the other, so a plan cached for one
// (cuBLASLt's algorithm, cuDNN's) serving the other would show as a TF32-sized error under
// "highest". The audit reports what ran. Errors are relative in the 2-norm against the op in f64
// on the CPU, from the same f32 inputs.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "amp/audit.h"
#include "amp/autocast.h"
#include "autograd/grad_mode.h"
#include "core/device.h"
#include "ops/float32_precision.h"
#include "ops/functional.h"
#include "tensor/factory.h"
#include "tests/support/tensor_testing.h"

using namespace precis;
using precis::testing::randn_input;

namespace {

const Device kGpu = Device::cuda(0);

// IEEE f32 against f64: fp32 rounding of sums of up to ~1000 terms, ~1e-7 in the 2-norm; 1e-6 leaves
// room. TF32 reads each input with 10 explicit mantissa bits (2^-11 relative), ~4e-4 in the 2-norm
// for these sums: it must be above 1e-5 (TF32 did run) and below 5e-3 (nothing worse did).
constexpr double kIeeeTol = 1e-6;
constexpr double kTf32Min = 1e-5, kTf32Max = 5e-3;

double rel_error(const Tensor& actual, const Tensor& ref) {
  const Tensor a = actual.to(Device::cpu()).to(DType::f64), r = ref.to(Device::cpu()).to(DType::f64);
  REQUIRE(a.sizes() == r.sizes());
  const Tensor d = a - r;
  return std::sqrt(sum(d * d).item<double>() / sum(r * r).item<double>());
}

Tensor f64(const Tensor& t) { return t.to(DType::f64); }

TEST_CASE("f32 matmul and linear on CUDA - highest matches the CPU to 1e-6, high differs by TF32 rounding",
          "[cuda][float32_precision]") {
  PRECIS_REQUIRE_CUDA();
  NoGradGuard no_grad;
  const Tensor a = randn_input({4, 128, 1024}, false, 1, DType::f32);  // batched: the bmm path
  const Tensor b = randn_input({4, 1024, 256}, false, 2, DType::f32);
  const Tensor x = randn_input({256, 1024}, false, 3, DType::f32);
  const Tensor w = randn_input({512, 1024}, false, 4, DType::f32);
  const Tensor bias = randn_input({512}, false, 5, DType::f32);
  const Tensor mm_ref = matmul(f64(a), f64(b)), mm_cpu = matmul(a, b);
  const Tensor lin_ref = linear(f64(x), f64(w), f64(bias)), lin_cpu = linear(x, w, bias);
  const Tensor ag = a.to(kGpu), bg = b.to(kGpu), xg = x.to(kGpu), wg = w.to(kGpu), biasg = bias.to(kGpu);

  Tensor mm_ieee, lin_ieee;
  for (const char* precision : {"high", "highest", "high"}) {  // each after the other: no plan reused across
    Float32PrecisionGuard restore(Float32OpFamily::matmul, Float32Precision::ieee);
    set_float32_matmul_precision(precision);
    const Tensor mm = matmul(ag, bg), lin = linear(xg, wg, biasg);
    const double mm_err = rel_error(mm, mm_ref), lin_err = rel_error(lin, lin_ref);
    WARN("f32 " << precision << ": matmul relative error " << mm_err << ", linear " << lin_err);
    if (std::string(precision) == "highest") {
      CHECK(mm_err <= kIeeeTol);
      CHECK(lin_err <= kIeeeTol);
      CHECK(rel_error(mm, mm_cpu) <= kIeeeTol);
      CHECK(rel_error(lin, lin_cpu) <= kIeeeTol);
      mm_ieee = mm, lin_ieee = lin;
    } else {
      CHECK(mm_err >= kTf32Min);
      CHECK(mm_err <= kTf32Max);
      CHECK(lin_err >= kTf32Min);
      CHECK(lin_err <= kTf32Max);
      if (mm_ieee.defined()) {
        CHECK(rel_error(mm, mm_ieee) >= kTf32Min);
        CHECK(rel_error(lin, lin_ieee) >= kTf32Min);
      }
    }
  }
  // f16 and f64 ignore the setting: the same bits under both.
  for (DType dt : {DType::f16, DType::f64}) {
    const Tensor ad = ag.to(dt), bd = bg.to(dt);
    Tensor under_high, under_highest;
    {
      Float32PrecisionGuard high(Float32OpFamily::matmul, Float32Precision::tf32);
      under_high = matmul(ad, bd).to(Device::cpu()).to(DType::f64);
    }
    {
      Float32PrecisionGuard highest(Float32OpFamily::matmul, Float32Precision::ieee);
      under_highest = matmul(ad, bd).to(Device::cpu()).to(DType::f64);
    }
    INFO(dtype_name(dt));
    CHECK(under_high.to_vector<double>() == under_highest.to_vector<double>());
  }
}

TEST_CASE("f32 attention on CUDA follows the matmul setting", "[cuda][float32_precision]") {
  PRECIS_REQUIRE_CUDA();
  NoGradGuard no_grad;
  const Tensor q = randn_input({2, 4, 128, 64}, false, 6, DType::f32);
  const Tensor k = randn_input({2, 4, 128, 64}, false, 7, DType::f32);
  const Tensor v = randn_input({2, 4, 128, 64}, false, 8, DType::f32);
  const Tensor ref = scaled_dot_product_attention(f64(q), f64(k), f64(v));
  Tensor ieee, tf32;
  {
    Float32PrecisionGuard high(Float32OpFamily::matmul, Float32Precision::tf32);
    tf32 = scaled_dot_product_attention(q.to(kGpu), k.to(kGpu), v.to(kGpu));
  }
  {
    Float32PrecisionGuard highest(Float32OpFamily::matmul, Float32Precision::ieee);
    ieee = scaled_dot_product_attention(q.to(kGpu), k.to(kGpu), v.to(kGpu));
  }
  WARN("f32 attention relative error: highest " << rel_error(ieee, ref) << ", high " << rel_error(tf32, ref));
  CHECK(rel_error(ieee, ref) <= 1e-5);  // a softmax between two GEMMs: a little more rounding
  CHECK(rel_error(tf32, ref) <= kTf32Max);
  CHECK(rel_error(tf32, ieee) >= 1e-6);
}

TEST_CASE("f32 conv2d on CUDA follows the conv setting, forward and gradients", "[cuda][float32_precision]") {
  PRECIS_REQUIRE_CUDA();
  const Tensor x = randn_input({8, 32, 16, 16}, false, 9, DType::f32);
  const Tensor w = randn_input({64, 32, 3, 3}, false, 10, DType::f32);
  const Tensor b = randn_input({64}, false, 11, DType::f32);
  const Tensor g = randn_input({8, 64, 16, 16}, false, 12, DType::f32);
  // out, grad x, grad w of conv2d(x, w, b, stride 1, padding 1) with leaves on `device` in `dtype`.
  auto run = [&](Device device, DType dtype) {
    Tensor xl = x.to(dtype).to(device).detach(), wl = w.to(dtype).to(device).detach();
    xl.requires_grad_(true);
    wl.requires_grad_(true);
    const Tensor out = conv2d(xl, wl, b.to(dtype).to(device), {1}, {1});
    out.backward(g.to(dtype).to(device));
    return std::vector<Tensor>{out.detach(), xl.grad(), wl.grad()};
  };
  const std::vector<Tensor> ref = run(Device::cpu(), DType::f64);
  const char* names[] = {"out", "grad x", "grad w"};
  std::vector<Tensor> ieee;
  for (Float32Precision p : {Float32Precision::tf32, Float32Precision::ieee, Float32Precision::tf32}) {
    Float32PrecisionGuard guard(Float32OpFamily::conv, p);
    const std::vector<Tensor> got = run(kGpu, DType::f32);
    double differs = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      const double err = rel_error(got[i], ref[i]);
      WARN("f32 conv2d " << float32_precision_name(p) << " " << names[i] << ": relative error " << err);
      INFO(names[i] << " under " << float32_precision_name(p));
      // cuDNN's FMA algorithms include Winograd and FFT, whose transforms add rounding: 1e-5.
      CHECK(err <= (p == Float32Precision::ieee ? 1e-5 : kTf32Max));
      if (p == Float32Precision::tf32 && !ieee.empty()) differs = std::max(differs, rel_error(got[i], ieee[i]));
    }
    if (p == Float32Precision::ieee) ieee = got;
    if (p == Float32Precision::tf32 && !ieee.empty()) {
      INFO("largest relative difference of the TF32 run from the IEEE run: " << differs
           << "; none means cuDNN chose no TF32 algorithm although allowed");
      CHECK(differs >= kTf32Min);
    }
  }
}

TEST_CASE("the audit reports tf32 for CUDA f32 GEMMs and convolutions set to TF32, f32 otherwise",
          "[cuda][float32_precision][audit]") {
  PRECIS_REQUIRE_CUDA();
  NoGradGuard no_grad;
  const Tensor a = randn_input({64, 64}, false, 13, DType::f32).to(kGpu);
  const Tensor x = randn_input({2, 8, 8, 8}, false, 14, DType::f32).to(kGpu);
  const Tensor w = randn_input({8, 8, 3, 3}, false, 15, DType::f32).to(kGpu);
  auto record = [](const amp::Audit& audit, const std::string& op) {
    for (const amp::AuditRecord& r : audit.records())
      if (r.op == op) return r;
    FAIL("op " << op << " not recorded");
    return amp::AuditRecord{};
  };
  using P = std::vector<Float32Precision>;
  {
    amp::Audit audit;  // the defaults: matmul IEEE, conv TF32
    (void)matmul(a, a);
    (void)conv2d(x, w);
    (void)relu(a);
    CHECK(record(audit, "matmul").f32_precisions == P{Float32Precision::ieee});
    CHECK(record(audit, "conv2d").f32_precisions == P{Float32Precision::tf32});
    CHECK(record(audit, "relu").f32_precisions == P{Float32Precision::ieee});
    CHECK(audit.report().find("tf32") != std::string::npos);
  }
  {
    Float32PrecisionGuard restore(Float32OpFamily::matmul, Float32Precision::ieee);
    amp::Audit audit;
    (void)matmul(a, a);
    set_float32_matmul_precision("high");
    (void)matmul(a, a);
    CHECK(record(audit, "matmul").f32_precisions == P{Float32Precision::ieee, Float32Precision::tf32});
  }
  {
    amp::Audit audit;
    amp::Autocast f16(DType::f16, DeviceType::cuda);
    (void)matmul(a, a);
    CHECK(record(audit, "matmul").dtypes == std::vector<DType>{DType::f16});
    CHECK(record(audit, "matmul").f32_precisions.empty());
  }
}

}  // namespace
