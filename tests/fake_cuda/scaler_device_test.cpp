// The loss scaler with its state on the fake CUDA device: update() never waits for it, the floor
// check surfaces at the scaler's next host read, and the overflow backlog folds on the device.
#include <limits>
#include <string>

#include "amp/grad_scaler.h"
#include "optim/sgd.h"
#include "precis.h"
#include "tests/fake_cuda/fake_device.h"

using namespace precis;
using precis::fake_cuda_testing::require_fake_device;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

struct Rig {
  Tensor w;
  optim::SGD opt;
  amp::GradScaler scaler;
  Rig(Device d, amp::GradScalerOptions o)
      : w(full({4}, 1.0, {.device = d}).requires_grad_()), opt({w}, {.lr = 0.5}), scaler(o) {}
  void run(double grad_value) {
    (void)scaler.scale(full({}, 2.5, {.device = w.device()}));
    w.set_grad(full({4}, grad_value, {.device = w.device()}));
    (void)scaler.step(opt);
    scaler.update();
  }
};

}  // namespace

TEST_CASE("GradScaler on a device: the floor check waits for the next read, on the CPU update() throws") {
  require_fake_device();
  const amp::GradScalerOptions o{.init_scale = 1.0, .min_scale = 1.0, .max_skips_at_floor = 3};
  Rig dev(Device::cuda(0), o);
  dev.scaler.set_parameter_names({{"encoder.weight", dev.w}});
  cuda::HostSyncCounter c;
  for (int i = 0; i < 4; ++i) dev.run(kInf);  // past the limit: no read, no throw
  CHECK(c.count() == 0);
  try {
    (void)dev.scaler.get_scale();
    FAIL("get_scale() did not report the skips at the floor");
  } catch (const StateError& e) {
    const std::string m = e.what();
    CHECK(m.find("floor") != std::string::npos);
    CHECK(m.find("encoder.weight (4)") != std::string::npos);
  }
  Rig cpu(Device::cpu(), o);
  CHECK_THROWS_AS([&] { for (int i = 0; i < 4; ++i) cpu.run(kInf); }(), StateError);
}

TEST_CASE("GradScaler: 70 updates fold the overflow backlog on the device and still name the overflow") {
  require_fake_device();
  for (Device d : {Device::cpu(), Device::cuda(0)}) {
    INFO(d.str());
    Rig rig(d, {.max_skips_at_floor = 0});
    rig.scaler.set_parameter_names({{"fc.weight", rig.w}});
    cuda::HostSyncCounter c;
    for (int i = 0; i < 70; ++i) rig.run(i == 5 ? kInf : 0.5);  // one overflow, long before the last read
    CHECK(c.count() == 0);
    const auto offenders = rig.scaler.last_overflow();
    REQUIRE(offenders.size() == 1);
    CHECK(offenders[0].first == "fc.weight");
    CHECK(offenders[0].second == 4);
  }
}

TEST_CASE("GradScaler resumed as PyTorch resumes (load, then scale a GPU loss) moves its state there") {
  require_fake_device();
  const Device dev = Device::cuda(0);
  amp::GradScaler trained({.init_scale = 1024.0, .growth_interval = 3});
  const Tensor w = ones({4}).requires_grad_();
  optim::SGD opt({w}, {.lr = 0.1});
  for (int i = 0; i < 4; ++i) {  // on the CPU: the scale grows once
    trained.scale(sum(mul(w, 2.0))).backward();
    (void)trained.step(opt);
    trained.update();
    opt.zero_grad();
  }
  const StateDict saved = trained.state_dict();
  // The resume: a fresh scaler, the checkpoint, then the model's loss on the GPU. It used to throw
  // "on another device than the scaler's state (cpu)".
  amp::GradScaler resumed;
  resumed.load_state_dict(saved);
  const Tensor wd = ones({4}, {.device = dev}).requires_grad_();
  optim::SGD opt_d({wd}, {.lr = 0.1});
  const Tensor scaled = resumed.scale(sum(mul(wd, 2.0)));
  CHECK(scaled.device() == dev);
  CHECK(resumed.scale_tensor().device() == dev);
  CHECK(resumed.get_scale() == trained.get_scale());
  scaled.backward();
  (void)resumed.step(opt_d);
  resumed.update();
  // Once placed, the scaler serves that device only; the error says how to choose it.
  try {
    (void)resumed.scale(sum(w));
    FAIL("a CPU loss was accepted by a scaler on cuda:0");
  } catch (const DeviceError& e) {
    CHECK(std::string(e.what()).find("GradScalerOptions::device") != std::string::npos);
  }
}
