// A training step on the fake CUDA device makes the host wait for the GPU nowhere (docs/gpu.md,
// "The host never waits"): forward under f16 autocast, the scaled backward, the scaler's
// unscale_ and clipping, its step and update, zero_grad — for a small CNN (ResNet-20) with SGD
// and a small transformer (BERT) with Adam. Each phase is counted on its own, so a failure names
// the phase, and the debug mode's error then names the site.
#include <functional>
#include <string>
#include <vector>

#include "amp/amp.h"
#include "core/warning.h"
#include "models/bert.h"
#include "models/resnet.h"
#include "precis.h"
#include "tests/fake_cuda/fake_device.h"
#include "tests/support/tiny_bert.h"

using namespace precis;
using precis::fake_cuda_testing::require_fake_device;
using precis::fake_cuda_testing::SyncModeGuard;

namespace {

const Device kDev = Device::cuda(0);

// Syncs per phase, and the sites that synced (the warn mode's messages), for the failure message.
struct PhaseCounts {
  std::vector<std::pair<std::string, int64_t>> phases;
  std::string sites;
  void run(const std::string& name, const std::function<void()>& f) {
    WarningHandler old = set_warning_handler([&](const std::string& m) { sites += "\n  " + name + ": " + m; });
    SyncModeGuard mode(cuda::SyncDebugMode::warn);
    cuda::HostSyncCounter c;
    f();
    phases.emplace_back(name, c.count());
    set_warning_handler(old);
  }
  std::string str() const {
    std::string s;
    for (const auto& [n, c] : phases) s += n + "=" + std::to_string(c) + " ";
    return s + sites;
  }
  int64_t total() const {
    int64_t t = 0;
    for (const auto& p : phases) t += p.second;
    return t;
  }
};

// One optimizer step of `forward_loss`'s model, phase by phase.
PhaseCounts one_step(const std::function<Tensor()>& forward_loss, optim::Optimizer& opt, amp::GradScaler& scaler) {
  PhaseCounts p;
  Tensor loss;
  p.run("forward", [&] {
    amp::Autocast ac(DType::f16, DeviceType::cuda);
    loss = forward_loss();
  });
  p.run("backward", [&] { scaler.scale(loss).backward(); });
  p.run("clip", [&] { (void)scaler.clip_grad_norm_(opt, 1.0); });
  amp::StepResult r;
  p.run("step", [&] { r = scaler.step(opt); });
  p.run("update", [&] { scaler.update(); });
  p.run("zero_grad", [&] { opt.zero_grad(); });
  return p;
}

}  // namespace

TEST_CASE("a ResNet-20 step with f16 autocast, GradScaler, clipping and SGD makes no host sync") {
  require_fake_device();
  auto model = models::resnet20({.num_classes = 10, .in_channels = 1, .width = 4});
  model->to(kDev);
  optim::SGD opt(model->parameters(), {.lr = 0.05, .momentum = 0.9});
  amp::GradScaler scaler;
  const Tensor x = randn({4, 1, 8, 8}).pin_memory().to(kDev, true);
  const Tensor y = from_vector<int64_t>({1, 3, 5, 7}).pin_memory().to(kDev, true);
  // 9 steps: the first makes the optimizer state, and the scaler has periodic work every 8.
  for (int step = 0; step < 9; ++step) {
    const PhaseCounts p = one_step([&] { return cross_entropy(model->forward(x), y); }, opt, scaler);
    INFO("step " << step << ": " << p.str());
    CHECK(p.total() == 0);
  }
  // The step's results are there to read, at a log point, where the host reads anyway.
  cuda::HostSyncCounter c;
  CHECK(scaler.history().size() == 9);
  CHECK(c.count() > 0);
}

TEST_CASE("a BERT step with f16 autocast, GradScaler, clipping and Adam makes no host sync") {
  require_fake_device();
  const models::BertConfig cfg = testing::tiny_bert_config();
  models::BertForMaskedLM model(cfg);
  model.to(kDev);
  optim::Adam opt(model.parameters(), {.lr = 1e-3});
  amp::GradScaler scaler;
  const Tensor host_ids = randint(1, 60, {2, 8}, {.dtype = DType::i64});
  const Tensor host_labels = where(lt(rand({2, 8}), 0.3), host_ids, full({2, 8}, -100.0, {.dtype = DType::i64}));
  const Tensor ids = host_ids.pin_memory().to(kDev, true);
  const Tensor labels = host_labels.pin_memory().to(kDev, true);
  const Tensor lengths = from_vector<int64_t>({8, 5}).pin_memory().to(kDev, true);
  const Tensor mask = models::attention_mask_from_lengths(lengths, 8);
  for (int step = 0; step < 9; ++step) {
    const PhaseCounts p =
        one_step([&] { return model.forward_with_labels(ids, mask, labels).loss; }, opt, scaler);
    INFO("step " << step << ": " << p.str());
    CHECK(p.total() == 0);
  }
}

TEST_CASE("an explicit item() inside a step throws HostSyncError in error mode, naming it") {
  require_fake_device();
  auto model = models::resnet20({.num_classes = 10, .in_channels = 1, .width = 4});
  model->to(kDev);
  optim::SGD opt(model->parameters(), {.lr = 0.05});
  amp::GradScaler scaler;
  const Tensor x = randn({2, 1, 8, 8}).pin_memory().to(kDev, true);
  const Tensor y = from_vector<int64_t>({1, 3}).pin_memory().to(kDev, true);
  SyncModeGuard mode(cuda::SyncDebugMode::error);
  Tensor loss;
  {
    amp::Autocast ac(DType::f16, DeviceType::cuda);
    loss = cross_entropy(model->forward(x), y);
  }
  scaler.scale(loss).backward();
  try {
    (void)loss.item<double>();  // what a training loop that logs every step does
    FAIL("item() did not throw");
  } catch (const HostSyncError& e) {
    CHECK(std::string(e.what()).find("Tensor::item()") != std::string::npos);
  }
  CHECK_NOTHROW(scaler.step(opt));
  CHECK_NOTHROW(scaler.update());
}
