// clip_grad_norm_ / clip_grad_value_ against references computed here in f64, and the gradient
// accumulation helper.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>

#include "optim/accumulation.h"
#include "ops/functional.h"
#include "optim/clip_grad.h"
#include "tensor/factory.h"
#include "tests/support/tensor_testing.h"

using namespace precis;
using namespace precis::optim;

namespace {

/// Parameters with seeded gradients of several dtypes and sizes (one non-contiguous, one without
/// a gradient); the grads' values are returned in f64.
struct Setup {
  std::vector<Tensor> params;
  std::vector<std::vector<double>> grads;  // empty for a parameter without grad
  explicit Setup(DType low = DType::f16) {
    const std::vector<std::pair<Shape, DType>> specs = {
        {{5, 7}, DType::f32}, {{20000}, DType::f32}, {{3}, DType::f64}, {{9, 4}, low}, {{6}, DType::f32}};
    for (size_t i = 0; i < specs.size(); ++i) {
      const auto& [shape, dtype] = specs[i];
      Tensor p = zeros(shape, {.dtype = dtype}).requires_grad_();
      std::vector<double> g;
      if (i != 4) {
        Tensor grad = testing::randn_input(shape, false, 10 + i, DType::f64).to(dtype);
        if (i == 0) grad = testing::non_contiguous(grad);
        p.set_grad(grad);
        g = grad.to(DType::f64).to_vector<double>();
      }
      params.push_back(p);
      grads.push_back(g);
    }
  }
  double norm(double p) const {
    double acc = 0;
    for (const auto& g : grads)
      for (double v : g) acc = std::isinf(p) ? std::max(acc, std::abs(v)) : acc + std::pow(std::abs(v), p);
    return std::isinf(p) ? acc : std::pow(acc, 1.0 / p);
  }
};

}  // namespace

TEST_CASE("clip_grad_norm_ computes 1-, 2-, 3- and inf-norms and scales when above max_norm", "[optim][clip]") {
  for (double p : {1.0, 2.0, 3.0, std::numeric_limits<double>::infinity()}) {
    Setup s;
    const double want = s.norm(p);
    const double max_norm = want / 4;
    const Tensor total = clip_grad_norm_(s.params, max_norm, p);
    INFO("p = " << p);
    CHECK(total.dim() == 0);
    CHECK(total.dtype() == DType::f32);
    CHECK(total.item<double>() == Approx(want).epsilon(1e-6));
    const float coef = static_cast<float>(max_norm) * (1.0f / (static_cast<float>(want) + 1e-6f));
    for (size_t i = 0; i < s.params.size(); ++i) {
      if (s.grads[i].empty()) continue;
      const auto got = s.params[i].grad().to(DType::f64).to_vector<double>();
      const double tol = s.params[i].dtype() == DType::f16 ? 2e-3 : 1e-6;
      for (size_t k = 0; k < got.size(); ++k) REQUIRE(got[k] == Approx(s.grads[i][k] * coef).epsilon(tol).margin(1e-6));
    }
    // Norm of the clipped gradients is max_norm.
    Setup again;
    clip_grad_norm_(again.params, max_norm, p);
    CHECK(clip_grad_norm_(again.params, 1e30, p).item<double>() == Approx(max_norm).epsilon(2e-3));
  }
}

TEST_CASE("clip_grad_norm_ of f64 gradients works in f64, as PyTorch: the total and the factor", "[optim][clip]") {
  // PyTorch 2.15: clip_grad_norm_ of the f64 gradient {3, 4 + 1e-12} to 1 returns the f64 total
  // 5.0000000000008 and leaves {0.599999879999928, 0.799999840000104} (f32 factor: 0.59999987483...).
  Tensor p = zeros({2}, {.dtype = DType::f64}).requires_grad_();
  p.set_grad(from_vector<double>({3.0, 4.0 + 1e-12}));
  const Tensor total = optim::clip_grad_norm_({p}, 1.0);
  REQUIRE(total.dtype() == DType::f64);
  CHECK(std::abs(total.item<double>() - 5.0000000000008) <= 1e-15);
  const std::vector<double> g = p.grad().to_vector<double>();
  CHECK(std::abs(g[0] - 0.599999879999928) <= 1e-15);
  CHECK(std::abs(g[1] - 0.799999840000104) <= 1e-15);
  // Beside an f32 gradient the total is f32, and each gradient keeps its own kind of factor.
  Tensor q = zeros({1}).requires_grad_();
  q.set_grad(from_vector<float>({0.0f}));
  p.set_grad(from_vector<double>({3.0, 4.0 + 1e-12}));
  CHECK(optim::clip_grad_norm_({p, q}, 1.0).dtype() == DType::f32);
  CHECK(std::abs(p.grad().to_vector<double>()[0] - 0.599999879999928) <= 1e-15);
}

TEST_CASE("clip_grad_norm_ leaves gradients below max_norm untouched", "[optim][clip]") {
  Setup s;
  const Tensor g0 = s.params[1].grad().clone();
  const double total = clip_grad_norm_(s.params, 1e9).item<double>();
  CHECK(total == Approx(s.norm(2)).epsilon(1e-6));
  CHECK(s.params[1].grad().to_vector<float>() == g0.to_vector<float>());
}

TEST_CASE("precomputed squared norms give the same clip as the full pass", "[optim][clip]") {
  Setup a, b;
  const std::vector<double> norms = grad_norms(a.params);
  std::vector<double> sq;
  for (double n : norms) sq.push_back(n * n);
  const double max_norm = a.norm(2) / 3;
  const Tensor ta = clip_grad_norm_(a.params, max_norm);
  const Tensor tb = clip_grad_norm_(b.params, max_norm, from_vector<double>(sq));
  CHECK(ta.item<float>() == Approx(tb.item<float>()).epsilon(1e-6));
  for (size_t i = 0; i < a.params.size(); ++i) {
    if (a.grads[i].empty()) continue;
    PRECIS_REQUIRE_CLOSE(b.params[i].grad().to(DType::f64), a.params[i].grad().to(DType::f64), DType::f32);
  }
  PRECIS_REQUIRE_THROWS_WITH_ALL(clip_grad_norm_(b.params, 1.0, std::vector<double>{1.0}), ShapeError,
                                 "1 precomputed squared norms for 5 parameters");
}

TEST_CASE("clip_grad_norm_ with non-finite gradients: untouched, or an error naming them", "[optim][clip]") {
  for (double bad : {std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity()}) {
    Setup s;
    Tensor g = s.params[3].grad();
    g.copy_(full(g.sizes(), bad));
    const auto before = s.params[1].grad().to_vector<float>();
    const double total = clip_grad_norm_(s.params, 1.0).item<double>();
    CHECK_FALSE(std::isfinite(total));
    CHECK(s.params[1].grad().to_vector<float>() == before);
    PRECIS_REQUIRE_THROWS_WITH_ALL(clip_grad_norm_(s.params, 1.0, 2.0, true), ValueError, "clip_grad_norm_",
                                   "parameter 3", "[9, 4] f16 cpu", "error_if_nonfinite");
  }
  // Finite gradients whose norm passes f32's range (f64 sums keep it finite): the factor is formed
  // in f32, where the norm is inf, so the gradients keep their bits as for an inf norm (they were
  // all zeroed). The error asks about the gradients, all finite here: none.
  {
    Tensor p = zeros({2}).requires_grad_();
    p.set_grad(full({2}, 3e38));
    const double total = clip_grad_norm_({p}, 1.0).item<double>();
    CHECK(std::isinf(total));
    CHECK(p.grad().to_vector<float>() == std::vector<float>{3e38f, 3e38f});
  }
  Setup s;
  PRECIS_REQUIRE_THROWS_WITH_ALL(clip_grad_norm_(s.params, 1.0, 0.0), ValueError, "norm_type");
  PRECIS_REQUIRE_THROWS_WITH_ALL(clip_grad_norm_(s.params, -1.0), ValueError, "max_norm");
  // No gradients at all: norm 0.
  CHECK(clip_grad_norm_({zeros({2}).requires_grad_()}, 1.0).item<float>() == 0.0f);
}

TEST_CASE("clip_grad_value_ clamps every element, NaN stays", "[optim][clip]") {
  Setup s(DType::bf16);
  Tensor g = s.params[2].grad();
  g.copy_(from_vector<double>({-3.0, std::numeric_limits<double>::quiet_NaN(), 0.25}));
  clip_grad_value_(s.params, 0.5);
  const auto v = g.to_vector<double>();
  CHECK(v[0] == -0.5);
  CHECK(std::isnan(v[1]));
  CHECK(v[2] == 0.25);
  for (size_t i = 0; i < s.params.size(); ++i) {
    if (s.grads[i].empty()) continue;
    for (double x : s.params[i].grad().to(DType::f64).to_vector<double>()) CHECK((std::isnan(x) || std::abs(x) <= 0.5));
  }
  PRECIS_REQUIRE_THROWS_WITH_ALL(clip_grad_value_(s.params, -1.0), ValueError, "clip_value");
}

TEST_CASE("GradAccumulator says when to step and averages through loss_scale", "[optim][accumulation]") {
  GradAccumulator acc(3);
  CHECK(acc.loss_scale() == Approx(1.0 / 3));
  std::vector<bool> steps;
  for (int i = 0; i < 7; ++i) {
    const bool last = acc.is_last_micro_step();
    const bool s = acc.micro_step();
    CHECK(last == s);
    steps.push_back(s);
  }
  CHECK(steps == std::vector<bool>{false, false, true, false, false, true, false});
  CHECK(acc.optimizer_steps() == 2);
  CHECK(acc.micro_steps_pending() == 1);
  const StateDict sd = acc.state_dict();
  GradAccumulator other(3);
  other.load_state_dict(sd);
  CHECK(other.micro_steps_pending() == 1);
  CHECK(other.optimizer_steps() == 2);
  CHECK_FALSE(other.micro_step());
  CHECK(other.micro_step());
  acc.reset();
  CHECK(acc.micro_steps_pending() == 0);
  GradAccumulator four(4);
  PRECIS_REQUIRE_THROWS_WITH_ALL(four.load_state_dict(sd), ValueError, "3 micro-batches", "4");
  PRECIS_REQUIRE_THROWS_WITH_ALL(GradAccumulator(0), ValueError, "steps must be >= 1");
  GradAccumulator one(1);
  CHECK(one.micro_step());
}

TEST_CASE("accumulated scaled micro-batch gradients equal the full-batch mean gradient", "[optim][accumulation]") {
  // loss = mean over the batch of (w·x)²/2 with grad w·mean(x²): 4 micro-batches of 2.
  const std::vector<double> xs = {0.5, -1.0, 2.0, 0.25, 1.5, -0.75, 1.0, 3.0};
  Tensor w = full({1}, 0.8, {.dtype = DType::f64}).requires_grad_();
  GradAccumulator acc(4);
  for (int m = 0; m < 4; ++m) {
    Tensor x = from_vector<double>({xs[2 * m], xs[2 * m + 1]});
    Tensor loss = sum((w * x) * (w * x)) * (0.5 / 2.0);  // mean over the micro-batch
    (loss * acc.loss_scale()).backward();
    CHECK(acc.micro_step() == (m == 3));
  }
  double want = 0;
  for (double x : xs) want += 0.8 * x * x / xs.size();
  CHECK(w.grad().item<double>() == Approx(want).epsilon(1e-12));
}
