// precis-train's step on the fake CUDA device: the host waits for the device only where it reads
// anyway (log points, checkpoints, evaluation), and, with a learning-rate schedule, once per step
// for the applied flag the scheduler needs on the host (docs/gpu.md says why).
#include <vector>

#include "models/train/trainer.h"
#include "precis.h"
#include "tests/fake_cuda/fake_device.h"
#include "tests/models/train_support.h"

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

TEST_CASE("precis-train on the fake device: a learning-rate schedule reads the applied flag once per step") {
  require_fake_device();
  TempDir dir("fake-train-sched");
  train::TrainOptions o = f16_run(image_data(dir));
  o.schedule = train::Schedule::onecycle;
  const std::vector<int64_t> between = waits_between_steps(o);
  REQUIRE(between.size() == 10);
  for (int64_t w : between) CHECK(w == 1);
}
