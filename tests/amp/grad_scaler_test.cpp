// The loss scaler's state machine, driven by scripted sequences of finite / non-finite gradients
// and losses, and its misuse errors, accumulation, several optimizers and checkpointing.
#include <cmath>
#include <limits>

#include <catch2/catch.hpp>

#include "amp/grad_scaler.h"
#include "autograd/grad_mode.h"
#include "ops/functional.h"
#include "optim/clip_grad.h"
#include "optim/sgd.h"
#include "tensor/safetensors.h"
#include "tests/support/tensor_testing.h"

namespace precis::amp {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

struct Rig {
  Tensor w = from_vector<float>({1.0f, 2.0f, 3.0f, 4.0f}).requires_grad_();
  optim::SGD opt{{w}, {.lr = 0.5}};
  GradScaler scaler;
  explicit Rig(GradScalerOptions o = {}) : scaler(o) {}

  // One optimizer step: loss value `loss` (scaled through the scaler), gradient `grad_value` per
  // element, already multiplied by the current scale as a real backward would.
  StepResult run(double loss, double grad_value) {
    Tensor l = scalar_tensor(loss);
    Tensor scaled = scaler.scale(l);
    REQUIRE(scaled.dtype() == DType::f32);
    w.set_grad(full({4}, grad_value * scaler.get_scale()));
    StepResult r = scaler.step(opt);
    scaler.update();
    return r;
  }
};

TEST_CASE("defaults are PyTorch's plus hysteresis 1, floor 1 and cap 2^24", "[amp][scaler]") {
  GradScalerOptions o;
  CHECK(o.init_scale == 65536.0);
  CHECK(o.growth_factor == 2.0);
  CHECK(o.backoff_factor == 0.5);
  CHECK(o.growth_interval == 2000);
  CHECK(o.hysteresis == 1);
  CHECK(o.min_scale == 1.0);
  CHECK(o.max_scale == 16777216.0);
  GradScaler s;
  CHECK(s.get_scale() == 65536.0);
}

TEST_CASE("an overflow at step k skips that step and halves the scale, and clean steps apply", "[amp][scaler]") {
  Rig rig;
  StepResult r0 = rig.run(1.0, 0.25);
  CHECK(r0.applied());
  CHECK(rig.w.to_vector<float>() == std::vector<float>{0.875f, 1.875f, 2.875f, 3.875f});  // w - 0.5 * 0.25
  StepResult r1 = rig.run(1.0, kInf);
  CHECK_FALSE(r1.applied());
  CHECK(r1.reason() == SkipReason::overflow);
  CHECK(r1.scale_before() == 65536.0);
  CHECK(r1.scale_after() == 32768.0);
  CHECK(rig.w.to_vector<float>() == std::vector<float>{0.875f, 1.875f, 2.875f, 3.875f});  // untouched
  StepResult r2 = rig.run(1.0, 0.25);
  CHECK(r2.applied());
  CHECK(rig.scaler.get_scale() == 32768.0);
  CHECK(rig.scaler.skipped_steps() == 1);
}

// A step captured in a CUDA graph reads and writes the tensors the scaler held at capture: its
// state must be updated in place, or every replay would start from the capture's scale.
TEST_CASE("the scaler's state is updated in place: the scale tensor stays the same object", "[amp][scaler]") {
  Rig rig({.init_scale = 1024.0, .growth_interval = 2});
  CHECK_FALSE(rig.scaler.scale_tensor().defined());
  (void)rig.run(1.0, 0.25);
  const Tensor scale = rig.scaler.scale_tensor();
  REQUIRE(scale.defined());
  const void* storage = scale.data_ptr();
  StepResult clean = rig.run(1.0, 0.25);                 // the 2nd clean step: grows to 2048
  StepResult overflow = rig.run(1.0, kInf);              // backs off to 1024
  CHECK(rig.scaler.scale_tensor().data_ptr() == storage);
  CHECK(scale.item<double>() == 1024.0);
  CHECK(clean.scale_after() == 2048.0);                  // each result keeps its own value
  CHECK(overflow.scale_before() == 2048.0);
  CHECK(overflow.scale_after() == 1024.0);
  // A load writes into the same tensor too.
  const StateDict saved = rig.scaler.state_dict();
  (void)rig.run(1.0, kInf);
  CHECK(scale.item<double>() == 512.0);
  rig.scaler.load_state_dict(saved);
  CHECK(rig.scaler.scale_tensor().data_ptr() == storage);
  CHECK(scale.item<double>() == 1024.0);
}

TEST_CASE("GradScaler::clip_grad_norm_ takes the norms again when the gradients changed since unscale_",
          "[amp][scaler]") {
  // unscale_'s norms are reused while the gradients are as it left them; they used to be reused
  // after in-place changes too: a second clip reported the first norm and clipped again.
  for (DType dt : {DType::f32, DType::f16}) {  // f16: the gradients stay scaled in storage
    INFO(dtype_name(dt));
    Tensor w = ones({4}, {.dtype = dt}).requires_grad_();
    optim::SGD opt({w}, {.lr = 0.5});
    GradScaler scaler({.init_scale = 8.0});
    (void)scaler.scale(scalar_tensor(1.0));
    w.set_grad(full({4}, 4.0 * 8.0, {.dtype = dt}));  // unscaled: 4 each, a 2-norm of 8
    CHECK(scaler.clip_grad_norm_(opt, 1.0).item<double>() == Approx(8.0));
    CHECK(scaler.clip_grad_norm_(opt, 1.0).item<double>() == Approx(1.0).epsilon(1e-3));  // already clipped
    optim::clip_grad_value_({w}, dt == DType::f16 ? 0.25 * 8.0 : 0.25);  // in storage's units
    CHECK(scaler.clip_grad_norm_(opt, 1.0).item<double>() == Approx(0.5).epsilon(1e-3));
    const StepResult r = scaler.step(opt);
    scaler.update();
    CHECK(r.applied());
    CHECK(w.to(DType::f32).to_vector<float>() == std::vector<float>(4, 1.0f - 0.5f * 0.25f));
  }
}

TEST_CASE("load_state_dict refuses to drop an unscale_ whose step has not run", "[amp][scaler]") {
  // Loading used to forget that the gradients were unscaled in place, so step() unscaled them
  // again: the step applied with gradients 1/scale too small.
  Rig rig({.init_scale = 1024.0});
  const StateDict saved = rig.scaler.state_dict();
  (void)rig.scaler.scale(scalar_tensor(1.0));
  rig.w.set_grad(full({4}, 1024.0));
  rig.scaler.unscale_(rig.opt);
  PRECIS_REQUIRE_THROWS_WITH_ALL(rig.scaler.load_state_dict(saved), StateError, "load_state_dict", "unscale_",
                                 "between optimizer steps");
  (void)rig.scaler.step(rig.opt);  // still the step it was: gradients of 1
  rig.scaler.update();
  CHECK(rig.w.to_vector<float>() == std::vector<float>{0.5f, 1.5f, 2.5f, 3.5f});
  CHECK_NOTHROW(rig.scaler.load_state_dict(saved));  // between steps again
}

TEST_CASE("the scale grows after growth_interval clean steps, and an overflow resets the count", "[amp][scaler]") {
  Rig rig({.init_scale = 8.0, .growth_interval = 3});
  std::vector<double> scales;
  // clean, clean, overflow, clean, clean, clean, clean
  for (double g : {0.1, 0.1, kInf, 0.1, 0.1, 0.1, 0.1}) {
    rig.run(1.0, g);
    scales.push_back(rig.scaler.get_scale());
  }
  CHECK(scales == std::vector<double>{8, 8, 4, 4, 4, 8, 8});
}

TEST_CASE("growth and backoff by factors that are not powers of two round as PyTorch's", "[amp][scaler]") {
  // torch._amp_update_scale_ (2.15) multiplies the f32 scale by the double factor and rounds once;
  // the factor rounded to f32 first drifted by an ulp a step (0.734400094 for 0.734400034 here).
  Rig rig({.init_scale = 16.0, .growth_factor = 1.7, .backoff_factor = 0.3, .growth_interval = 2,
           .min_scale = 1e-3});
  std::vector<float> scales;
  for (double g : {kInf, kInf, 0.1, 0.1, kInf, kInf, 0.1, 0.1}) {
    rig.run(1.0, g);
    scales.push_back(static_cast<float>(rig.scaler.get_scale()));
  }
  CHECK(scales == std::vector<float>{4.800000190734863f, 1.440000057220459f, 1.440000057220459f, 2.448000192642212f,
                                     0.7344000339508057f, 0.22032001614570618f, 0.22032001614570618f,
                                     0.37454402446746826f});
  PRECIS_REQUIRE_THROWS_WITH_ALL(GradScaler({.growth_interval = (int64_t{1} << 24) + 1}), ValueError,
                                 "growth_interval", "2^24");
}

TEST_CASE("hysteresis tolerates overflows before backing off", "[amp][scaler]") {
  Rig rig({.init_scale = 64.0, .growth_interval = 100, .hysteresis = 2});
  std::vector<double> scales;
  std::vector<bool> applied;
  for (double g : {kInf, kInf, kInf, 0.1, kInf}) {
    applied.push_back(rig.run(1.0, g).applied());
    scales.push_back(rig.scaler.get_scale());
  }
  // Every overflow skips; the scale halves on the 2nd overflow, the hysteresis is restored, then
  // the 3rd overflow only spends it, and the 5th (after a clean step) halves again.
  CHECK(applied == std::vector<bool>{false, false, false, true, false});
  CHECK(scales == std::vector<double>{64, 32, 32, 32, 16});
}

TEST_CASE("the scale stays within its floor and cap", "[amp][scaler]") {
  Rig low({.init_scale = 2.0, .min_scale = 1.0, .max_skips_at_floor = 0});
  for (int i = 0; i < 4; ++i) low.run(1.0, kInf);
  CHECK(low.scaler.get_scale() == 1.0);
  Rig high({.init_scale = 4.0, .growth_interval = 1, .max_scale = 16.0});
  for (int i = 0; i < 5; ++i) high.run(1.0, 0.1);
  CHECK(high.scaler.get_scale() == 16.0);
}

TEST_CASE("a non-finite loss skips with its own reason and leaves the scale alone", "[amp][scaler]") {
  Rig rig({.init_scale = 16.0, .growth_interval = 2});
  rig.run(1.0, 0.1);  // growth count 1
  StepResult r = rig.run(kNaN, 0.1);
  CHECK_FALSE(r.applied());
  CHECK(r.reason() == SkipReason::non_finite_loss);
  CHECK(rig.scaler.get_scale() == 16.0);
  CHECK(rig.w.to_vector<float>()[0] == Approx(1.0f - 0.05f));
  // The growth count survived the skipped step: one more clean step grows the scale.
  rig.run(1.0, 0.1);
  CHECK(rig.scaler.get_scale() == 32.0);
  StepResult both = rig.run(kInf, kInf);
  CHECK(both.reason() == SkipReason::non_finite_loss);
  CHECK(rig.scaler.get_scale() == 32.0);
}

TEST_CASE("consecutive skips at the floor stop training with a diagnostic", "[amp][scaler]") {
  Rig rig({.init_scale = 1.0, .min_scale = 1.0, .max_skips_at_floor = 3});
  rig.scaler.set_parameter_names({{"encoder.weight", rig.w}});
  bool thrown = false;
  try {
    for (int i = 0; i < 10; ++i) rig.run(2.5, kInf);
  } catch (const StateError& e) {
    thrown = true;
    const std::string msg = e.what();
    CHECK(msg.find("floor") != std::string::npos);
    CHECK(msg.find("encoder.weight (4)") != std::string::npos);
    CHECK(msg.find("2.5") != std::string::npos);  // the recent losses
  }
  CHECK(thrown);
}

TEST_CASE("a run of skips at the floor that ends between two floor checks is still reported", "[amp][scaler]") {
  // Checks at updates 8, 16, 24, 32 (every min(20, 8)); the run is updates 6-31, 26 long: 19 at
  // the check of update 24, over by update 32, where the counter alone (0 again) showed nothing.
  Rig rig({.init_scale = 1.0, .min_scale = 1.0, .max_skips_at_floor = 20});
  for (int i = 0; i < 5; ++i) REQUIRE_NOTHROW(rig.run(1.0, 0.25));
  for (int i = 0; i < 18; ++i) REQUIRE_NOTHROW(rig.run(1.0, kInf));  // updates 6-23
  REQUIRE_NOTHROW(rig.run(1.0, kInf));                                // update 24: a check, 19 < 20
  for (int i = 0; i < 7; ++i) REQUIRE_NOTHROW(rig.run(1.0, kInf));   // updates 25-31
  PRECIS_REQUIRE_THROWS_WITH_ALL(rig.run(1.0, 0.25), StateError, "26 consecutive steps", "floor");  // 32
}

// check_floor() runs the check at once (what a loop replaying a captured step calls): update()
// alone checks every 8 updates, so after 10 skips at the floor with max_skips_at_floor 10 only
// check_floor() has seen them.
TEST_CASE("check_floor runs the floor check between update's own checks", "[amp][scaler]") {
  Rig rig({.init_scale = 1.0, .min_scale = 1.0, .max_skips_at_floor = 10});
  for (int i = 0; i < 10; ++i) REQUIRE_NOTHROW(rig.run(2.5, kInf));
  PRECIS_REQUIRE_THROWS_WITH_ALL(rig.scaler.check_floor(), StateError, "10 consecutive steps", "floor");
  GradScaler fresh;
  CHECK_NOTHROW(fresh.check_floor());  // nothing scaled yet
}

TEST_CASE("overflow attribution names the parameters with non-finite gradients", "[amp][scaler]") {
  Tensor a = zeros({3}).requires_grad_(), b = zeros({2}).requires_grad_();
  optim::SGD opt({a, b}, {.lr = 0.1});
  GradScaler scaler;
  scaler.set_parameter_names({{"fc1.weight", a}, {"fc2.bias", b}});
  scaler.scale(scalar_tensor(1.0));
  a.set_grad(from_vector<float>({1.0f, INFINITY, NAN}));
  b.set_grad(from_vector<float>({1.0f, INFINITY}));
  StepResult r = scaler.step(opt);
  CHECK(r.reason() == SkipReason::overflow);
  auto offenders = scaler.last_overflow();
  REQUIRE(offenders.size() == 2);
  CHECK(offenders[0] == std::pair<std::string, int64_t>{"fc1.weight", 2});
  CHECK(offenders[1] == std::pair<std::string, int64_t>{"fc2.bias", 1});
  scaler.update();
}

TEST_CASE("unscale_ is one fused pass: gradients, norms, and clipping reuses the norms", "[amp][scaler]") {
  Tensor w = zeros({4}).requires_grad_();
  optim::SGD opt({w}, {.lr = 1.0});
  GradScaler scaler({.init_scale = 1024.0});
  scaler.scale(scalar_tensor(1.0));
  w.set_grad(from_vector<float>({3.0f, 4.0f, 0.0f, 0.0f}) * 1024.0);
  scaler.unscale_(opt);
  CHECK(w.grad().to_vector<float>() == std::vector<float>{3.0f, 4.0f, 0.0f, 0.0f});
  scaler.unscale_(opt);  // idempotent within the step
  CHECK(w.grad().to_vector<float>() == std::vector<float>{3.0f, 4.0f, 0.0f, 0.0f});
  Tensor norm = scaler.clip_grad_norm_(opt, 1.0);
  CHECK(norm.item<double>() == Approx(5.0));
  CHECK(w.grad().to_vector<float>()[0] == Approx(0.6f).epsilon(1e-5));
  StepResult r = scaler.step(opt);
  REQUIRE(r.grad_norm().has_value());
  CHECK(*r.grad_norm() == Approx(5.0));
  scaler.update();
  CHECK(w.to_vector<float>()[0] == Approx(-0.6f).epsilon(1e-5));
}

TEST_CASE("unscale_ leaves f16 gradients scaled so values below the f16 subnormals survive", "[amp][scaler]") {
  // True gradients 3e-8 and 4e-8: unscaled into f16 they would round to 0 (or to the one
  // subnormal 6e-8). They must reach the fp32 master intact.
  Tensor w = zeros({4}, {.dtype = DType::f16}).requires_grad_();
  Tensor b = zeros({2}).requires_grad_();  // an fp32 parameter in the same optimizer (as BatchNorm's)
  optim::SGD opt({w, b}, {.lr = 1.0});
  GradScaler scaler({.init_scale = 65536.0});
  scaler.scale(scalar_tensor(1.0));
  w.set_grad((from_vector<float>({3e-8f, 4e-8f, 0.0f, 0.0f}) * 65536.0).to(DType::f16));
  b.set_grad(from_vector<float>({1e-8f, 0.0f}) * 65536.0);
  const std::vector<float> scaled_grad = w.grad().to(DType::f32).to_vector<float>();
  scaler.unscale_(opt);
  CHECK(w.grad().to(DType::f32).to_vector<float>() == scaled_grad);  // still scaled in storage
  Tensor norm = scaler.clip_grad_norm_(opt, 1e-8);                   // the norms are the unscaled ones
  CHECK(norm.item<double>() == Approx(std::sqrt(25e-16 + 1e-16)).epsilon(1e-3));
  StepResult r = scaler.step(opt);
  scaler.update();
  CHECK(r.applied());
  // clip factor 1e-8 / (|g| + 1e-6); master = 0 - lr · g · factor. The clipped, still scaled f16
  // gradients are f16 subnormals (~2e-5, steps of 6e-8): hence the 0.5% tolerance.
  const double factor = 1e-8 / (std::sqrt(26e-16) + 1e-6);
  const Tensor master = opt.state(w, "master");
  REQUIRE(master.defined());
  CHECK(master.to_vector<float>()[0] == Approx(-3e-8 * factor).epsilon(5e-3));
  CHECK(master.to_vector<float>()[1] == Approx(-4e-8 * factor).epsilon(5e-3));
  CHECK(b.to_vector<float>()[0] == Approx(-1e-8 * factor).epsilon(1e-3));
}

TEST_CASE("misuse errors explain the order of calls", "[amp][scaler]") {
  Rig rig;
  rig.scaler.scale(scalar_tensor(1.0));
  rig.w.set_grad(full({4}, 1.0));
  rig.scaler.step(rig.opt);
  PRECIS_REQUIRE_THROWS_WITH_ALL(rig.scaler.unscale_(rig.opt), StateError, "after step()", "The order");
  PRECIS_REQUIRE_THROWS_WITH_ALL(rig.scaler.step(rig.opt), StateError, "twice", "update()");
  rig.scaler.update();
  PRECIS_REQUIRE_THROWS_WITH_ALL(rig.scaler.update(), StateError, "without a step()");
  rig.scaler.scale(scalar_tensor(1.0));
  rig.scaler.unscale_(rig.opt);
  PRECIS_REQUIRE_THROWS_WITH_ALL(rig.scaler.scale(scalar_tensor(1.0)), StateError, "after unscale_",
                                 "last micro-batch");
}

TEST_CASE("gradient accumulation: scaled micro-losses add up, unscale once", "[amp][scaler]") {
  Tensor w = from_vector<float>({1.0f, -1.0f}).requires_grad_();
  optim::SGD opt({w}, {.lr = 0.1});
  GradScaler scaler({.init_scale = 256.0});
  Tensor x1 = from_vector<float>({1.0f, 2.0f}), x2 = from_vector<float>({3.0f, 5.0f});
  for (const Tensor& x : {x1, x2}) scaler.scale(sum(w * x) * 0.5).backward();  // loss averaged over 2
  scaler.unscale_(opt);
  CHECK(w.grad().to_vector<float>() == std::vector<float>{2.0f, 3.5f});
  CHECK(scaler.step(opt).applied());
  scaler.update();
}

TEST_CASE("several optimizers share one scaler and one update", "[amp][scaler]") {
  Tensor a = zeros({2}).requires_grad_(), b = zeros({2}).requires_grad_();
  optim::SGD oa({a}, {.lr = 1.0}), ob({b}, {.lr = 1.0});
  GradScaler scaler({.init_scale = 4.0});
  scaler.scale(scalar_tensor(1.0));
  a.set_grad(full({2}, 4.0));
  b.set_grad(full({2}, kInf));
  CHECK(scaler.step(oa).applied());
  CHECK_FALSE(scaler.step(ob).applied());
  scaler.update();
  CHECK(scaler.get_scale() == 2.0);  // one overflow anywhere backs off once
  CHECK(a.to_vector<float>() == std::vector<float>{-1.0f, -1.0f});
  CHECK(b.to_vector<float>() == std::vector<float>{0.0f, 0.0f});
}

TEST_CASE("a disabled scaler is a no-op: identical to training without it", "[amp][scaler]") {
  auto train = [](bool with_scaler) {
    Tensor w = from_vector<float>({0.5f, -0.25f}).requires_grad_();
    optim::SGD opt({w}, {.lr = 0.1, .momentum = 0.9});
    GradScaler scaler({.enabled = false});
    for (int i = 0; i < 5; ++i) {
      opt.zero_grad();
      Tensor loss = sum(w * w * (1.0 + i));
      if (with_scaler) {
        scaler.scale(loss).backward();
        scaler.unscale_(opt);
        CHECK(scaler.step(opt).applied());
        scaler.update();
      } else {
        loss.backward();
        opt.step();
      }
    }
    return w.to_vector<float>();
  };
  CHECK(train(true) == train(false));
  GradScaler off({.enabled = false});
  CHECK(off.state_dict().empty());
  CHECK(off.get_scale() == 1.0);
}

TEST_CASE("state_dict restores every field: a resumed run continues bit for bit", "[amp][scaler]") {
  const std::vector<double> grads = {0.1, kInf, 0.2, 0.3, kInf, kInf, 0.1, 0.2, 0.4, 0.1};
  GradScalerOptions o{.init_scale = 32.0, .growth_interval = 2, .hysteresis = 2};
  Rig full_run(o);
  std::vector<double> expected;
  for (double g : grads) {
    full_run.run(1.0, g);
    expected.push_back(full_run.scaler.get_scale());
  }
  Rig first(o);
  for (size_t i = 0; i < 5; ++i) first.run(1.0, grads[i]);
  // Round-trip scaler and optimizer state through safetensors bytes.
  StateDict saved = first.scaler.state_dict();
  std::vector<std::pair<std::string, Tensor>> named(saved.begin(), saved.end());
  SafetensorsFile file = from_safetensors_bytes(to_safetensors_bytes(named));
  StateDict loaded(file.tensors.begin(), file.tensors.end());
  Rig resumed(GradScalerOptions{});  // options come from the state dict
  {
    // A corrupt dict is refused whole: the options the constructor would reject, a non-finite scale.
    StateDict bad = loaded;
    bad["options.growth_factor"] = state_real(0.5);
    PRECIS_REQUIRE_THROWS_WITH_ALL(resumed.scaler.load_state_dict(bad), ValueError, "load_state_dict",
                                   "growth_factor must be > 1, got 0.5");
    bad = loaded;
    bad["scale"] = full({}, std::numeric_limits<double>::quiet_NaN());
    PRECIS_REQUIRE_THROWS_WITH_ALL(resumed.scaler.load_state_dict(bad), ValueError, "saved scale is nan");
    CHECK(resumed.scaler.options().growth_interval == GradScalerOptions{}.growth_interval);
    CHECK(resumed.scaler.get_scale() == GradScalerOptions{}.init_scale);
  }
  resumed.scaler.load_state_dict(loaded);
  resumed.opt.load_state_dict(first.opt.state_dict());
  {
    NoGradGuard g;
    resumed.w.copy_(first.w);
  }
  CHECK(resumed.scaler.history().size() == 5);
  std::vector<double> got(expected.begin(), expected.begin() + 5);
  for (size_t i = 5; i < grads.size(); ++i) {
    resumed.run(1.0, grads[i]);
    got.push_back(resumed.scaler.get_scale());
  }
  CHECK(got == expected);
  CHECK(resumed.w.to_vector<float>() == full_run.w.to_vector<float>());
  const auto h = resumed.scaler.history();
  REQUIRE(h.size() == grads.size());
  CHECK_FALSE(h[1].applied);
  CHECK(h[1].reason == SkipReason::overflow);
  CHECK(h[0].grad_norm == Approx(0.2));  // |(0.1, 0.1, 0.1, 0.1)|
}

TEST_CASE("last_overflow covers every optimizer of the round and survives clean steps", "[amp][scaler]") {
  Tensor a = zeros({3}).requires_grad_(), b = zeros({2}).requires_grad_();
  optim::SGD oa({a}, {.lr = 0.1}), ob({b}, {.lr = 0.1});
  GradScaler scaler({.init_scale = 4.0});
  scaler.set_parameter_names({{"first.weight", a}, {"second.bias", b}});
  CHECK(scaler.last_overflow().empty());  // nothing has overflowed yet
  auto clean_rounds = [&](int n) {
    for (int i = 0; i < n; ++i) {
      scaler.scale(scalar_tensor(1.0));
      a.set_grad(full({3}, 1.0));
      b.set_grad(full({2}, 1.0));
      scaler.step(oa);
      scaler.step(ob);
      scaler.update();
    }
  };
  // Only the first stepped optimizer overflows; the second's clean step must not hide it.
  scaler.scale(scalar_tensor(1.0));
  a.set_grad(from_vector<float>({INFINITY, 1.0f, NAN}));
  b.set_grad(full({2}, 1.0));
  CHECK_FALSE(scaler.step(oa).applied());
  CHECK(scaler.step(ob).applied());
  using Entry = std::pair<std::string, int64_t>;
  CHECK(scaler.last_overflow() == std::vector<Entry>{{"first.weight", 2}});  // between step() and update()
  scaler.update();
  CHECK(scaler.last_overflow() == std::vector<Entry>{{"first.weight", 2}});
  // Clean rounds afterwards keep the record of the last round that overflowed.
  clean_rounds(3);
  CHECK(scaler.last_overflow() == std::vector<Entry>{{"first.weight", 2}});
  // A later round where both overflow replaces it, largest count first across optimizers.
  scaler.scale(scalar_tensor(1.0));
  a.set_grad(from_vector<float>({INFINITY, 1.0f, 1.0f}));
  b.set_grad(full({2}, kInf));
  scaler.step(oa);
  scaler.step(ob);
  scaler.update();
  CHECK(scaler.last_overflow() == std::vector<Entry>{{"second.bias", 2}, {"first.weight", 1}});
  // Many clean rounds (past the internal backlog bound) still keep it.
  clean_rounds(70);
  CHECK(scaler.last_overflow() == std::vector<Entry>{{"second.bias", 2}, {"first.weight", 1}});
}

TEST_CASE("hysteresis refills after a back-off and at growth, not on a clean step alone", "[amp][scaler]") {
  // growth_interval 2, hysteresis 2 (the counter starts full, at 2):
  //   overflow (2 -> 1), clean, overflow (1 -> 0: back off to 32; the clean step did not refill),
  //   overflow (refilled at the back-off: 2 -> 1, no back-off), clean, clean (growth to 64, refill),
  //   overflow (2 -> 1: no back-off; without the growth refill it would back off here), overflow
  //   (back off to 32).
  Rig rig({.init_scale = 64.0, .growth_interval = 2, .hysteresis = 2});
  std::vector<double> scales;
  for (double g : {kInf, 0.1, kInf, kInf, 0.1, 0.1, kInf, kInf}) {
    rig.run(1.0, g);
    scales.push_back(rig.scaler.get_scale());
  }
  CHECK(scales == std::vector<double>{64, 64, 32, 32, 32, 64, 64, 32});
}

TEST_CASE("init_scale must lie within [min_scale, max_scale]", "[amp][scaler]") {
  PRECIS_REQUIRE_THROWS_WITH_ALL(GradScaler({.init_scale = 0.5, .min_scale = 1.0}), ValueError,
                                 "init_scale must lie within [min_scale, max_scale]", "init_scale 0.5");
  PRECIS_REQUIRE_THROWS_WITH_ALL(GradScaler({.init_scale = 1e9}), ValueError, "within [min_scale, max_scale]",
                                 "init_scale 1e+09", "max_scale 1.67772e+07");
  CHECK(GradScaler({.init_scale = 1.0, .min_scale = 1.0, .max_scale = 1.0}).get_scale() == 1.0);
}

}  // namespace
}  // namespace precis::amp
