// The f32 matmul/conv precision setting (ops/float32_precision.h): PyTorch's defaults and strings,
// the guard, and the per-op decision the CUDA kernels and amp::Audit ask. No device is used: the
// decision is a function of the op, the device type and the settings; what the CUDA kernels do
// with it is checked on a GPU by tests/cuda/float32_precision_cuda_test.cpp.
#include <algorithm>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "ops/float32_precision.h"
#include "ops/op_table.h"
#include "tests/support/tensor_testing.h"

namespace precis {
namespace {

constexpr Float32Precision kIeee = Float32Precision::ieee;
constexpr Float32Precision kTf32 = Float32Precision::tf32;

std::vector<OpId> all_ops() {
  std::vector<OpId> ops;
  for (int i = 0; i < kNumOps; ++i) ops.push_back(static_cast<OpId>(i));
  return ops;
}

TEST_CASE("the f32 precision defaults are PyTorch's: matmuls IEEE, cuDNN convolutions TF32", "[ops][float32_precision]") {
  // torch.backends.cuda.matmul.allow_tf32 = False, torch.backends.cudnn.allow_tf32 = True,
  // torch.get_float32_matmul_precision() == "highest". Every test that changes a setting restores
  // it, so these hold whatever ran before in the process.
  CHECK(float32_precision(Float32OpFamily::matmul) == kIeee);
  CHECK(float32_precision(Float32OpFamily::conv) == kTf32);
  CHECK(float32_matmul_precision() == "highest");
  CHECK(std::string(float32_precision_name(kIeee)) == "ieee");
  CHECK(std::string(float32_precision_name(kTf32)) == "tf32");
  CHECK(std::string(float32_op_family_name(Float32OpFamily::matmul)) == "matmul");
  CHECK(std::string(float32_op_family_name(Float32OpFamily::conv)) == "conv");
}

TEST_CASE("set_float32_matmul_precision takes PyTorch's strings and leaves convolutions alone", "[ops][float32_precision]") {
  Float32PrecisionGuard restore(Float32OpFamily::matmul, kIeee);
  set_float32_matmul_precision("high");
  CHECK(float32_precision(Float32OpFamily::matmul) == kTf32);
  CHECK(float32_matmul_precision() == "high");
  set_float32_matmul_precision("highest");
  CHECK(float32_precision(Float32OpFamily::matmul) == kIeee);
  CHECK(float32_matmul_precision() == "highest");
  set_float32_matmul_precision("medium");  // no bf16 path for f32 GEMMs: the same as "high"
  CHECK(float32_precision(Float32OpFamily::matmul) == kTf32);
  CHECK(float32_matmul_precision() == "high");

  set_float32_precision(Float32OpFamily::conv, kIeee);
  set_float32_matmul_precision("high");
  CHECK(float32_precision(Float32OpFamily::conv) == kIeee);
  set_float32_precision(Float32OpFamily::conv, kTf32);
  set_float32_matmul_precision("highest");
  CHECK(float32_precision(Float32OpFamily::conv) == kTf32);
}

TEST_CASE("set_float32_matmul_precision rejects other strings with a ValueError naming the value and the choices",
          "[ops][float32_precision]") {
  Float32PrecisionGuard restore(Float32OpFamily::matmul, kTf32);
  for (const char* bad : {"HIGH", "", "tf32", "ieee", "low"}) {
    const std::string quoted = std::string("\"") + bad + "\"";
    INFO("precision " << quoted);
    PRECIS_REQUIRE_THROWS_WITH_ALL(set_float32_matmul_precision(bad), ValueError, "set_float32_matmul_precision",
                                   quoted.c_str(), "\"highest\"", "\"high\"", "\"medium\"");
    CHECK(float32_precision(Float32OpFamily::matmul) == kTf32);  // a refused value changes nothing
  }
}

TEST_CASE("set_float32_precision sets one family or both", "[ops][float32_precision]") {
  Float32PrecisionGuard restore(kIeee);
  set_float32_precision(kTf32);
  CHECK(float32_precision(Float32OpFamily::matmul) == kTf32);
  CHECK(float32_precision(Float32OpFamily::conv) == kTf32);
  set_float32_precision(Float32OpFamily::conv, kIeee);
  CHECK(float32_precision(Float32OpFamily::matmul) == kTf32);
  CHECK(float32_precision(Float32OpFamily::conv) == kIeee);
  set_float32_precision(kIeee);
  CHECK(float32_precision(Float32OpFamily::matmul) == kIeee);
  CHECK(float32_precision(Float32OpFamily::conv) == kIeee);
}

TEST_CASE("Float32PrecisionGuard restores both families, also after a change inside it and when nested",
          "[ops][float32_precision]") {
  const Float32Precision matmul0 = float32_precision(Float32OpFamily::matmul);
  const Float32Precision conv0 = float32_precision(Float32OpFamily::conv);
  {
    Float32PrecisionGuard all_ieee(kIeee);
    CHECK(float32_precision(Float32OpFamily::matmul) == kIeee);
    CHECK(float32_precision(Float32OpFamily::conv) == kIeee);
    {
      Float32PrecisionGuard matmul_tf32(Float32OpFamily::matmul, kTf32);
      CHECK(float32_precision(Float32OpFamily::matmul) == kTf32);
      CHECK(float32_precision(Float32OpFamily::conv) == kIeee);
      set_float32_precision(Float32OpFamily::conv, kTf32);  // a change the inner guard did not make
    }
    CHECK(float32_precision(Float32OpFamily::matmul) == kIeee);
    CHECK(float32_precision(Float32OpFamily::conv) == kIeee);
  }
  CHECK(float32_precision(Float32OpFamily::matmul) == matmul0);
  CHECK(float32_precision(Float32OpFamily::conv) == conv0);
}

TEST_CASE("the CPU has settings of its own, IEEE by default as PyTorch's oneDNN ones", "[ops][float32_precision]") {
  // torch.backends.mkldnn.{matmul,conv}.fp32_precision == "ieee"; the CUDA setters leave them, and
  // set_float32_precision(p) (torch.backends.fp32_precision) sets every device type. The guard
  // restores the CPU's too.
  CHECK(float32_precision(Float32OpFamily::matmul, DeviceType::cpu) == kIeee);
  CHECK(float32_precision(Float32OpFamily::conv, DeviceType::cpu) == kIeee);
  CHECK(float32_precision(Float32OpFamily::conv, DeviceType::cuda) == float32_precision(Float32OpFamily::conv));
  {
    Float32PrecisionGuard restore(kIeee);
    set_float32_precision(Float32OpFamily::conv, kTf32);
    set_float32_matmul_precision("high");
    CHECK(float32_precision(Float32OpFamily::conv, DeviceType::cpu) == kIeee);
    CHECK(float32_precision(Float32OpFamily::matmul, DeviceType::cpu) == kIeee);
    set_float32_precision(Float32OpFamily::conv, kTf32, DeviceType::cpu);
    CHECK(float32_precision(Float32OpFamily::conv, DeviceType::cpu) == kTf32);
    CHECK(float32_precision(Float32OpFamily::matmul, DeviceType::cpu) == kIeee);
    set_float32_precision(kIeee);
    CHECK(float32_precision(Float32OpFamily::conv, DeviceType::cpu) == kIeee);
    set_float32_precision(kTf32);
    CHECK(float32_precision(Float32OpFamily::matmul, DeviceType::cpu) == kTf32);
    {
      Float32PrecisionGuard cpu_conv(Float32OpFamily::conv, kIeee, DeviceType::cpu);
      CHECK(float32_precision(Float32OpFamily::conv, DeviceType::cpu) == kIeee);
      CHECK(float32_precision(Float32OpFamily::conv) == kTf32);
    }
    CHECK(float32_precision(Float32OpFamily::conv, DeviceType::cpu) == kTf32);
  }
  CHECK(float32_precision(Float32OpFamily::matmul, DeviceType::cpu) == kIeee);
  CHECK(float32_precision(Float32OpFamily::conv, DeviceType::cpu) == kIeee);
}

TEST_CASE("the GEMM and convolution ops belong to their family, every other op to none", "[ops][float32_precision]") {
  const std::vector<OpId> matmuls = {OpId::matmul, OpId::linear, OpId::linear_gelu, OpId::linear_cross_entropy,
                                     OpId::scaled_dot_product_attention};
  const std::vector<OpId> convs = {OpId::conv2d, OpId::conv2d_backward};
  for (OpId op : all_ops()) {
    INFO(op_name(op));
    const bool is_matmul = std::find(matmuls.begin(), matmuls.end(), op) != matmuls.end();
    const bool is_conv = std::find(convs.begin(), convs.end(), op) != convs.end();
    const std::optional<Float32OpFamily> family = float32_op_family(op);
    if (is_matmul)
      CHECK(family == Float32OpFamily::matmul);
    else if (is_conv)
      CHECK(family == Float32OpFamily::conv);
    else
      CHECK_FALSE(family.has_value());
  }
}

TEST_CASE("per op: the CPU computes IEEE f32 under every setting, CUDA follows the op's family",
          "[ops][float32_precision]") {
  // The CPU's own settings included: its Winograd convolutions still multiply in fp32.
  for (const auto& [matmul, conv] : {std::pair{kIeee, kIeee}, std::pair{kIeee, kTf32}, std::pair{kTf32, kIeee},
                                     std::pair{kTf32, kTf32}}) {
    Float32PrecisionGuard m(Float32OpFamily::matmul, matmul);
    Float32PrecisionGuard c(Float32OpFamily::conv, conv);
    Float32PrecisionGuard cpu_m(Float32OpFamily::matmul, matmul, DeviceType::cpu);
    Float32PrecisionGuard cpu_c(Float32OpFamily::conv, conv, DeviceType::cpu);
    for (OpId op : all_ops()) {
      INFO(op_name(op) << " with matmul " << float32_precision_name(matmul) << ", conv " << float32_precision_name(conv));
      CHECK(float32_precision(op, DeviceType::cpu) == kIeee);
      const std::optional<Float32OpFamily> family = float32_op_family(op);
      const Float32Precision expected = !family ? kIeee : *family == Float32OpFamily::matmul ? matmul : conv;
      CHECK(float32_precision(op, DeviceType::cuda) == expected);
      CHECK(uses_tf32(op, DeviceType::cuda, DType::f32) == (expected == kTf32));
      for (DType other : {DType::f64, DType::f16, DType::bf16}) {
        CHECK_FALSE(uses_tf32(op, DeviceType::cuda, other));
        CHECK_FALSE(uses_tf32(op, DeviceType::cpu, other));
      }
      CHECK_FALSE(uses_tf32(op, DeviceType::cpu, DType::f32));
    }
  }
  // The defaults, spelled out for the ops a ResNet and a transformer run.
  CHECK(float32_precision(OpId::conv2d, DeviceType::cuda) == kTf32);
  CHECK(float32_precision(OpId::conv2d_backward, DeviceType::cuda) == kTf32);
  CHECK(float32_precision(OpId::linear, DeviceType::cuda) == kIeee);
  CHECK(float32_precision(OpId::matmul, DeviceType::cuda) == kIeee);
  CHECK(float32_precision(OpId::conv2d, DeviceType::cpu) == kIeee);
}

}  // namespace
}  // namespace precis
