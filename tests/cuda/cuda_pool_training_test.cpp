// A conv-BN-ReLU-MaxPool network (the shape of a small VGG, with ResNet's overlapping 3×3/2 pad 1
// stem pool and a 2×2 pool) trained on cuda:0 and on the CPU from one seed, on the same batches:
// the losses must agree step by step. The op test beside it (cuda_index_pool_test.cpp) compares
// one call; this one shows what a user sees: the CUDA max-pool backward once gathered every input
// gradient from 1×1 windows, and a VGG trained on the GPU ended 4 points below the CPU.
//
// f64 makes the comparison sharp: the devices differ only in the order of their f64 sums (cuDNN's
// convolution and the reductions), ~1e-16 relative per op, and a few hundred SGD steps on a
// smooth loss amplify that by far less than 1e8 — while a wrong gradient moves the loss by 1e-3 or
// more within a few steps (the first H200 run: equal to 1e-8 over all 300 steps). f32 is checked
// too, at a tolerance that leaves room for its rounding (and for the rare max-pool window whose two
// largest values swap order under it).
#include <algorithm>
#include <cmath>
#include <vector>

#include "core/device.h"
#include "core/rng.h"
#include "models/nn/nn.h"
#include "ops/float32_precision.h"
#include "ops/functional.h"
#include "optim/sgd.h"
#include "tensor/factory.h"
#include "tests/support/tensor_testing.h"

using namespace precis;

namespace {

constexpr int64_t kClasses = 10, kBatch = 64, kSide = 16;

nn::Sequential vgg_like() {
  Generator g(7);
  return nn::Sequential{nn::Conv2d(1, 8, 3, {.padding = 1, .generator = &g}),
                        nn::BatchNorm2d(8),
                        nn::ReLU(),
                        nn::MaxPool2d(3, {.stride = 2, .padding = 1}),  // 16 → 8, overlapping windows
                        nn::Conv2d(8, 16, 3, {.padding = 1, .generator = &g}),
                        nn::BatchNorm2d(16),
                        nn::ReLU(),
                        nn::MaxPool2d(2),  // 8 → 4
                        nn::Flatten(),
                        nn::Linear(16 * 4 * 4, kClasses, {.generator = &g})};
}

struct Batch {
  Tensor x, y;
};

// Step `step`'s batch: class templates under heavy noise, so that the loss falls over every step
// (2.3 to ~0.8 in 300 steps) and the gradients through the pools matter throughout.
Batch batch(int step, const Tensor& templates) {
  Generator g(1000 + step);
  const Tensor y = randint(0, kClasses, {kBatch}, {.dtype = DType::i64}, &g);
  const Tensor noise = testing::randn_input({kBatch, 1, kSide, kSide}, false, 5000 + step);
  return {index_select(templates, 0, y) + noise * 3.0, y};
}

// The per-step training losses of `steps` SGD-momentum steps on `device` in `dtype`.
std::vector<double> train_losses(Device device, DType dtype, int steps) {
  const Tensor templates = testing::randn_input({kClasses, 1, kSide, kSide}, false, 42);
  nn::Sequential model = vgg_like();
  model.to(dtype);
  model.to(device);
  optim::SGD opt(model.parameters(), {.lr = 0.02, .momentum = 0.9});
  std::vector<double> losses;
  for (int step = 0; step < steps; ++step) {
    const Batch b = batch(step, templates);
    const Tensor loss = cross_entropy(model(b.x.to(dtype).to(device)), b.y.to(device));
    opt.zero_grad();
    loss.backward();
    opt.step();
    losses.push_back(loss.to(Device::cpu()).to(DType::f64).item<double>());
  }
  return losses;
}

// The first `close_steps` losses within `rel` of the CPU's, then every loss finite and the mean of
// the last 20 within `tail_rel`; and the CPU run learned (so two stalled runs cannot agree).
void require_same_trajectory(const std::vector<double>& cpu, const std::vector<double>& gpu, size_t close_steps,
                             double rel, double tail_rel) {
  REQUIRE(gpu.size() == cpu.size());
  double worst = 0;
  for (size_t i = 0; i < cpu.size(); ++i) {
    INFO("step " << i + 1 << ": cpu " << cpu[i] << ", cuda " << gpu[i] << ", |diff| " << std::abs(gpu[i] - cpu[i]));
    REQUIRE(std::isfinite(gpu[i]));
    worst = std::max(worst, std::abs(gpu[i] - cpu[i]) / std::abs(cpu[i]));
    if (i < close_steps) REQUIRE(std::abs(gpu[i] - cpu[i]) <= rel * std::abs(cpu[i]));
  }
  double first = 0, last = 0, last_gpu = 0;
  for (size_t i = 0; i < 20; ++i) {
    first += cpu[i];
    last += cpu[cpu.size() - 1 - i];
    last_gpu += gpu[gpu.size() - 1 - i];
  }
  WARN("largest relative loss difference over " << cpu.size() << " steps: " << worst << "; last 20 steps' mean: cpu "
                                                 << last / 20 << ", cuda " << last_gpu / 20);
  CHECK(std::abs(last_gpu - last) <= tail_rel * last);
  CHECK(last < 0.5 * first);
}

}  // namespace

TEST_CASE("a conv-BN-ReLU-MaxPool network trains on CUDA as on the CPU, step by step (f64)", "[cuda][train]") {
  PRECIS_REQUIRE_CUDA();
  const int steps = 300;
  require_same_trajectory(train_losses(Device::cpu(), DType::f64, steps), train_losses(Device::cuda(0), DType::f64, steps),
                          steps, 1e-8, 1e-8);
}

// f32 rounding, ~1e-7 per op, grows along the trajectory (the H200 run: 2.3e-3 relative by step 44
// of 200), so f32 holds the first 20 steps to 1e-3 — a wrong gradient is off by more within a few
// steps — and the end of the run to 2 %.
TEST_CASE("a conv-BN-ReLU-MaxPool network trains on CUDA as on the CPU, step by step (f32)", "[cuda][train]") {
  PRECIS_REQUIRE_CUDA();
  const Float32PrecisionGuard ieee(Float32Precision::ieee);  // f32 rounding, not TF32's (the conv default)
  const int steps = 200;
  require_same_trajectory(train_losses(Device::cpu(), DType::f32, steps), train_losses(Device::cuda(0), DType::f32, steps),
                          20, 1e-3, 2e-2);
}
