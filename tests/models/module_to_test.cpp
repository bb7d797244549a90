// Module::to() converts tensors in place, so an optimizer built before it keeps training (issue 12:
// it used to update stale copies silently); an optimizer with no gradient at all warns once; the
// normalisation layers keep fp32 parameters in a low-precision model.
#include <catch2/catch.hpp>

#include "amp/grad_scaler.h"
#include "core/warning.h"
#include "models/nn/nn.h"
#include "ops/functional.h"
#include "optim/adam.h"
#include "optim/sgd.h"
#include "tests/support/tensor_testing.h"

using namespace precis;

namespace {

// Captures warnings for the test's lifetime.
struct WarningCapture {
  std::vector<std::string> messages;
  WarningHandler previous;
  WarningCapture() {
    previous = set_warning_handler([this](const std::string& m) { messages.push_back(m); });
  }
  ~WarningCapture() { set_warning_handler(previous); }
};

nn::Sequential small_mlp() {
  Generator g(5);
  return nn::Sequential{nn::Linear(4, 16, {.generator = &g}), nn::LayerNorm(16), nn::ReLU(),
                        nn::Linear(16, 3, {.generator = &g})};
}

}  // namespace

TEST_CASE("module: to() keeps each parameter object, and handles see the new dtype and device", "[models]") {
  nn::Sequential m = small_mlp();
  const Tensor w = m.at<nn::Linear>(0).weight;  // a handle held before, as an optimizer's
  const auto before = w.to_vector<float>();
  const uint32_t version = w.version();
  m.to(DType::bf16);
  CHECK(w.is_same(m.at<nn::Linear>(0).weight));
  CHECK(w.dtype() == DType::bf16);
  CHECK(w.requires_grad());
  CHECK(w.is_leaf());
  CHECK(w.version() > version);  // graphs and autocast caches that saved the old data refuse it
  const auto after = w.to(DType::f32).to_vector<float>();
  for (size_t i = 0; i < before.size(); ++i) CHECK(after[i] == Approx(before[i]).epsilon(1e-2));
  m.to(Device::cpu());  // same device: nothing changes
  CHECK(w.dtype() == DType::bf16);
  // A graph that saved the parameter before the conversion refuses to use the converted one.
  nn::Linear lin(3, 2);
  Tensor y = lin(randn({4, 3}).requires_grad_());  // the input's gradient needs the saved weight
  lin.to(DType::f64);
  PRECIS_REQUIRE_THROWS_WITH_ALL(sum(y).backward(), StateError, "modified by an in-place operation");
}

TEST_CASE("module: an optimizer built before to(bf16) trains the converted model", "[models][optim]") {
  for (const char* which : {"SGD", "AdamW"}) {
    INFO(which);
    manual_seed(1);
    nn::Sequential m = small_mlp();
    std::unique_ptr<optim::Optimizer> opt;
    if (std::string(which) == "SGD") opt = std::make_unique<optim::SGD>(m.parameters(), optim::SGDOptions{.lr = 0.1, .momentum = 0.9});
    else opt = std::make_unique<optim::AdamW>(m.parameters(), optim::AdamWOptions{.lr = 1e-2});
    m.to(DType::bf16);  // after the optimizer: PyTorch users do this
    const Tensor x = randn({32, 4}).to(DType::bf16);
    const Tensor y = randint(0, 3, {32});
    const Tensor w0 = m.at<nn::Linear>(0).weight.to(DType::f32).clone();
    double first = 0, last = 0;
    for (int step = 0; step < 40; ++step) {
      opt->zero_grad();
      Tensor loss = cross_entropy(m(x).to(DType::f32), y);
      loss.backward();
      opt->step();
      (step == 0 ? first : last) = loss.item<double>();
    }
    CHECK(last < 0.5 * first);
    CHECK_FALSE(m.at<nn::Linear>(0).weight.to(DType::f32).to_vector<float>() == w0.to_vector<float>());
    // The bf16 parameters got fp32 masters; the fp32 LayerNorm parameters did not.
    CHECK(opt->state(m.at<nn::Linear>(0).weight, "master").dtype() == DType::f32);
    CHECK_FALSE(opt->state(m.at<nn::LayerNorm>(1).weight, "master").defined());
  }
}

TEST_CASE("optimizer: state follows a parameter converted after steps were taken", "[models][optim]") {
  manual_seed(2);
  nn::Linear lin(3, 2);
  optim::SGD opt(lin.parameters(), {.lr = 0.1, .momentum = 0.9});
  auto step = [&](DType dtype) {
    opt.zero_grad();
    sum(lin(randn({5, 3}).to(dtype)).to(DType::f32)).backward();
    opt.step();
  };
  step(DType::f32);
  CHECK(opt.state(lin.weight, "momentum_buffer").dtype() == DType::f32);
  lin.to(DType::f64);
  step(DType::f64);  // the f32 momentum buffer becomes f64 (f64 parameters keep f64 state)
  CHECK(opt.state(lin.weight, "momentum_buffer").dtype() == DType::f64);
  lin.to(DType::bf16);
  step(DType::bf16);
  CHECK(opt.state(lin.weight, "master").dtype() == DType::f32);
  CHECK(opt.state(lin.weight, "momentum_buffer").dtype() == DType::f32);
  // Back to f32: the master is dropped (an f32 parameter is updated directly, so a kept master would
  // be stale if the parameter became bf16 again).
  lin.to(DType::f32);
  step(DType::f32);
  CHECK_FALSE(opt.state(lin.weight, "master").defined());
  // Converted to bf16 again: the master is made afresh from the current weights. With lr 0 the
  // step writes the master back, so the weights stay put (a stale master from the first bf16 phase
  // would pull them back there).
  const auto w = lin.weight.to_vector<float>();
  lin.to(DType::bf16);
  opt.set_lr(0.0);
  step(DType::bf16);
  const auto w2 = lin.weight.to(DType::f32).to_vector<float>();
  for (size_t i = 0; i < w.size(); ++i) CHECK(w2[i] == Approx(w[i]).epsilon(1e-2));
}

TEST_CASE("optimizer: a step with no gradient at all warns once, saying what to do", "[optim]") {
  WarningCapture capture;
  nn::Linear lin(3, 2);
  optim::SGD opt(lin.parameters(), {.lr = 0.1});
  opt.step();
  opt.step();
  REQUIRE(capture.messages.size() == 1);
  const std::string& m = capture.messages[0];
  CHECK(m.find("SGD.step: none of its parameters (2) has a gradient") != std::string::npos);
  CHECK(m.find("loss.backward()") != std::string::npos);
  CHECK(m.find("model.parameters()") != std::string::npos);
  // A parameter with a gradient: no warning (another optimizer, so the once-flag is fresh).
  optim::SGD opt2(lin.parameters(), {.lr = 0.1});
  sum(lin(randn({2, 3}))).backward();
  opt2.step();
  CHECK(capture.messages.size() == 1);
  // Through the loss scaler too: its step() reaches the optimizer's. (Another parameter count, so
  // the message differs: precis::warn reports each distinct message once per process.)
  optim::SGD opt3({lin.weight}, {.lr = 0.1});
  lin.zero_grad();
  amp::GradScaler scaler;
  scaler.scale(scalar_tensor(1.0));
  scaler.step(opt3);
  scaler.update();
  REQUIRE(capture.messages.size() == 2);
}

TEST_CASE("module: LayerNorm and GroupNorm keep fp32 parameters in a low-precision model", "[models]") {
  nn::Sequential m{nn::Conv2d(2, 4, 3, {.padding = 1}), nn::GroupNorm(2, 4), nn::ReLU(), nn::Flatten(),
                   nn::Linear(64, 8), nn::LayerNorm(8)};
  for (DType low : {DType::bf16, DType::f16}) {
    m.to(low);
    CHECK(m.at<nn::Conv2d>(0).weight.dtype() == low);
    CHECK(m.at<nn::GroupNorm>(1).weight.dtype() == DType::f32);
    CHECK(m.at<nn::GroupNorm>(1).bias.dtype() == DType::f32);
    CHECK(m.at<nn::Linear>(4).weight.dtype() == low);
    CHECK(m.at<nn::LayerNorm>(5).weight.dtype() == DType::f32);
    // The activations stay low-precision through the fp32-parameter norms, and gradients reach them.
    Tensor y = m(randn({2, 2, 4, 4}).to(low));
    CHECK(y.dtype() == low);
    sum(y.to(DType::f32)).backward();
    CHECK(m.at<nn::GroupNorm>(1).weight.grad().dtype() == DType::f32);
    CHECK(m.at<nn::LayerNorm>(5).weight.grad().dtype() == DType::f32);
    m.zero_grad();
    m.to(DType::f32);
  }
  m.to(DType::f64);  // f64 is not low precision: everything converts
  CHECK(m.at<nn::LayerNorm>(5).weight.dtype() == DType::f64);
}

TEST_CASE("module: an optimizer built before to(cuda) follows its parameters to the GPU", "[models][optim][cuda]") {
  PRECIS_REQUIRE_CUDA();
  manual_seed(6);
  nn::Linear gpu(3, 2);
  auto cpu = gpu.clone<nn::Linear>();
  optim::SGD opt_gpu(gpu.parameters(), {.lr = 0.1, .momentum = 0.9});
  optim::SGD opt_cpu(cpu->parameters(), {.lr = 0.1, .momentum = 0.9});
  auto grads = [](nn::Linear& m, int step, Device device) {
    m.weight.set_grad(full({2, 3}, 0.5 + step, {.device = device}));
    m.bias.set_grad(full({2}, -0.25 * step, {.device = device}));
  };
  grads(gpu, 0, Device::cpu());
  grads(*cpu, 0, Device::cpu());
  opt_gpu.step();  // momentum state made on the CPU
  opt_cpu.step();
  const Tensor handle = gpu.weight;
  gpu.to(Device::cuda());
  CHECK(handle.device() == Device::cuda());
  for (int step = 1; step < 4; ++step) {
    grads(gpu, step, Device::cuda());
    grads(*cpu, step, Device::cpu());
    opt_gpu.step();
    opt_cpu.step();
  }
  CHECK(opt_gpu.state(gpu.weight, "momentum_buffer").device() == Device::cuda());
  PRECIS_REQUIRE_CLOSE(gpu.weight.to(Device::cpu()), cpu->weight, DType::f32);
  PRECIS_REQUIRE_CLOSE(gpu.bias.to(Device::cpu()), cpu->bias, DType::f32);
}
