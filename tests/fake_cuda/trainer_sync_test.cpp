// precis-train's step on the fake CUDA device: the host waits for the device only where it reads
// anyway (log points, checkpoints, evaluation) — with a learning-rate schedule too, which counts
// applied steps on the device — and --cuda-graphs captures the step.
#include <vector>

#include "models/train/trainer.h"
#include "precis.h"
#include "tests/fake_cuda/fake_device.h"
#include "tests/models/train_support.h"
#include "tests/support/tensor_testing.h"

using namespace precis;
using namespace precis::train_testing;
using precis::fake_cuda_testing::require_fake_device;

namespace {

// Host waits on this thread between consecutive gradient-ready points of one epoch: one step's
// clip, scaler step and update, zero_grad, the next batch's copy, forward and backward.
std::vector<int64_t> waits_between_steps(train::TrainOptions o) {
  std::vector<int64_t> at;  // the thread's count at each gradient-ready point
  cuda::HostSyncCounter c;
  train::TrainHooks hooks;
  hooks.gradients_ready = [&](const train::GradientsReady&) { at.push_back(c.count()); };
  std::ostringstream out;
  (void)train::train(o, out, hooks);
  std::vector<int64_t> between;
  for (size_t i = 1; i < at.size(); ++i)
    if (i % 6 != 0) between.push_back(at[i] - at[i - 1]);  // 6 steps per epoch: skip the epoch ends
  return between;
}

train::TrainOptions f16_run(const std::string& data) {
  train::TrainOptions o = tiny_resnet(data, "");
  o.device = Device::cuda(0);
  o.precision = DType::f16;
  o.clip = 1.0;
  o.schedule = train::Schedule::none;
  return o;
}

}  // namespace

TEST_CASE("precis-train on the fake device: f16 steps with clipping wait for the device nowhere") {
  require_fake_device();
  TempDir dir("fake-train");
  const std::vector<int64_t> between = waits_between_steps(f16_run(image_data(dir)));
  REQUIRE(between.size() == 10);  // 2 epochs of 6 steps, 5 gaps each
  for (int64_t w : between) CHECK(w == 0);
}

// The schedule counts on the device: a step with OneCycle waits for nothing either, and the run
// ends where the same run on the CPU device ends (the host schedule there), weights and state.
TEST_CASE("precis-train on the fake device: a learning-rate schedule counts on the device, no wait per step") {
  require_fake_device();
  TempDir dir("fake-train-sched");
  train::TrainOptions o = f16_run(image_data(dir));
  o.schedule = train::Schedule::onecycle;
  const std::vector<int64_t> between = waits_between_steps(o);
  REQUIRE(between.size() == 10);
  for (int64_t w : between) CHECK(w == 0);

  o.checkpoint_dir = dir / "fake";
  std::ostringstream out;
  const train::TrainSummary fake = train::train(o, out);
  o.device = Device::cpu();
  o.checkpoint_dir = dir / "cpu";
  const train::TrainSummary cpu = train::train(o, out);
  require_same_state(fake.last_checkpoint, cpu.last_checkpoint);
}

// --cuda-graphs on the fake device, which runs kernels as they are issued and has nothing to
// replay: the warm-up steps (eager, with the lr schedule counted on the device and the gradients
// zeroed in place) end where the steps without graphs end, the third full batch's step captures —
// no host wait inside it, or the capture would throw GraphCaptureError — and its replay is the
// fake device's refusal (replays run on a GPU: tests/models/train_device_test.cpp).
TEST_CASE("precis-train --cuda-graphs on the fake device: warm-up steps equal eager ones, then the step captures") {
  require_fake_device();
  TempDir dir("fake-train-graphs");
  train::TrainOptions o = f16_run(image_data(dir));
  o.schedule = train::Schedule::onecycle;
  o.stop_after_steps = 2;
  o.checkpoint_dir = dir / "eager";
  std::ostringstream out;
  const train::TrainSummary eager = train::train(o, out);
  o.cuda_graphs = true;
  o.checkpoint_dir = dir / "graphs";
  const train::TrainSummary warm = train::train(o, out);
  const train::Checkpoint a = train::load_checkpoint(eager.last_checkpoint);
  const train::Checkpoint b = train::load_checkpoint(warm.last_checkpoint);
  int64_t compared = 0;
  for (const auto& [name, t] : a.state) {
    if (name.rfind("model.", 0) != 0 && name.rfind("optimizer.", 0) != 0 && name.rfind("scheduler.", 0) != 0)
      continue;
    INFO(name);
    REQUIRE(b.state.count(name) == 1);
    CHECK(t.to(DType::f64).to_vector<double>() == b.state.at(name).to(DType::f64).to_vector<double>());
    ++compared;
  }
  CHECK(compared > 20);

  o.stop_after_steps = 3;
  o.checkpoint_dir.clear();
  PRECIS_REQUIRE_THROWS_WITH_ALL(train::train(o, out), NotImplementedError, "cuda::Graph::replay",
                                 "replays run on a GPU");
  // On cuda:1 the step is captured on cuda:1 (the graph used to be cuda:0's, whose capture a
  // GPU would have left empty while the step ran once on cuda:1; allocating on another device
  // than the capture's is now refused, so that graph would throw GraphCaptureError here).
  o.device = Device::cuda(1);
  PRECIS_REQUIRE_THROWS_WITH_ALL(train::train(o, out), NotImplementedError, "cuda::Graph::replay",
                                 "replays run on a GPU");
}

TEST_CASE("precis-train --cuda-graphs refuses what a captured step cannot hold, naming the option") {
  require_fake_device();
  TempDir dir("graphs-refusals");
  train::TrainOptions o = tiny_resnet(image_data(dir), "");
  o.cuda_graphs = true;
  std::ostringstream out;
  PRECIS_REQUIRE_THROWS_WITH_ALL(train::train(o, out), ValueError, "--cuda-graphs", "--device cuda", "cpu");
  o.device = Device::cuda(0);
  o.accum = 2;
  PRECIS_REQUIRE_THROWS_WITH_ALL(train::train(o, out), ValueError, "--cuda-graphs", "--accum 1");
  o.accum = 1;
  o.task = train::Task::bert_mini;
  PRECIS_REQUIRE_THROWS_WITH_ALL(train::train(o, out), ValueError, "--cuda-graphs", "bert-mini");
  o.task = train::Task::resnet;
  train::TrainHooks hooks;
  hooks.gradients_ready = [](const train::GradientsReady&) {};
  PRECIS_REQUIRE_THROWS_WITH_ALL(train::train(o, out, hooks), ValueError, "--cuda-graphs", "gradients_ready");
}
