// Capturable optimizers (lr and momentum read from device memory by the step kernels) and
// schedules on the device (LRScheduler::to_device / step_on_device), on the CPU, whose kernels read
// the same tensors: the steps equal the host-lr steps bit for bit, the kernels really read the
// device copy, and a schedule counted on the device from skip flags equals the host schedule
// stepped with step(applied). Capture-specific refusals: tests/fake_cuda/graph_test.cpp.
#include <catch2/catch.hpp>

#include <functional>
#include <memory>
#include <vector>

#include "optim/adam.h"
#include "optim/lr_scheduler.h"
#include "optim/sgd.h"
#include "core/rng.h"
#include "tensor/factory.h"
#include "tests/support/tensor_testing.h"

using namespace precis;
using namespace precis::optim;

namespace {

/// Two parameters (an f32 one and a bf16 one with an fp32 master) with fixed seeded values.
std::vector<Tensor> make_params() {
  return {randn({7, 5}, {}).requires_grad_(), randn({33}, {}).to(DType::bf16).requires_grad_()};
}

std::vector<Tensor> clones(const std::vector<Tensor>& ps) {
  std::vector<Tensor> out;
  for (const Tensor& p : ps) out.push_back(p.detach().clone().requires_grad_());
  return out;
}

/// Gives both parameter lists the same gradients, drawn fresh for step k.
void set_grads(const std::vector<Tensor>& a, const std::vector<Tensor>& b, int k) {
  manual_seed(1000 + k);
  for (size_t i = 0; i < a.size(); ++i) {
    const Tensor g = randn(a[i].sizes(), {}).to(a[i].dtype());
    a[i].set_grad(g.clone());
    b[i].set_grad(g.clone());
  }
}

void require_same_bits(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
  for (size_t i = 0; i < a.size(); ++i) {
    INFO("parameter " << i << " " << a[i].describe());
    PRECIS_REQUIRE_SAME_BITS(a[i].detach(), b[i].detach());
  }
}

using MakeOpt = std::function<std::unique_ptr<Optimizer>(std::vector<Tensor>)>;

const std::vector<std::pair<const char*, MakeOpt>>& optimizers() {
  static const std::vector<std::pair<const char*, MakeOpt>> v = {
      {"SGD nesterov", [](std::vector<Tensor> p) -> std::unique_ptr<Optimizer> {
         return std::make_unique<SGD>(std::move(p), SGDOptions{.lr = 0.05, .momentum = 0.9, .weight_decay = 1e-3,
                                                               .nesterov = true});
       }},
      {"Adam amsgrad", [](std::vector<Tensor> p) -> std::unique_ptr<Optimizer> {
         return std::make_unique<Adam>(std::move(p), AdamOptions{.lr = 1e-2, .weight_decay = 1e-2, .amsgrad = true});
       }},
      {"AdamW", [](std::vector<Tensor> p) -> std::unique_ptr<Optimizer> {
         return std::make_unique<AdamW>(std::move(p), AdamWOptions{.lr = 1e-2});
       }},
  };
  return v;
}

}  // namespace

TEST_CASE("a capturable optimizer steps as the host-lr one, bit for bit, and reads its lr from the device tensor",
          "[optim][capturable]") {
  for (const auto& [name, make] : optimizers()) {
    INFO(name);
    manual_seed(3);
    const std::vector<Tensor> host_params = make_params(), dev_params = clones(host_params);
    auto host = make(host_params);
    auto dev = make(dev_params);
    CHECK_FALSE(dev->capturable());
    CHECK_FALSE(dev->scheduled(0).defined());
    dev->set_capturable(true);
    REQUIRE(dev->capturable());
    const Tensor sched = dev->scheduled(0);
    REQUIRE(sched.defined());
    CHECK(sched.dtype() == DType::f64);
    CHECK(sched.to_vector<double>() == std::vector<double>{dev->group_lr(0), dev->group_momentum(0)});
    for (int k = 0; k < 6; ++k) {
      const double lr = 0.02 * (k + 1), momentum = 0.5 + 0.05 * k;
      host->set_lr(lr);
      host->set_group_momentum(0, momentum);
      if (k % 2 == 0) {  // through the optimizer's setters
        dev->set_lr(lr);
        dev->set_group_momentum(0, momentum);
      } else {  // only the device copy: the host options keep stale values, the kernels must not use them
        sched.narrow(0, 0, 1).fill_(lr);
        sched.narrow(0, 1, 1).fill_(momentum);
      }
      set_grads(host_params, dev_params, k);
      host->step();
      dev->step();
      require_same_bits(host_params, dev_params);
    }
    // Turning the mode off drops the device copy; the steps use the host options again.
    dev->set_capturable(false);
    CHECK_FALSE(dev->scheduled(0).defined());
  }
}

TEST_CASE("a schedule counted on the device equals the host schedule stepped with step(applied)",
          "[optim][capturable][scheduler]") {
  // Skipped steps (skip flag nonzero) do not advance either schedule; OneCycleLR also drives the
  // momentum. The optimizers step with the same found_inf, so the parameters must agree bit for bit.
  const std::vector<float> skips = {0, 1, 0, 0, 1, 1, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0};
  using MakeSched = std::function<std::unique_ptr<LRScheduler>(Optimizer&)>;
  const std::vector<std::pair<const char*, MakeSched>> schedules = {
      {"OneCycleLR", [](Optimizer& o) -> std::unique_ptr<LRScheduler> {
         return std::make_unique<OneCycleLR>(o, OneCycleLROptions{.max_lr = 0.1, .total_steps = 12});
       }},
      {"WarmupDecayLR", [](Optimizer& o) -> std::unique_ptr<LRScheduler> {
         return std::make_unique<WarmupDecayLR>(o, WarmupDecayLROptions{.warmup_steps = 3, .total_steps = 12});
       }},
      {"MultiStepLR", [](Optimizer& o) -> std::unique_ptr<LRScheduler> {
         return std::make_unique<MultiStepLR>(o, MultiStepLROptions{.milestones = {2, 5}, .gamma = 0.5});
       }},
  };
  for (const auto& [opt_name, make] : optimizers()) {
    for (const auto& [sched_name, make_sched] : schedules) {
      INFO(opt_name << " with " << sched_name);
      manual_seed(4);
      const std::vector<Tensor> host_params = make_params(), dev_params = clones(host_params);
      auto host = make(host_params);
      auto dev = make(dev_params);
      dev->set_capturable(true);
      auto host_sched = make_sched(*host);
      auto dev_sched = make_sched(*dev);
      dev_sched->to_device(12);  // the count reaches 12 at most: 16 steps, 4 of them skipped
      CHECK(dev_sched->on_device());
      for (size_t k = 0; k < skips.size(); ++k) {
        INFO("step " << k);
        set_grads(host_params, dev_params, static_cast<int>(k));
        const Tensor skip = full({}, skips[k]);
        host->step({.found_inf = skip});
        dev->step({.found_inf = skip});
        require_same_bits(host_params, dev_params);
        host_sched->step(skips[k] == 0.0f);
        dev_sched->step_on_device(skip);
      }
      // The host-side views read the device count.
      CHECK(dev_sched->last_step() == host_sched->last_step());
      CHECK(dev_sched->get_last_lr() == host_sched->get_last_lr());
      const StateDict a = host_sched->state_dict(), b = dev_sched->state_dict();
      CHECK(a.at("last_step").item<int64_t>() == b.at("last_step").item<int64_t>());
    }
  }
}

TEST_CASE("a schedule on the device: host steps, loads, the horizon, and refusals", "[optim][capturable][scheduler]") {
  const Tensor w = zeros({3}).requires_grad_();
  SGD opt({w}, {.lr = 0.1, .momentum = 0.9});
  StepLR sched(opt, {.step_size = 2, .gamma = 0.5});
  // Not capturable: the optimizer would not read the device lrs.
  PRECIS_REQUIRE_THROWS_WITH_ALL(sched.to_device(10), StateError, "StepLR.to_device", "set_capturable(true)");
  PRECIS_REQUIRE_THROWS_WITH_ALL(sched.step_on_device(), StateError, "StepLR.step_on_device", "to_device");
  opt.set_capturable(true);
  sched.step();
  sched.step();
  sched.step();  // count 3
  PRECIS_REQUIRE_THROWS_WITH_ALL(sched.to_device(2), ValueError, "horizon 2", "current step 3");
  sched.to_device(6);
  sched.step_on_device();      // 4 on the device
  sched.step();                // host step: reads 4, counts 5, writes it back
  CHECK(sched.last_step() == 5);
  sched.step_on_device(full({}, 0.0f));  // 6
  sched.step_on_device(full({}, 1.0f));  // skipped
  sched.step_on_device();                // 7: past the horizon, the lr of count 6 stays
  CHECK(sched.last_step() == 7);
  CHECK(opt.scheduled(0).to_vector<double>()[0] == 0.1 * 0.5 * 0.5 * 0.5);
  CHECK(opt.scheduled(0).to_vector<double>()[1] == 0.9);  // a momentum StepLR does not drive stays
  // The host option is the last one set on the host; the state dict saves the live one.
  CHECK(opt.group_lr(0) == 0.1 * 0.5 * 0.5);
  CHECK(opt.state_dict().at("param_groups.0.lr").item<double>() == 0.1 * 0.5 * 0.5 * 0.5);
  PRECIS_REQUIRE_THROWS_WITH_ALL(sched.step_on_device(full({}, 0.0, {.dtype = DType::f64})), DTypeError, "skip", "f64");
  // A load sets the count on the device and tabulates the loaded base lrs.
  StateDict d = sched.state_dict();
  d["last_step"] = state_int(1);
  d["base_lrs"] = from_vector<double>({0.4});
  sched.load_state_dict(d);
  CHECK(sched.last_step() == 1);
  sched.step_on_device();  // 2
  CHECK(opt.scheduled(0).to_vector<double>()[0] == 0.4 * 0.5);
  CHECK(sched.get_last_lr() == std::vector<double>{0.4 * 0.5});
}

TEST_CASE("loads and set_capturable keep the tensors a captured step reads", "[optim][capturable][scheduler]") {
  // A step captured in a CUDA graph reads and writes the optimizer state, the device lrs and the
  // schedule's count and tables it had at the capture: a later load or set_capturable(true) must
  // write those tensors, not replace them (the replays would use freed memory).
  for (const auto& [name, make] : optimizers()) {
    INFO(name);
    const std::vector<Tensor> ps = make_params();
    std::unique_ptr<Optimizer> opt = make(ps);
    opt->set_capturable(true);
    CosineAnnealingLR sched(*opt, {.T_max = 8});
    sched.to_device(8);
    set_grads(ps, clones(ps), 0);
    opt->step();
    sched.step_on_device();
    const StateDict saved_opt = opt->state_dict();
    const StateDict saved_sched = sched.state_dict();
    for (int k = 1; k < 3; ++k) {
      set_grads(ps, clones(ps), k);
      opt->step();
      sched.step_on_device();
    }
    const std::vector<std::string> keys = {"step", "master", "momentum_buffer", "exp_avg", "exp_avg_sq",
                                           "max_exp_avg_sq"};
    std::vector<const void*> live;
    for (const Tensor& p : ps)
      for (const std::string& key : keys)
        live.push_back(opt->state(p, key).defined() ? opt->state(p, key).data_ptr() : nullptr);
    const void* lrs = opt->scheduled(0).data_ptr();
    const void* count = sched.device_step().data_ptr();

    opt->load_state_dict(saved_opt);
    opt->set_capturable(true);
    sched.load_state_dict(saved_sched);
    size_t i = 0;
    for (const Tensor& p : ps)
      for (const std::string& key : keys) {
        INFO(key);
        CHECK((opt->state(p, key).defined() ? opt->state(p, key).data_ptr() : nullptr) == live[i++]);
      }
    CHECK(opt->scheduled(0).data_ptr() == lrs);
    CHECK(sched.device_step().data_ptr() == count);
    // ... holding the loaded values.
    const StateDict now = opt->state_dict();
    for (const auto& [key, t] : saved_opt) {
      INFO(key);
      PRECIS_REQUIRE_SAME_BITS(now.at(key), t);
    }
    CHECK(sched.last_step() == 1);
  }
}
