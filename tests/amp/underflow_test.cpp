// The case the loss scaler exists for, measured: a small network trained in f16 whose true
// gradients (~1e-8) lie below the smallest f16 subnormal (6e-8). Without scaling they round to
// exactly zero and the loss stalls at its initial value; with amp::GradScaler the network trains
// like its fp32 twin. Both master-weight modes are run: the low-precision model mode (f16
// parameters, fp32 masters in the optimizer) and autocast f16 (fp32 parameters).
//
// Set PRECIS_AMP_REPORT=1 to print the loss curves and zero-gradient fractions.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "amp/autocast.h"
#include "amp/grad_scaler.h"
#include "autograd/grad_mode.h"
#include "ops/functional.h"
#include "optim/adam.h"
#include "tensor/factory.h"

namespace precis::amp {
namespace {

// A loss weighted this far down (an auxiliary loss, or a sum over few terms divided by a large
// count) gives output gradients of about 2·|error|/N · 1e-6 ≈ 1e-8: below f16's smallest
// subnormal, while their ratios (all Adam sees) are ordinary.
constexpr double kLossWeight = 1e-6;
constexpr int kSteps = 150;
constexpr int64_t kBatch = 256, kIn = 16, kHidden = 64;

enum class Mode { fp32, f16_model, autocast_f16 };

struct Run {
  std::vector<double> losses;      // unweighted MSE per step
  double zero_fraction_first = 0;  // exactly-zero gradient elements at step 0
  double zero_fraction_mean = 0;   // ... averaged over the run
  int64_t skipped = 0;
};

struct Problem {
  Tensor x, y;
  Tensor w1, b1, w2, b2;  // fp32 initial values shared by every run
  Problem() {
    Generator gen(7);
    x = randn({kBatch, kIn}, {}, &gen);
    Tensor w_true = randn({kIn, 1}, {}, &gen) * 0.5;
    y = tanh(matmul(x, w_true)) + 0.3 * sin_like(x);
    const double a1 = 1.0 / std::sqrt(static_cast<double>(kIn)), a2 = 1.0 / std::sqrt(static_cast<double>(kHidden));
    w1 = (rand({kHidden, kIn}, {}, &gen) * 2.0 - 1.0) * a1;
    b1 = (rand({kHidden}, {}, &gen) * 2.0 - 1.0) * a1;
    w2 = (rand({1, kHidden}, {}, &gen) * 2.0 - 1.0) * a2;
    b2 = (rand({1}, {}, &gen) * 2.0 - 1.0) * a2;
  }
  // A smooth nonlinear term the model has to learn (x0·x1 squashed).
  static Tensor sin_like(const Tensor& x) { return tanh(x.slice(1, 0, 1) * x.slice(1, 1, 2)); }
};

double zero_fraction(const std::vector<Tensor>& params) {
  NoGradGuard g;
  double zeros_count = 0, total = 0;
  for (const Tensor& p : params) {
    Tensor grad = p.grad();
    REQUIRE(grad.defined());
    zeros_count += sum(eq(grad, 0.0).to(DType::f32)).item<double>();
    total += static_cast<double>(grad.numel());
  }
  return zeros_count / total;
}

// use_scaler: dynamic loss scaling; explicit_unscale: unscale_ + clip_grad_norm_ before step
// (else step() checks read-only and the optimizer unscales in its fp32 update).
Run train(const Problem& pb, Mode mode, bool use_scaler, bool explicit_unscale = false) {
  const DType param_dtype = mode == Mode::f16_model ? DType::f16 : DType::f32;
  std::vector<Tensor> params;
  for (const Tensor& init : {pb.w1, pb.b1, pb.w2, pb.b2}) params.push_back(init.to(param_dtype).clone().requires_grad_());
  optim::Adam opt(params, {.lr = 1e-2});
  GradScaler scaler({.enabled = use_scaler});
  Run run;
  for (int step = 0; step < kSteps; ++step) {
    opt.zero_grad();
    Tensor loss;
    {
      Autocast ac(DType::f16, DeviceType::cpu, /*enabled=*/mode == Mode::autocast_f16);
      Tensor x = pb.x.to(param_dtype);
      Tensor h = tanh(linear(x, params[0], params[1]));
      Tensor out = linear(h, params[2], params[3]).to(DType::f32);
      loss = mse_loss(out, pb.y) * kLossWeight;
    }
    run.losses.push_back(loss.item<double>() / kLossWeight);
    scaler.scale(loss).backward();
    const double zf = zero_fraction(params);
    if (step == 0) run.zero_fraction_first = zf;
    run.zero_fraction_mean += zf / kSteps;
    if (explicit_unscale) {
      scaler.unscale_(opt);
      scaler.clip_grad_norm_(opt, 1.0);  // far above the true norm: only exercises the path
    }
    const StepResult r = scaler.step(opt);
    run.skipped += !r.applied();
    scaler.update();
  }
  return run;
}

void report(const char* name, const Run& r) {
  if (std::getenv("PRECIS_AMP_REPORT") == nullptr) return;
  std::printf("%-34s zero grads: step 0 %5.1f%%, mean %5.1f%%  skipped %2lld  loss:", name,
              100 * r.zero_fraction_first, 100 * r.zero_fraction_mean, static_cast<long long>(r.skipped));
  for (int s : {0, 10, 25, 50, 100, kSteps - 1}) std::printf(" [%d] %.4f", s, r.losses[s]);
  std::printf("\n");
}

TEST_CASE("f16 gradients below the subnormal range vanish without the scaler and train with it",
          "[amp][scaler][underflow]") {
  const Problem pb;
  const Run fp32 = train(pb, Mode::fp32, false);
  report("fp32", fp32);
  const double initial = fp32.losses.front(), target = fp32.losses.back();
  // The fp32 twin learns (the problem is not degenerate).
  REQUIRE(target < 0.5 * initial);
  REQUIRE(fp32.zero_fraction_mean < 0.01);

  struct Variant {
    const char* name;
    Mode mode;
    bool explicit_unscale;
  };
  for (const Variant v : {Variant{"f16 model mode (fp32 masters)", Mode::f16_model, false},
                          Variant{"f16 model mode, unscale_ + clip", Mode::f16_model, true},
                          Variant{"autocast f16", Mode::autocast_f16, false},
                          Variant{"autocast f16, unscale_ + clip", Mode::autocast_f16, true}}) {
    INFO(v.name);
    const Run plain = train(pb, v.mode, /*use_scaler=*/false, v.explicit_unscale);
    const Run scaled = train(pb, v.mode, /*use_scaler=*/true, v.explicit_unscale);
    report((std::string(v.name) + ", no scaler").c_str(), plain);
    report((std::string(v.name) + ", GradScaler").c_str(), scaled);
    // Without scaling every gradient rounds to exactly zero and nothing moves.
    CHECK(plain.zero_fraction_first > 0.9);
    CHECK(plain.zero_fraction_mean > 0.9);
    CHECK(std::abs(plain.losses.back() - initial) < 0.02 * initial);
    // With the scaler: the gradients survive, no step is skipped, the loss follows fp32's.
    CHECK(scaled.zero_fraction_first < 0.1);
    CHECK(scaled.zero_fraction_mean < 0.1);
    CHECK(scaled.skipped == 0);
    CHECK(scaled.losses.back() < 0.5 * initial);
    CHECK(std::abs(scaled.losses.back() - target) < 0.1 * target);
    for (int s : {10, 25, 50, 100}) CHECK(std::abs(scaled.losses[s] - fp32.losses[s]) < 0.1 * fp32.losses[s]);
  }
}

}  // namespace
}  // namespace precis::amp
