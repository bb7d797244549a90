// The CUDA multi-tensor-apply updates and gradient clipping against the CPU kernels. Tagged
// [cuda]; skipped loudly unless the build has the CUDA backend and a CUDA device
// (tests/gpu/run.sh runs them on a GPU).
#include <catch2/catch.hpp>

#include <cmath>
#include <functional>
#include <limits>
#include <memory>
#include <optional>

#include "amp/grad_scaler.h"
#include "ops/contracts/kernels_optim.h"
#include "ops/op_table.h"
#include "optim/adam.h"
#include "optim/clip_grad.h"
#include "optim/sgd.h"
#include "tensor/factory.h"
#include "tests/support/tensor_testing.h"

using namespace precis;
using namespace precis::optim;

namespace {

bool cuda_usable() {
#ifdef PRECIS_HAS_CUDA
  try {
    (void)zeros({1}, {.device = Device::cuda()});
    return true;
  } catch (const Error&) {
    return false;
  }
#else
  return false;
#endif
}

using Make = std::function<std::unique_ptr<Optimizer>(std::vector<Tensor>)>;

}  // namespace

TEST_CASE("CUDA fused updates match the CPU ones, found_inf skips on the device", "[optim][cuda]") {
  if (!cuda_usable()) {
    WARN("no usable CUDA device: skipped");
    return;
  }
  const std::vector<Make> makes = {
      [](auto p) { return std::make_unique<SGD>(p, SGDOptions{.lr = 0.05, .momentum = 0.9, .weight_decay = 0.01}); },
      [](auto p) { return std::make_unique<Adam>(p, AdamOptions{.lr = 0.01, .amsgrad = true}); },
      [](auto p) { return std::make_unique<AdamW>(p, AdamWOptions{.lr = 0.01}); },
  };
  for (DType dtype : {DType::f32, DType::bf16, DType::f16}) {
    for (const Make& make : makes) {
      // Sizes that cross the 65536-element chunk and the 24-tensor launch limits.
      std::vector<Tensor> cpu, gpu;
      for (int i = 0; i < 30; ++i) {
        const Shape shape = i == 0 ? Shape{70000, 3} : Shape{i + 1, 5};
        Tensor p = testing::randn_input(shape, false, i, DType::f64).to(dtype);
        cpu.push_back(p.clone().requires_grad_());
        gpu.push_back(p.to(Device::cuda()).requires_grad_());
      }
      auto opt_cpu = make(cpu);
      auto opt_gpu = make(gpu);
      for (int step = 0; step < 5; ++step) {
        for (size_t i = 0; i < cpu.size(); ++i) {
          Tensor g = testing::randn_input(cpu[i].sizes(), false, 100 * step + i, DType::f64).to(dtype);
          cpu[i].set_grad(g);
          gpu[i].set_grad((g * 256.0).to(Device::cuda()));
        }
        if (step != 2) opt_cpu->step();  // the GPU step 2 is skipped through found_inf
        const Tensor found = scalar_tensor(step == 2 ? 1.0 : 0.0, {.device = Device::cuda()});
        opt_gpu->step({.grad_scale = scalar_tensor(256.0, {.device = Device::cuda()}), .found_inf = found});
      }
      for (size_t i = 0; i < cpu.size(); ++i) {
        INFO(opt_gpu->name() << " " << dtype_name(dtype) << " param " << i);
        PRECIS_REQUIRE_CLOSE(gpu[i].cpu().to(DType::f64), cpu[i].to(DType::f64), dtype);
      }
    }
  }
}

// ---- clipping on CUDA gradients ----------------------------------------------------------------

namespace {

/// Parameters with gradients of every floating dtype (one non-contiguous, one longer than a
/// 65536-element chunk, one without a gradient), on `device`; the same values for every device.
/// bad_value (NaN, inf) replaces one element of the f16 gradient. (It was a double with −1 for
/// "none" and the check `nan_at >= 0`, false for NaN: the non-finite test never had a NaN.)
std::vector<Tensor> clip_params(Device device, std::optional<double> bad_value = std::nullopt) {
  const std::vector<std::pair<Shape, DType>> specs = {
      {{70000}, DType::f32}, {{9, 4}, DType::f16}, {{3}, DType::f64}, {{50, 7}, DType::bf16}, {{6}, DType::f32}};
  std::vector<Tensor> params;
  for (size_t i = 0; i < specs.size(); ++i) {
    const auto& [shape, dtype] = specs[i];
    Tensor p = zeros(shape, {.dtype = dtype, .device = device}).requires_grad_();
    if (i != 4) {
      Tensor g = testing::randn_input(shape, false, 60 + i).to(dtype);
      if (i == 1 && bad_value) g.view({-1}).slice(0, 5, 6).fill_(*bad_value);
      g = g.to(device);
      if (i == 3) g = g.t().contiguous().t();  // non-contiguous
      p.set_grad(g);
    }
    params.push_back(p);
  }
  return params;
}

}  // namespace

TEST_CASE("clip_grad_norm_ and grad_norms on CUDA gradients match the CPU", "[optim][cuda]") {
  PRECIS_REQUIRE_CUDA();
  for (double p : {1.0, 2.0, 3.0, std::numeric_limits<double>::infinity()}) {
    for (double fraction : {0.25, 4.0}) {  // clipped, and left alone
      INFO("p = " << p << ", max_norm = " << fraction << " x the norm");
      std::vector<Tensor> cpu = clip_params(Device::cpu()), gpu = clip_params(Device::cuda());
      const std::vector<double> n_cpu = grad_norms(cpu, p), n_gpu = grad_norms(gpu, p);
      for (size_t i = 0; i < n_cpu.size(); ++i) CHECK(n_gpu[i] == Approx(n_cpu[i]).epsilon(1e-12));
      double total = 0;
      for (double n : n_cpu) total = std::isinf(p) ? std::max(total, n) : total + std::pow(n, p);
      if (!std::isinf(p)) total = std::pow(total, 1 / p);
      const Tensor t_cpu = clip_grad_norm_(cpu, fraction * total, p);
      const Tensor t_gpu = clip_grad_norm_(gpu, fraction * total, p);
      CHECK(t_gpu.device() == Device::cuda());
      CHECK(t_gpu.dtype() == DType::f32);
      CHECK(t_gpu.item<float>() == Approx(t_cpu.item<float>()).epsilon(1e-6));
      for (size_t i = 0; i < cpu.size(); ++i) {
        if (!cpu[i].grad().defined()) continue;
        INFO("gradient " << i);
        PRECIS_REQUIRE_CLOSE(gpu[i].grad().cpu().to(DType::f64), cpu[i].grad().to(DType::f64), cpu[i].dtype());
      }
    }
  }
}

TEST_CASE("clip_grad_norm_ on CUDA: non-finite gradients are untouched or reported", "[optim][cuda]") {
  PRECIS_REQUIRE_CUDA();
  std::vector<Tensor> gpu = clip_params(Device::cuda(), std::numeric_limits<double>::quiet_NaN());
  const std::vector<double> before = gpu[0].grad().cpu().to_vector<double>();
  CHECK(std::isnan(clip_grad_norm_(gpu, 1e-3).item<float>()));
  CHECK(gpu[0].grad().cpu().to_vector<double>() == before);
  PRECIS_REQUIRE_THROWS_WITH_ALL(clip_grad_norm_(gpu, 1e-3, 2.0, true), ValueError, "clip_grad_norm_", "parameter 1",
                                 "cuda:0", "error_if_nonfinite");
  // Precomputed squared norms stay on the device (the loss scaler's path); entries of parameters
  // without a gradient are skipped.
  std::vector<Tensor> cpu = clip_params(Device::cpu()), again = clip_params(Device::cuda());
  std::vector<double> sq;
  for (double n : grad_norms(cpu)) sq.push_back(n * n);
  const Tensor t_cpu = clip_grad_norm_(cpu, 1.0, sq);
  const Tensor t_gpu = clip_grad_norm_(again, 1.0, from_vector<double>(sq).to(Device::cuda()));
  CHECK(t_gpu.item<float>() == Approx(t_cpu.item<float>()).epsilon(1e-6));
  for (size_t i = 0; i < cpu.size(); ++i)
    if (cpu[i].grad().defined())
      PRECIS_REQUIRE_CLOSE(again[i].grad().cpu().to(DType::f64), cpu[i].grad().to(DType::f64), cpu[i].dtype());
}

TEST_CASE("clip_grad_value_ on CUDA gradients equals the CPU's bit for bit", "[optim][cuda]") {
  PRECIS_REQUIRE_CUDA();
  std::vector<Tensor> cpu = clip_params(Device::cpu()), gpu = clip_params(Device::cuda());
  clip_grad_value_(cpu, 0.3);
  clip_grad_value_(gpu, 0.3);
  for (size_t i = 0; i < cpu.size(); ++i) {
    if (!cpu[i].grad().defined()) continue;
    CHECK(gpu[i].grad().cpu().to(DType::f64).to_vector<double>() == cpu[i].grad().to(DType::f64).to_vector<double>());
  }
}

TEST_CASE("GradScaler::clip_grad_norm_ clips CUDA gradients with unscale_'s norms, on the device", "[optim][cuda]") {
  PRECIS_REQUIRE_CUDA();
  Tensor norms[2];
  std::vector<Tensor> grads[2];
  for (int d = 0; d < 2; ++d) {
    const Device device = d == 0 ? Device::cpu() : Device::cuda();
    std::vector<Tensor> params;
    for (int i = 0; i < 3; ++i) {
      Tensor p = zeros({100 * (i + 1)}, {.device = device}).requires_grad_();
      p.set_grad((testing::randn_input({100 * (i + 1)}, false, 80 + i) * 1024.0).to(DType::f32).to(device));
      params.push_back(p);
    }
    SGD opt(params, {.lr = 0.1});
    amp::GradScaler scaler({.init_scale = 1024.0});
    scaler.unscale_(opt);
    norms[d] = scaler.clip_grad_norm_(opt, 1.0);
    CHECK(norms[d].device() == device);
    for (const Tensor& p : params) grads[d].push_back(p.grad().cpu());
  }
  CHECK(norms[1].item<float>() == Approx(norms[0].item<float>()).epsilon(1e-6));
  CHECK(norms[0].item<float>() > 1.0f);  // so the gradients were clipped
  for (size_t i = 0; i < grads[0].size(); ++i) PRECIS_REQUIRE_CLOSE(grads[1][i].to(DType::f64), grads[0][i].to(DType::f64), DType::f32);
}

TEST_CASE("CUDA SGD and Adam kernels: a scheduled momentum without a buffer, and an empty parameter's step counter",
          "[optim][cuda]") {
  if (!cuda_usable()) {
    WARN("no usable CUDA device: skipped");
    return;
  }
  const Device gpu = Device::cuda();
  // The optimizer's own momentum is 0, so no buffer exists; a schedule (OneCycleLR's momentum)
  // says 0.9 on the device. Plain SGD on both backends, as the CPU kernel does (the CUDA kernel
  // used to write through the null buffer).
  const Tensor p0 = testing::randn_input({300}, false, 1, DType::f32);
  const Tensor g = testing::randn_input({300}, false, 2, DType::f32);
  const auto sgd = [&](Device device) {
    const Tensor p = p0.to(device).clone();
    const Tensor scheduled = from_vector<double>({0.1, 0.9}).to(device);
    kernel<kernels::SgdStepKernel>(OpId::sgd_step, device.type, DType::f32)(
        {{.param = p, .grad = g.to(device)}}, kernels::SgdHyper{.lr = 0.5}, Tensor(), Tensor(), scheduled);
    return p.cpu();
  };
  const Tensor expected = sgd(Device::cpu());
  PRECIS_REQUIRE_CLOSE(expected, p0 - g * 0.1, DType::f32);
  PRECIS_REQUIRE_CLOSE(sgd(gpu), expected, DType::f32);  // nvcc may contract into an FMA (optim_math.h)
  // An empty parameter's step counter counts its steps as every other's.
  const auto adam_steps = [&](Device device) {
    const Tensor empty_p = zeros({0}, {.device = device}), step = zeros({}, {.device = device});
    const Tensor avg = zeros({0}, {.device = device}), avg_sq = zeros({0}, {.device = device});
    kernel<kernels::AdamStepKernel>(OpId::adam_step, device.type, DType::f32)(
        {{.param = empty_p, .grad = zeros({0}, {.device = device}), .exp_avg = avg, .exp_avg_sq = avg_sq,
          .step = step}},
        kernels::AdamHyper{.lr = 0.1, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8}, Tensor(), Tensor(), Tensor());
    return step.item<float>();
  };
  REQUIRE(adam_steps(Device::cpu()) == 1.0f);
  CHECK(adam_steps(gpu) == 1.0f);
}
