// CUDA graphs on a GPU (core/cuda_graph.h): a replay repeats the captured work on inputs refilled
// in place, and a captured f16 training step replayed N times gives the parameters N eager steps
// give, bit for bit (the same kernels on the same data) — with dropout too, whose masks each
// replay draws anew from the generator's offset (graph-safe random numbers). What a capture refuses is checked
// without a GPU on the fake device (tests/fake_cuda/graph_test.cpp).
#include <functional>
#include <memory>
#include <vector>

#include "amp/amp.h"
#include "core/cuda_graph.h"
#include "core/rng.h"
#include "core/device.h"
#include "models/bert.h"
#include "models/resnet.h"
#include "optim/adam.h"
#include "optim/lr_scheduler.h"
#include "ops/functional.h"
#include "optim/sgd.h"
#include "tensor/factory.h"
#include "tests/support/tensor_testing.h"
#include "tests/support/tiny_bert.h"

namespace precis {
namespace {

const Device kGpu = Device::cuda(0);

// Two warm-up steps, then four more: run eagerly, or as replays of one capture of the step.
void run_steps(const std::function<void()>& step, bool graphed) {
  step();
  step();
  cuda::Graph g;
  if (graphed) cuda::capture(g, step);
  for (int i = 0; i < 4; ++i) graphed ? g.replay() : step();
}

std::vector<Tensor> on_host(const std::vector<Tensor>& params) {
  std::vector<Tensor> out;
  for (const Tensor& p : params) out.push_back(p.detach().to(Device::cpu()));
  return out;
}

void require_same_bits(const std::vector<Tensor>& graphed, const std::vector<Tensor>& eager) {
  REQUIRE(eager.size() == graphed.size());
  for (size_t i = 0; i < eager.size(); ++i) PRECIS_REQUIRE_SAME_BITS(graphed[i], eager[i]);
}

// ResNet-20 (width 4) on the GPU from seed `seed`, and a fixed batch of eight 1×8×8 images.
struct TinyResNet {
  std::shared_ptr<models::ResNet> model;
  Tensor x, y;
  explicit TinyResNet(uint64_t seed) {
    manual_seed(seed);
    model = models::resnet20({.num_classes = 10, .in_channels = 1, .width = 4});
    model->to(kGpu);
    x = randn({8, 1, 8, 8}).to(kGpu);
    y = from_vector<int64_t>({1, 3, 5, 7, 0, 2, 4, 6}).to(kGpu);
  }
  // The f16 autocast forward and the scaled backward of one step.
  void scaled_backward(amp::GradScaler& scaler) const {
    Tensor loss;
    {
      amp::Autocast ac(DType::f16, DeviceType::cuda);
      loss = cross_entropy(model->forward(x), y);
    }
    scaler.scale(loss).backward();
  }
};

TEST_CASE("a CUDA graph replay repeats the captured work on inputs refilled in place", "[cuda]") {
  PRECIS_REQUIRE_CUDA();
  Tensor x = zeros({4096}, {.device = kGpu});
  Tensor y;
  cuda::Graph g;
  (void)(x * 2.0 + 1.0);  // warm-up: the kernels' first launches outside the capture
  cuda::capture(g, [&] { y = x * 2.0 + 1.0; });
  for (double v : {1.0, -3.5, 7.25}) {
    x.copy_(full({4096}, v).to(kGpu));
    g.replay();
    const std::vector<float> got = y.to(Device::cpu()).to_vector<float>();
    CHECK(got.front() == static_cast<float>(2.0 * v + 1.0));
    CHECK(got.back() == static_cast<float>(2.0 * v + 1.0));
  }
  // The graph draws nothing: reseeding after the capture is allowed, and a replay keeps the new
  // seed (it used to write the capture's seed back into the default generator).
  const uint64_t before = default_generator().seed();
  manual_seed(before + 7);
  g.replay();
  CHECK(default_generator().seed() == before + 7);
}

TEST_CASE("a captured f16 ResNet-20 step replayed equals the eager steps bit for bit", "[cuda]") {
  PRECIS_REQUIRE_CUDA();
  auto run = [](bool graphed) {
    const TinyResNet net(5);
    optim::SGD opt(net.model->parameters(), {.lr = 0.05, .momentum = 0.9});
    amp::GradScaler scaler;
    auto step = [&] {
      net.scaled_backward(scaler);
      (void)scaler.clip_grad_norm_(opt, 1.0);
      (void)scaler.step(opt);
      scaler.update();
      opt.zero_grad(false);  // gradients stay allocated: a replay writes the captured buffers
    };
    run_steps(step, graphed);
    return on_host(net.model->parameters());
  };
  require_same_bits(run(true), run(false));
}

TEST_CASE("a captured BERT step with dropout replayed equals the eager steps bit for bit", "[cuda]") {
  PRECIS_REQUIRE_CUDA();
  const models::BertConfig cfg = testing::tiny_bert_config(0.1);
  auto run = [&](bool graphed) {
    manual_seed(9);
    models::BertForMaskedLM model(cfg);
    model.to(kGpu);
    optim::Adam opt(model.parameters(), {.lr = 1e-3});
    amp::GradScaler scaler;
    const Tensor host_ids = randint(1, 60, {2, 8}, {.dtype = DType::i64});
    const Tensor ids = host_ids.to(kGpu);
    const Tensor labels = where(lt(rand({2, 8}), 0.3), host_ids, full({2, 8}, -100.0, {.dtype = DType::i64})).to(kGpu);
    auto step = [&] {
      Tensor loss;
      {
        amp::Autocast ac(DType::f16, DeviceType::cuda);
        loss = model.forward_with_labels(ids, Tensor(), labels).loss;
      }
      scaler.scale(loss).backward();
      (void)scaler.step(opt);
      scaler.update();
      opt.zero_grad(false);
    };
    run_steps(step, graphed);
    return std::make_pair(on_host(model.parameters()), default_generator().offset());
  };
  const auto [eager, eager_offset] = run(false);
  const auto [graphed, graphed_offset] = run(true);
  CHECK(graphed_offset == eager_offset);  // four replays advanced the generator as four steps
  require_same_bits(graphed, eager);
}

// The loss scaler's state carries from replay to replay: a scale far too large overflows every
// f16 step and halves at each, replayed or eager alike (the scaler updates its tensors in place).
TEST_CASE("replayed f16 steps back the loss scale off from replay to replay, as eager steps do", "[cuda]") {
  PRECIS_REQUIRE_CUDA();
  auto run = [](bool graphed) {
    const TinyResNet net(7);
    optim::SGD opt(net.model->parameters(), {.lr = 0.05, .momentum = 0.9});
    amp::GradScaler scaler({.init_scale = 3e38, .max_scale = 3e38});
    auto step = [&] {
      net.scaled_backward(scaler);
      (void)scaler.step(opt);
      scaler.update();
      opt.zero_grad(false);
    };
    run_steps(step, graphed);
    return std::make_pair(on_host(net.model->parameters()), scaler.get_scale());
  };
  const auto [eager, eager_scale] = run(false);
  const auto [graphed, graphed_scale] = run(true);
  CHECK(eager_scale == 3e38f / 64.0f);  // six overflowing steps, six halvings
  CHECK(graphed_scale == eager_scale);
  require_same_bits(graphed, eager);
}

// The learning rate inside a captured step: a capturable Adam with OneCycleLR counted on the
// device (lr and beta1 change every step) replays as the eager steps with the host schedule.
TEST_CASE("a captured step with its lr schedule on the device replays as the eager steps with the host schedule",
          "[cuda]") {
  PRECIS_REQUIRE_CUDA();
  auto run = [](bool graphed) {
    const TinyResNet net(6);
    optim::Adam opt(net.model->parameters(), {.lr = 1e-3});
    optim::OneCycleLR sched(opt, {.max_lr = 1e-2, .total_steps = 6});
    if (graphed) {
      opt.set_capturable(true);
      sched.to_device(6);
    }
    amp::GradScaler scaler;
    auto step = [&] {
      net.scaled_backward(scaler);
      const amp::StepResult r = scaler.step(opt);
      scaler.update();
      if (graphed) {
        sched.step_on_device(r.skip_flag());
      } else {
        sched.step(r.applied());
      }
      opt.zero_grad(false);
    };
    run_steps(step, graphed);
    return std::make_pair(on_host(net.model->parameters()), sched.last_step());
  };
  const auto [eager, eager_steps] = run(false);
  const auto [graphed, graphed_steps] = run(true);
  CHECK(graphed_steps == eager_steps);
  require_same_bits(graphed, eager);
}

}  // namespace
}  // namespace precis
