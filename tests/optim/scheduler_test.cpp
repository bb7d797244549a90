// LR schedulers against PyTorch (tests/golden/gen_optim_fixtures.py: 100 steps each, base lr
// 0.1), and holding on skipped steps.
#include <catch2/catch.hpp>

#include <cmath>
#include <functional>
#include <memory>

#include "optim/adam.h"
#include "optim/lr_scheduler.h"
#include "optim/sgd.h"
#include "regression_problem.h"
#include "tests/support/tensor_testing.h"
#include "tensor/factory.h"

using namespace precis;
using namespace precis::optim;

namespace {

const SafetensorsFile& fixtures() {
  static const SafetensorsFile f = load_safetensors(testing::golden_path("lr_schedules.safetensors"));
  return f;
}

Tensor param() { return zeros({1}).requires_grad_(); }

void require_close(double got, double want, const std::string& what) {
  INFO(what << ": got " << got << " want " << want);
  REQUIRE(std::abs(got - want) <= 1e-12 + 1e-10 * std::abs(want));
}

/// Compares the scheduler's lr (and optionally the optimizer's momentum) with the fixture for
/// 100 steps, stepping the scheduler after each.
void check_schedule(const std::string& name, Optimizer& opt, LRScheduler& sched, bool momentum = false) {
  const auto lrs = fixtures().get(name + ".lr").to_vector<double>();
  std::vector<double> moms;
  if (momentum) moms = fixtures().get(name + ".momentum").to_vector<double>();
  REQUIRE(lrs.size() == 100);
  for (size_t i = 0; i < lrs.size(); ++i) {
    require_close(sched.get_last_lr()[0], lrs[i], name + " lr at step " + std::to_string(i));
    require_close(opt.group_lr(0), lrs[i], name + " optimizer lr at step " + std::to_string(i));
    if (momentum) require_close(opt.group_momentum(0), moms[i], name + " momentum at step " + std::to_string(i));
    if (i + 1 < lrs.size()) sched.step();
  }
  CHECK(sched.last_step() == 99);
}

}  // namespace

TEST_CASE("StepLR, MultiStepLR and CosineAnnealingLR match PyTorch", "[optim][scheduler][golden]") {
  {
    SGD opt({param()}, {.lr = 0.1});
    StepLR s(opt, {.step_size = 7, .gamma = 0.5});
    check_schedule("step_lr", opt, s);
  }
  {
    SGD opt({param()}, {.lr = 0.1});
    MultiStepLR s(opt, {.milestones = {25, 10, 60}, .gamma = 0.3});
    check_schedule("multistep_lr", opt, s);
  }
  {
    SGD opt({param()}, {.lr = 0.1});
    CosineAnnealingLR s(opt, {.T_max = 40, .eta_min = 0.001});
    check_schedule("cosine_lr", opt, s);
  }
}

TEST_CASE("WarmupDecayLR matches the warmup/decay rule (PyTorch LambdaLR)", "[optim][scheduler][golden]") {
  {
    SGD opt({param()}, {.lr = 0.1});
    WarmupDecayLR s(opt, {.warmup_steps = 10, .total_steps = 80, .decay = Decay::Cosine, .min_lr = 0.005});
    check_schedule("warmup_cosine", opt, s);
  }
  {
    SGD opt({param()}, {.lr = 0.1});
    WarmupDecayLR s(opt, {.warmup_steps = 5, .total_steps = 100, .decay = Decay::Linear});
    check_schedule("warmup_linear", opt, s);
  }
}

TEST_CASE("OneCycleLR matches PyTorch, momentum included", "[optim][scheduler][golden]") {
  {
    SGD opt({param()}, {.lr = 0.1, .momentum = 0.9});
    OneCycleLR s(opt, {.max_lr = 0.1, .total_steps = 100});
    check_schedule("onecycle_sgd", opt, s, true);
  }
  {
    Adam opt({param()}, {.lr = 0.1});
    OneCycleLR s(opt, {.max_lr = 0.05, .total_steps = 100, .pct_start = 0.25, .anneal_strategy = Anneal::Linear,
                       .div_factor = 10.0, .final_div_factor = 100.0});
    check_schedule("onecycle_adam_linear", opt, s, true);
    CHECK(opt.options(0).betas.second == 0.999);
    s.step();  // step 100 == total_steps is the last allowed; it holds the final lr
    CHECK(opt.group_lr(0) == Approx(0.05 / 10 / 100));
    PRECIS_REQUIRE_THROWS_WITH_ALL(s.step(), StateError, "OneCycleLR", "total_steps is 100");
    CHECK(s.last_step() == 100);
  }
}

TEST_CASE("schedulers hold on skipped steps and round-trip their state", "[optim][scheduler]") {
  SGD opt({param()}, {.lr = 0.1});
  WarmupDecayLR s(opt, {.warmup_steps = 4, .total_steps = 20});
  CHECK(s.get_last_lr()[0] == 0.0);
  s.step();
  const double lr1 = s.get_last_lr()[0];
  CHECK(lr1 == Approx(0.025));
  for (int i = 0; i < 5; ++i) s.step(false);
  CHECK(s.last_step() == 1);
  CHECK(s.get_last_lr()[0] == lr1);
  CHECK(opt.group_lr(0) == lr1);
  s.step();
  s.step();
  const StateDict saved = s.state_dict();
  const double lr3 = s.get_last_lr()[0];
  s.step();
  SGD opt2({param()}, {.lr = 0.1});
  WarmupDecayLR s2(opt2, {.warmup_steps = 4, .total_steps = 20});
  s2.load_state_dict(saved);
  CHECK(s2.last_step() == 3);
  CHECK(s2.get_last_lr()[0] == lr3);
  CHECK(opt2.group_lr(0) == lr3);
  s2.step();
  CHECK(s2.get_last_lr()[0] == s.get_last_lr()[0]);
}

TEST_CASE("schedulers apply per-group base lrs, and bad options are rejected", "[optim][scheduler]") {
  SGD opt(std::vector<ParamGroup<SGDOptions>>{{{param()}, SGDOptions{.lr = 0.1}}, {{param()}, SGDOptions{.lr = 0.01}}});
  StepLR s(opt, {.step_size = 2, .gamma = 0.5});
  s.step();
  s.step();
  CHECK(opt.group_lr(0) == Approx(0.05));
  CHECK(opt.group_lr(1) == Approx(0.005));
  PRECIS_REQUIRE_THROWS_WITH_ALL(StepLR(opt, {.step_size = 0}), ValueError, "StepLR", "step_size");
  PRECIS_REQUIRE_THROWS_WITH_ALL(CosineAnnealingLR(opt, {.T_max = 0}), ValueError, "T_max");
  PRECIS_REQUIRE_THROWS_WITH_ALL(WarmupDecayLR(opt, {.warmup_steps = 10, .total_steps = 10}), ValueError,
                                 "warmup_steps", "total_steps");
  PRECIS_REQUIRE_THROWS_WITH_ALL(OneCycleLR(opt, {.max_lr = 0.1, .total_steps = 0}), ValueError, "total_steps");
}

TEST_CASE("LinearLR, ConstantLR, ExponentialLR, PolynomialLR and LambdaLR match PyTorch",
          "[optim][scheduler][golden]") {
  {
    SGD opt({param()}, {.lr = 0.1});
    LinearLR s(opt, {.start_factor = 0.25, .end_factor = 0.9, .total_iters = 30});
    check_schedule("linear_lr", opt, s);
  }
  {
    SGD opt({param()}, {.lr = 0.1});
    ConstantLR s(opt, {.factor = 0.5, .total_iters = 12});
    check_schedule("constant_lr", opt, s);
  }
  {
    SGD opt({param()}, {.lr = 0.1});
    ExponentialLR s(opt, {.gamma = 0.97});
    check_schedule("exponential_lr", opt, s);
  }
  {
    SGD opt({param()}, {.lr = 0.1});
    PolynomialLR s(opt, {.total_iters = 60, .power = 2.0});
    check_schedule("polynomial_lr", opt, s);
  }
  {
    SGD opt({param()}, {.lr = 0.1});
    LambdaLR s(opt, [](int64_t step) { return 1.0 / (1.0 + 0.1 * static_cast<double>(step)); });
    check_schedule("lambda_lr", opt, s);
  }
}

TEST_CASE("SequentialLR matches PyTorch: every child starts from the first child's base lrs",
          "[optim][scheduler][golden]") {
  {
    // The cosine's constructor sees the lr LinearLR set (0.01); its schedule must start from 0.1.
    SGD opt({param()}, {.lr = 0.1});
    auto warmup = std::make_shared<LinearLR>(opt, LinearLROptions{.start_factor = 0.1, .total_iters = 5});
    auto cosine = std::make_shared<CosineAnnealingLR>(opt, CosineAnnealingLROptions{.T_max = 95, .eta_min = 0.001});
    SequentialLR s(opt, {warmup, cosine}, {5});
    CHECK(s.base_lrs()[0] == 0.1);
    check_schedule("sequential_warmup_cosine", opt, s);
  }
  {
    SGD opt({param()}, {.lr = 0.1});
    SequentialLR s(opt,
                   {std::make_shared<ConstantLR>(opt, ConstantLROptions{.factor = 0.5, .total_iters = 10}),
                    std::make_shared<ExponentialLR>(opt, ExponentialLROptions{.gamma = 0.95}),
                    std::make_shared<StepLR>(opt, StepLROptions{.step_size = 10, .gamma = 0.5})},
                   {10, 40});
    check_schedule("sequential_three", opt, s);
    // Resumed: a new job's SequentialLR given the state continues the same schedule.
    SGD opt2({param()}, {.lr = 0.1});
    SequentialLR s2(opt2,
                    {std::make_shared<ConstantLR>(opt2, ConstantLROptions{.factor = 0.5, .total_iters = 10}),
                     std::make_shared<ExponentialLR>(opt2, ExponentialLROptions{.gamma = 0.95}),
                     std::make_shared<StepLR>(opt2, StepLROptions{.step_size = 10, .gamma = 0.5})},
                    {10, 40});
    s2.load_state_dict(s.state_dict());
    CHECK(s2.get_last_lr()[0] == s.get_last_lr()[0]);
  }
}

TEST_CASE("the factor schedulers and SequentialLR reject bad options", "[optim][scheduler]") {
  SGD opt({param()}, {.lr = 0.1});
  SGD other({param()}, {.lr = 0.1});
  PRECIS_REQUIRE_THROWS_WITH_ALL(LinearLR(opt, {.start_factor = 0.0}), ValueError, "LinearLR", "start_factor");
  PRECIS_REQUIRE_THROWS_WITH_ALL(LinearLR(opt, {.end_factor = 1.5}), ValueError, "end_factor");
  PRECIS_REQUIRE_THROWS_WITH_ALL(LinearLR(opt, {.total_iters = 0}), ValueError, "total_iters");
  PRECIS_REQUIRE_THROWS_WITH_ALL(ConstantLR(opt, {.factor = -0.5}), ValueError, "ConstantLR", "factor");
  PRECIS_REQUIRE_THROWS_WITH_ALL(ExponentialLR(opt, {}), ValueError, "ExponentialLR", "gamma");
  PRECIS_REQUIRE_THROWS_WITH_ALL(PolynomialLR(opt, {.power = -1.0}), ValueError, "PolynomialLR", "power");
  PRECIS_REQUIRE_THROWS_WITH_ALL(LambdaLR(opt, LambdaLR::Lambda()), ValueError, "LambdaLR", "empty");
  PRECIS_REQUIRE_THROWS_WITH_ALL(LambdaLR(opt, std::vector<LambdaLR::Lambda>{}), ValueError, "0 functions");
  auto a = std::make_shared<LinearLR>(opt);
  auto b = std::make_shared<ExponentialLR>(opt, ExponentialLROptions{.gamma = 0.9});
  PRECIS_REQUIRE_THROWS_WITH_ALL(SequentialLR(opt, {}, {}), ValueError, "SequentialLR", "no schedulers");
  PRECIS_REQUIRE_THROWS_WITH_ALL(SequentialLR(opt, {a, b}, {}), ValueError, "need 1 milestones");
  PRECIS_REQUIRE_THROWS_WITH_ALL(SequentialLR(opt, {a, b, a}, {5, 3}), ValueError, "milestone 1");
  PRECIS_REQUIRE_THROWS_WITH_ALL(SequentialLR(opt, {a, nullptr}, {5}), ValueError, "scheduler 1 is null");
  auto foreign = std::make_shared<StepLR>(other, StepLROptions{});
  PRECIS_REQUIRE_THROWS_WITH_ALL(SequentialLR(opt, {a, foreign}, {5}), ValueError, "another optimizer");
}
