// The GPU's composed paths of the ops that only the CPU has a fused kernel for
// (tests/support/fake_cuda/cpu_only_ops.h), on the fake device, where they run as on a GPU: what
// they give must be what the fused paths give on the CPU.
#include <algorithm>
#include <string>
#include <limits>
#include <utility>
#include <vector>

#include "amp/amp.h"
#include "precis.h"
#include "tests/fake_cuda/fake_device.h"
#include "tests/support/tensor_testing.h"

using namespace precis;
using precis::fake_cuda_testing::require_fake_device;

namespace {

const Device kDev = Device::cuda(0);

// linear_gelu's output dtype under the device's autocast, with `op` pinned to FP32 there.
DType linear_gelu_dtype(Device device, OpId op) {
  amp::set_category(op, Category::FP32, device.type);
  const Tensor x = randn({4, 8}).to(device), w = randn({6, 8}).to(device), b = randn({6}).to(device);
  DType out;
  {
    amp::Autocast autocast(amp::default_autocast_dtype(device.type), device.type);
    out = linear_gelu(x, w, b).dtype();
  }
  amp::reset_categories();
  return out;
}

}  // namespace

TEST_CASE("linear_gelu's composed path casts once, by linear_gelu's category, as the fused path") {
  require_fake_device();
  REQUIRE(find_kernel(OpId::gelu_epilogue, DeviceType::cuda, DType::f16) == nullptr);  // the composed path
  // Pinned to FP32 itself: fp32 on both backends; only linear (a part of the composite) pinned:
  // the low-precision dtype on both (it used to be fp32 on the GPU and f16 on the CPU, and the
  // other way round).
  CHECK(linear_gelu_dtype(Device::cpu(), OpId::linear_gelu) == DType::f32);
  CHECK(linear_gelu_dtype(kDev, OpId::linear_gelu) == DType::f32);
  CHECK(linear_gelu_dtype(Device::cpu(), OpId::linear) == DType::bf16);
  CHECK(linear_gelu_dtype(kDev, OpId::linear) == DType::f16);
}

TEST_CASE("scaled_dot_product_attention over no keys with an additive mask gives zeros, as on the CPU") {
  require_fake_device();
  const Tensor q = randn({2, 5, 8}), k = randn({2, 0, 8}), v = randn({2, 0, 4}), mask = zeros({5, 0});
  const Tensor cpu = scaled_dot_product_attention(q, k, v, mask);
  const Tensor dev = scaled_dot_product_attention(q.to(kDev), k.to(kDev), v.to(kDev), mask.to(kDev));
  REQUIRE(dev.sizes() == Shape{2, 5, 4});
  CHECK(dev.to(Device::cpu()).to_vector<float>() == cpu.to_vector<float>());
  CHECK(max(abs(cpu)).item<float>() == 0.0f);
}

TEST_CASE("dropout_add's composed path widens an f16/bf16 x beside an fp32 residual, as the fused kernel") {
  require_fake_device();
  REQUIRE(find_kernel(OpId::dropout_add, DeviceType::cuda, DType::f32) == nullptr);  // the composed path
  for (DType dt : {DType::bf16, DType::f16}) {
    INFO(dtype_name(dt));
    const Tensor x0 = randn({64, 33}).to(dt), r0 = randn({64, 33});
    const auto run = [&](Device device) {
      const Tensor x = x0.to(device).detach().requires_grad_(), r = r0.to(device).detach().requires_grad_();
      Generator gen(5);
      const Tensor out = dropout_add(x, r, 0.25, true, &gen);
      out.backward(ones_like(out));
      return std::vector<Tensor>{out.to(Device::cpu()), x.grad().to(Device::cpu()), r.grad().to(Device::cpu())};
    };
    const std::vector<Tensor> cpu = run(Device::cpu()), dev = run(kDev);
    for (size_t i = 0; i < cpu.size(); ++i) {
      INFO("output " << i << " (out, x's gradient, residual's)");
      REQUIRE(dev[i].dtype() == cpu[i].dtype());
      CHECK(dev[i].to(DType::f64).to_vector<double>() == cpu[i].to(DType::f64).to_vector<double>());
    }
  }
}

TEST_CASE("linear_gelu's composed path is one linear_gelu call for a selective checkpoint's keep policy") {
  require_fake_device();
  REQUIRE(find_kernel(OpId::gelu_epilogue, DeviceType::cuda, DType::f32) == nullptr);  // the composed path
  // A policy keeping "linear call 0" keeps the down-projection on both backends; on the GPU it used to
  // see linear_gelu's GEMM as linear call 0 (and the down-projection as call 1).
  const Tensor x0 = randn({4, 8}), w10 = randn({16, 8}), b10 = randn({16}), w20 = randn({8, 16});
  const auto run = [&](Device device) {
    const Tensor x = x0.to(device).detach().requires_grad_(), w1 = w10.to(device).detach().requires_grad_(),
                 b1 = b10.to(device).detach().requires_grad_(), w2 = w20.to(device).detach().requires_grad_();
    std::vector<std::pair<OpId, int64_t>> seen;
    const autograd::CheckpointOptions o{.mode = autograd::CheckpointMode::selective,
                                        .keep = [&seen](const KeepCandidate& c) {
                                          seen.emplace_back(c.op, c.index);
                                          return c.op == OpId::linear && c.index == 0;
                                        }};
    profiler::FlopCounter count;
    const Tensor y = autograd::checkpoint(o, [&](const Tensor& in) { return linear(linear_gelu(in, w1, b1), w2); }, x);
    const double forward = count.flops();
    sum(y).backward();
    // Backward: two GEMMs per layer, and the recomputation runs linear_gelu's GEMM again, only it.
    const double gemm = 2.0 * 4 * 8 * 16;  // either layer's
    CHECK(forward == 2 * gemm);
    CHECK(count.flops() - forward == 4 * gemm + gemm);
    seen.erase(std::unique(seen.begin(), seen.end()), seen.end());  // linear_gelu asks ahead of its call too
    return std::make_pair(seen, std::vector<Tensor>{x.grad().to(Device::cpu()), w1.grad().to(Device::cpu()),
                                                    b1.grad().to(Device::cpu()), w2.grad().to(Device::cpu())});
  };
  const auto [cpu_seen, cpu_grads] = run(Device::cpu());
  const auto [dev_seen, dev_grads] = run(kDev);
  const std::vector<std::pair<OpId, int64_t>> expected{{OpId::linear_gelu, 0}, {OpId::linear, 0}};
  CHECK(cpu_seen == expected);
  CHECK(dev_seen == expected);
  for (size_t i = 0; i < cpu_grads.size(); ++i) {
    INFO("gradient " << i << " (x, w1, b1, w2)");
    CHECK(max(abs(dev_grads[i] - cpu_grads[i])).item<float>() <= 1e-5f * (1.0f + max(abs(cpu_grads[i])).item<float>()));
  }
}

TEST_CASE("autocast enabled for the CPU only warns once when a GPU op would have been lowered") {
  require_fake_device();
  // amp::Autocast(DType::bf16) means the CPU (the default device type): a model on a GPU under it
  // computes in fp32, which PyTorch's explicit device_type makes visible and precis now says.
  std::vector<std::string> seen;
  WarningHandler old = set_warning_handler([&](const std::string& m) { seen.push_back(m); });
  const Tensor x = randn({4, 8}).to(kDev), w = randn({6, 8}).to(kDev);
  {
    amp::Autocast cpu_only(DType::bf16);
    CHECK(linear(x, w).dtype() == DType::f32);  // not lowered: autocast is not on for cuda
    (void)matmul(x, w.t());
    (void)linear(x.to(Device::cpu()), w.to(Device::cpu()));  // the CPU op is lowered, no warning
  }
  {
    amp::Autocast gpu(DType::f16, DeviceType::cuda);  // host work inside a GPU region: no warning
    (void)linear(x.to(Device::cpu()), w.to(Device::cpu()));
  }
  set_warning_handler(old);
  REQUIRE(seen.size() == 1);  // once per process (ctest runs each test case in its own)
  CHECK(seen[0].find("DeviceType::cuda") != std::string::npos);
}
