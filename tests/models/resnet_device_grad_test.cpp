// One training step's gradients of the tiny ResNet-20 (width 4) that the precis-train device test
// trains, on cuda:0 and on the CPU from the same weights and batch, in f32 and under f16 autocast:
// each parameter's gradient must agree within the precision's rounding. This is the check that a
// device computes the right gradient; the trajectory test (train_device_test.cpp) only follows
// losses, and in f16 this tiny network (4 channels, BN over 16 images) turns one f16 rounding per
// op into losses a few percent apart within a few steps, with no step skipped on either device.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "amp/autocast.h"
#include "core/device.h"
#include "core/rng.h"
#include "models/resnet.h"
#include "ops/functional.h"
#include "ops/float32_precision.h"
#include "tensor/factory.h"
#include "tests/support/tensor_testing.h"

using namespace precis;

namespace {

// The parameters' gradients after one forward and backward on `device`, the loss scaled by 1024
// as the loss scaler would (f16 gradients of activations underflow without it) and unscaled after.
std::vector<std::pair<std::string, Tensor>> step_gradients(Device device, DType precision) {
  Generator g(3);
  auto model = models::resnet20({.num_classes = 10, .in_channels = 1, .width = 4, .generator = &g});
  model->to(device);
  const Tensor x = testing::randn_input({16, 1, 16, 16}, false, 11, DType::f32).to(device);
  Generator gy(12);
  const Tensor y = randint(0, 10, {16}, {.dtype = DType::i64}, &gy).to(device);
  Tensor loss;
  {
    std::optional<amp::Autocast> region;
    if (precision != DType::f32) region.emplace(precision, device.type);
    loss = cross_entropy((*model)(x), y);
  }
  (loss * 1024.0).backward();
  std::vector<std::pair<std::string, Tensor>> grads;
  for (const auto& [name, p] : model->named_parameters())
    grads.emplace_back(name, (p.grad().to(Device::cpu()).to(DType::f64) / 1024.0));
  return grads;
}

double norm(const Tensor& t) { return std::sqrt(sum(t * t).item<double>()); }

}  // namespace

TEST_CASE("ResNet-20 gradients on cuda:0 match the CPU's within the precision's rounding", "[models][cuda]") {
  PRECIS_REQUIRE_CUDA();
  const Float32PrecisionGuard ieee(Float32Precision::ieee);  // f32 rounding, not TF32's (the conv default)
  // Relative L2 error per parameter, against the larger of its gradient's norm and 1e-3 of the
  // largest one (a BN bias whose gradient nearly cancels has no relative precision to keep). f32:
  // the devices sum in other orders (~1e-6 after ~20 layers). f16: activations and their
  // gradients are rounded to f16 (2^-11) at every op on both devices, but not at the same points
  // of the sums, so ~1e-3 per op, a few 1e-3 after the network. A wrong kernel is off by O(1).
  for (const auto& [precision, tol] : {std::pair{DType::f32, 1e-4}, std::pair{DType::f16, 3e-2}}) {
    const auto cpu = step_gradients(Device::cpu(), precision), gpu = step_gradients(Device::cuda(0), precision);
    REQUIRE(cpu.size() == gpu.size());
    double largest = 0;
    for (const auto& [name, g] : cpu) largest = std::max(largest, norm(g));
    double worst = 0;
    std::string worst_name;
    for (size_t i = 0; i < cpu.size(); ++i) {
      const double err = norm(gpu[i].second - cpu[i].second) / std::max(norm(cpu[i].second), 1e-3 * largest);
      if (err > worst) worst = err, worst_name = cpu[i].first;
      INFO(dtype_name(precision) << " " << cpu[i].first << ": relative error " << err);
      CHECK(err <= tol);
    }
    WARN(dtype_name(precision) << ": largest relative gradient error CUDA vs CPU " << worst << " (" << worst_name << ")");
  }
}
