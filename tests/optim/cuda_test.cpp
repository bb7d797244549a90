// The CUDA multi-tensor-apply updates against the CPU kernels. Tagged [cuda]; skipped unless the
// build has the CUDA backend and a CUDA tensor can be made (tests/gpu/run.sh runs them on a GPU).
#include <catch2/catch.hpp>

#include <functional>
#include <memory>

#include "optim/adam.h"
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
