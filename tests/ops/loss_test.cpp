// Losses: cross_entropy and nll_loss against naive f64 references (every reduction, ignore_index,
// label smoothing, class weights, K-dim targets, low precision), the element-wise losses, bad
// inputs, and the gradient-check cases of every loss.
#include <cmath>
#include <functional>
#include <limits>

#include "amp/autocast.h"
#include "autograd/gradcheck.h"
#include "ops/functional.h"
#include "tests/support/op_cases.h"
#include "tests/support/tensor_testing.h"

using namespace precis;
using namespace precis::testing;

namespace {

constexpr int64_t kIgnore = -100;

Tensor targets(const std::vector<int64_t>& v, const Shape& shape) { return from_vector<int64_t>(v, shape); }

// Random class indices in [0, classes) with every third position ignore_index when asked.
Tensor random_targets(const Shape& shape, int64_t classes, bool with_ignored, uint64_t seed) {
  Generator g(seed);
  std::vector<int64_t> v = randint(0, classes, shape, {.dtype = DType::i64}, &g).to_vector<int64_t>();
  if (with_ignored)
    for (size_t i = 0; i < v.size(); i += 3) v[i] = kIgnore;
  return targets(v, shape);
}

struct RefLoss {
  std::vector<double> rows;  // per position, ignored = 0 (reduction none)
  double total = 0;          // Σ rows
  double weight = 0;         // Σ w[t] over non-ignored positions
};

// Naive reference in double. x: (N, C, d...) values, logits (log_softmax taken here) or
// log-probabilities (is_log_probs, no smoothing).
RefLoss ref_class_loss(const Tensor& input, const Tensor& target, const std::vector<double>& w, double eps,
                       bool is_log_probs) {
  const std::vector<double> x = input.to(DType::f64).to_vector<double>();
  const std::vector<int64_t> t = target.to_vector<int64_t>();
  const int64_t C = input.dim() == 1 ? input.size(0) : input.size(1);
  const int64_t N = input.dim() == 1 ? 1 : input.size(0);
  const int64_t K = static_cast<int64_t>(t.size()) / N;  // positions per sample
  RefLoss r;
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t k = 0; k < K; ++k) {
      auto at = [&](int64_t c) { return x[(n * C + c) * K + k]; };
      std::vector<double> lp(C);
      double m = -INFINITY, s = 0;
      for (int64_t c = 0; c < C; ++c) m = std::max(m, at(c));
      for (int64_t c = 0; c < C; ++c) s += std::exp(at(c) - m);
      for (int64_t c = 0; c < C; ++c) lp[c] = is_log_probs ? at(c) : at(c) - m - std::log(s);
      const int64_t tc = t[n * K + k];
      double v = 0;
      if (tc != kIgnore) {
        const double wt = w.empty() ? 1.0 : w[tc];
        double smooth = 0;
        for (int64_t c = 0; c < C; ++c) smooth -= (w.empty() ? 1.0 : w[c]) * lp[c];
        v = (1 - eps) * -wt * lp[tc] + eps / C * smooth;
        r.weight += wt;
      }
      r.rows.push_back(v);
      r.total += v;
    }
  }
  return r;
}

void check_reductions(const Tensor& input, const Tensor& target, const std::vector<double>& w, double eps,
                      bool is_log_probs, DType dtype) {
  const Tensor x = input.to(dtype);
  const Tensor wt = w.empty() ? Tensor() : from_vector<double>(w).to(dtype);
  const RefLoss r = ref_class_loss(x, target, w, eps, is_log_probs);
  auto run = [&](Reduction red) {
    return is_log_probs ? nll_loss(x, target, wt, kIgnore, red) : cross_entropy(x, target, wt, kIgnore, red, eps);
  };
  const Tensor none = run(Reduction::none);
  REQUIRE(none.sizes() == target.sizes());
  REQUIRE(none.dtype() == dtype);
  PRECIS_REQUIRE_CLOSE(none.to(DType::f64), from_vector<double>(r.rows, target.sizes()), dtype);
  const Tensor s = run(Reduction::sum), m = run(Reduction::mean);
  REQUIRE(s.dim() == 0);
  PRECIS_REQUIRE_CLOSE(s.to(DType::f64), scalar_tensor(r.total, {.dtype = DType::f64}), dtype);
  PRECIS_REQUIRE_CLOSE(m.to(DType::f64), scalar_tensor(r.total / r.weight, {.dtype = DType::f64}), dtype);
}

}  // namespace

TEST_CASE("cross_entropy matches a reference for every reduction and option", "[ops][loss]") {
  const std::vector<double> w = {0.5, 1.0, 2.0, 0.25, 1.5, 0.75, 1.25};
  for (DType dt : {DType::f64, DType::f32}) {
    for (bool ignore : {false, true}) {
      for (double eps : {0.0, 0.1}) {
        for (bool weighted : {false, true}) {
          DYNAMIC_SECTION(dtype_name(dt) << " ignore " << ignore << " eps " << eps << " weighted " << weighted) {
            const std::vector<double> cw = weighted ? w : std::vector<double>{};
            // (N, C), and K-dim (N, C, d1, d2) whose class dim is not the last.
            check_reductions(randn_input({6, 7}, false, 1), random_targets({6}, 7, ignore, 2), cw, eps, false, dt);
            check_reductions(randn_input({2, 7, 3, 2}, false, 3), random_targets({2, 3, 2}, 7, ignore, 4), cw, eps,
                             false, dt);
          }
        }
      }
    }
  }
  // A single sample: input (C), target ().
  check_reductions(randn_input({5}, false, 5), targets({3}, {}), {}, 0.0, false, DType::f64);
}

TEST_CASE("cross_entropy at a wide vocabulary uses stable row sums and the same gradient formula", "[ops][loss]") {
  // 1003 classes: the vector loops' tails are exercised; large logits test the max shift.
  Tensor x = mul(randn_input({5, 1003}, false, 6), 30.0).to(DType::f32);
  x.requires_grad_(true);
  const Tensor t = random_targets({5}, 1003, false, 7);
  for (double eps : {0.0, 0.2}) {
    const Tensor loss = cross_entropy(x, t, Tensor(), kIgnore, Reduction::sum, eps);
    const RefLoss r = ref_class_loss(x.detach(), t, {}, eps, false);
    PRECIS_REQUIRE_CLOSE(loss.to(DType::f64), scalar_tensor(r.total, {.dtype = DType::f64}), DType::f32);
    loss.backward();
    // d/dx_ij = p_ij − (1 − ε)·[j = t_i] − ε/C
    const std::vector<double> xv = x.detach().to(DType::f64).to_vector<double>();
    const std::vector<int64_t> tv = t.to_vector<int64_t>();
    std::vector<double> expect(xv.size());
    for (int64_t i = 0; i < 5; ++i) {
      double m = -INFINITY, s = 0;
      for (int64_t j = 0; j < 1003; ++j) m = std::max(m, xv[i * 1003 + j]);
      for (int64_t j = 0; j < 1003; ++j) s += std::exp(xv[i * 1003 + j] - m);
      for (int64_t j = 0; j < 1003; ++j)
        expect[i * 1003 + j] = std::exp(xv[i * 1003 + j] - m) / s - (j == tv[i] ? 1 - eps : 0.0) - eps / 1003;
    }
    PRECIS_REQUIRE_CLOSE(x.grad().to(DType::f64), from_vector<double>(expect, {5, 1003}), DType::f32);
    x.set_grad(Tensor());
  }
}

TEST_CASE("cross_entropy ignored rows get no gradient and leave the mean", "[ops][loss]") {
  Tensor x = randn_input({4, 3}, true, 8);
  const Tensor t = targets({kIgnore, 2, kIgnore, 0}, {4});
  cross_entropy(x, t).backward();
  const std::vector<double> g = x.grad().to_vector<double>();
  for (int64_t j = 0; j < 3; ++j) {
    REQUIRE(g[0 * 3 + j] == 0.0);
    REQUIRE(g[2 * 3 + j] == 0.0);
  }
  // Rows 1 and 3 share the mean's 1/2.
  REQUIRE(g[1 * 3 + 2] < 0.0);
  REQUIRE(cross_entropy(x.detach(), t).item<double>() ==
          Approx(ref_class_loss(x.detach(), t, {}, 0, false).total / 2).epsilon(1e-12));
  // Every target ignored: the mean is 0/0 (NaN), as PyTorch.
  REQUIRE(std::isnan(cross_entropy(x.detach(), targets({kIgnore, kIgnore, kIgnore, kIgnore}, {4})).item<double>()));
  // A custom ignore_index.
  REQUIRE(cross_entropy(x.detach(), targets({1, 2, 1, 0}, {4}), Tensor(), 1, Reduction::sum).item<double>() ==
          Approx(ref_class_loss(x.detach(), targets({kIgnore, 2, kIgnore, 0}, {4}), {}, 0, false).total));
}

TEST_CASE("cross_entropy and nll_loss in f16 and bf16 compute in fp32", "[ops][loss]") {
  const Tensor x64 = randn_input({8, 40}, false, 9);
  const Tensor t = random_targets({8}, 40, true, 10);
  for (DType dt : {DType::f16, DType::bf16}) {
    const Tensor x = x64.to(dt);
    const RefLoss r = ref_class_loss(x, t, {}, 0.1, false);  // the rounded inputs, exact math
    const Tensor loss = cross_entropy(x, t, Tensor(), kIgnore, Reduction::mean, 0.1);
    REQUIRE(loss.dtype() == dt);
    PRECIS_REQUIRE_CLOSE(loss.to(DType::f64), scalar_tensor(r.total / r.weight, {.dtype = DType::f64}), dt);
    check_reductions(x, t, {}, 0.0, true, dt);
    // The gradient in the input's dtype, close to the f32 one.
    Tensor xl = x.detach();
    xl.requires_grad_(true);
    cross_entropy(xl, t, Tensor(), kIgnore, Reduction::sum, 0.1).backward();
    Tensor xf = x.detach().to(DType::f32);
    xf.requires_grad_(true);
    cross_entropy(xf, t, Tensor(), kIgnore, Reduction::sum, 0.1).backward();
    REQUIRE(xl.grad().dtype() == dt);
    PRECIS_REQUIRE_CLOSE(xl.grad().to(DType::f64), xf.grad().to(DType::f64), dt);
  }
}

TEST_CASE("nll_loss matches a reference and cross_entropy of log-probabilities", "[ops][loss]") {
  const std::vector<double> w = {0.5, 1.0, 2.0, 0.25, 1.5};
  for (bool weighted : {false, true}) {
    const std::vector<double> cw = weighted ? w : std::vector<double>{};
    check_reductions(randn_input({6, 5}, false, 11), random_targets({6}, 5, true, 12), cw, 0.0, true, DType::f64);
    check_reductions(randn_input({2, 5, 3}, false, 13), random_targets({2, 3}, 5, true, 14), cw, 0.0, true, DType::f32);
  }
  // Strided log-probabilities are read in place.
  const Tensor lp = non_contiguous(randn_input({4, 6}, false, 15));
  check_reductions(lp, random_targets({4}, 6, false, 16), {}, 0.0, true, DType::f64);
}

TEST_CASE("cross_entropy and nll_loss reject bad targets, weights and options", "[ops][loss]") {
  const Tensor x = randn_input({3, 5}, false, 17);
  PRECIS_REQUIRE_THROWS_WITH_ALL(cross_entropy(x, targets({0, 5, 1}, {3})), IndexError, "cross_entropy", "target 5",
                                 "5 classes", "[3, 5] f64 cpu");
  PRECIS_REQUIRE_THROWS_WITH_ALL(cross_entropy(x, targets({0, -1, 1}, {3})), IndexError, "target -1");
  PRECIS_REQUIRE_THROWS_WITH_ALL(cross_entropy(x, from_vector<float>({0, 1, 2})), DTypeError,
                                 "cross_entropy expects class indices as i64, got f32", "[3] f32 cpu");
  PRECIS_REQUIRE_THROWS_WITH_ALL(cross_entropy(x, from_vector<int32_t>({0, 1, 2})), DTypeError, "i64, got i32");
  PRECIS_REQUIRE_THROWS_WITH_ALL(cross_entropy(x, targets({0, 1}, {2})), ShapeError, "cross_entropy", "[3]",
                                 "target [2] i64 cpu");
  PRECIS_REQUIRE_THROWS_WITH_ALL(cross_entropy(x, targets({0, 1, 2}, {3}), ones({4})), ShapeError, "weight",
                                 "[4] f32 cpu");
  PRECIS_REQUIRE_THROWS_WITH_ALL(cross_entropy(x, targets({0, 1, 2}, {3}), Tensor(), kIgnore, Reduction::mean, 1.5),
                                 ValueError, "label_smoothing");
  PRECIS_REQUIRE_THROWS_WITH_ALL(cross_entropy(x.to(DType::i64), targets({0, 1, 2}, {3})), DTypeError, "floating");
  PRECIS_REQUIRE_THROWS_WITH_ALL(nll_loss(x, targets({0, 7, 1}, {3})), IndexError, "nll_loss", "target 7",
                                 "5 classes");
  PRECIS_REQUIRE_THROWS_WITH_ALL(nll_loss(x, from_vector<double>({0, 1, 2})), DTypeError, "nll_loss", "i64, got f64");
}

TEST_CASE("mse_loss, l1_loss, smooth_l1_loss, huber_loss, binary_cross_entropy and its logits form match references",
          "[ops][loss]") {
  const Tensor a = randn_input({3, 4}, false, 18), b = randn_input({3, 4}, false, 19);
  const Tensor p = uniform_input({3, 4}, 0.01, 0.99, false, 20), t = uniform_input({3, 4}, 0, 1, false, 21);
  const Tensor w = uniform_input({4}, 0.5, 2, false, 22), pw = uniform_input({4}, 0.5, 3, false, 23);
  const auto av = a.to_vector<double>(), bv = b.to_vector<double>(), pv = p.to_vector<double>(),
             tv = t.to_vector<double>(), wv = w.to_vector<double>(), pwv = pw.to_vector<double>();
  std::vector<double> mse(12), bce(12), bcel(12);
  for (int i = 0; i < 12; ++i) {
    mse[i] = (av[i] - bv[i]) * (av[i] - bv[i]);
    bce[i] = -wv[i % 4] * (tv[i] * std::log(pv[i]) + (1 - tv[i]) * std::log(1 - pv[i]));
    const double sig = 1 / (1 + std::exp(-av[i]));
    bcel[i] = -wv[i % 4] * (pwv[i % 4] * tv[i] * std::log(sig) + (1 - tv[i]) * std::log(1 - sig));
  }
  auto check = [](const Tensor& none, const Tensor& mean_, const Tensor& sum_, const std::vector<double>& ref) {
    double s = 0;
    for (double v : ref) s += v;
    PRECIS_REQUIRE_CLOSE(none, from_vector<double>(ref, {3, 4}), DType::f64);
    REQUIRE(sum_.item<double>() == Approx(s).epsilon(1e-12));
    REQUIRE(mean_.item<double>() == Approx(s / 12).epsilon(1e-12));
  };
  check(mse_loss(a, b, Reduction::none), mse_loss(a, b), mse_loss(a, b, Reduction::sum), mse);
  // l1, smooth L1 (beta 0.5; beta 0 is l1) and Huber (delta 0.7) from their definitions.
  std::vector<double> l1(12), smooth(12), huber(12);
  for (int i = 0; i < 12; ++i) {
    const double d = std::abs(av[i] - bv[i]);
    l1[i] = d;
    smooth[i] = d < 0.5 ? 0.5 * d * d / 0.5 : d - 0.25;
    huber[i] = d < 0.7 ? 0.5 * d * d : 0.7 * (d - 0.35);
  }
  check(l1_loss(a, b, Reduction::none), l1_loss(a, b), l1_loss(a, b, Reduction::sum), l1);
  check(smooth_l1_loss(a, b, Reduction::none, 0.5), smooth_l1_loss(a, b, Reduction::mean, 0.5),
        smooth_l1_loss(a, b, Reduction::sum, 0.5), smooth);
  check(smooth_l1_loss(a, b, Reduction::none, 0.0), smooth_l1_loss(a, b, Reduction::mean, 0.0),
        smooth_l1_loss(a, b, Reduction::sum, 0.0), l1);
  check(huber_loss(a, b, Reduction::none, 0.7), huber_loss(a, b, Reduction::mean, 0.7),
        huber_loss(a, b, Reduction::sum, 0.7), huber);
  check(binary_cross_entropy(p, t, w, Reduction::none), binary_cross_entropy(p, t, w),
        binary_cross_entropy(p, t, w, Reduction::sum), bce);
  check(binary_cross_entropy_with_logits(a, t, w, pw, Reduction::none), binary_cross_entropy_with_logits(a, t, w, pw),
        binary_cross_entropy_with_logits(a, t, w, pw, Reduction::sum), bcel);
  // f32 in, f32 out.
  REQUIRE(mse_loss(a.to(DType::f32), b.to(DType::f32)).dtype() == DType::f32);
}

TEST_CASE("smooth_l1_loss and huber_loss: finite gradients at infinite differences and huge beta or delta",
          "[ops][loss]") {
  const float inf = std::numeric_limits<float>::infinity();
  const Tensor t = from_vector<float>({1.0f, 1.0f, 3e38f, 0.0f});
  auto grad_of = [&](const std::function<Tensor(const Tensor&)>& loss) {
    Tensor x = from_vector<float>({inf, 1.0f, -3e38f, 0.5f}).requires_grad_();
    loss(x).backward();
    return x.grad().to_vector<float>();
  };
  // PyTorch 2.15: the linear branch's slope at an infinite (or overflowing) difference.
  CHECK(grad_of([&](const Tensor& x) { return smooth_l1_loss(x, t, Reduction::sum); }) ==
        std::vector<float>{1.0f, 0.0f, -1.0f, 0.5f});
  CHECK(grad_of([&](const Tensor& x) { return huber_loss(x, t, Reduction::sum); }) ==
        std::vector<float>{1.0f, 0.0f, -1.0f, 0.5f});
  // A delta past f32's range is inf there: every finite difference is in the quadratic branch.
  Tensor a = from_vector<float>({1.0f, 2.0f, 3.0f}).requires_grad_();
  const Tensor b = from_vector<float>({0.0f, 2.5f, -1.0f});
  huber_loss(a, b, Reduction::sum, 1e39).backward();
  CHECK(a.grad().to_vector<float>() == std::vector<float>{1.0f, -0.5f, 4.0f});
  CHECK(huber_loss(a, b, Reduction::sum, std::numeric_limits<double>::infinity()).item<float>() == 8.625f);
  CHECK(smooth_l1_loss(a, b, Reduction::sum, std::numeric_limits<double>::infinity()).item<float>() == 0.0f);
}

TEST_CASE("binary cross-entropy stays finite at saturated inputs", "[ops][loss]") {
  // Logits of ±200: the log-sigmoid form would overflow; the stable form gives the exact values.
  Tensor x = from_vector<double>({200, -200, 200, -200, 0});
  x.requires_grad_(true);
  const Tensor t = from_vector<double>({1, 0, 0, 1, 1});
  const Tensor l = binary_cross_entropy_with_logits(x, t, Tensor(), Tensor(), Reduction::none);
  const auto lv = l.to_vector<double>();
  REQUIRE(lv[0] == Approx(0).margin(1e-80));
  REQUIRE(lv[1] == Approx(0).margin(1e-80));
  REQUIRE(lv[2] == Approx(200));
  REQUIRE(lv[3] == Approx(200));
  REQUIRE(lv[4] == Approx(std::log(2.0)));
  sum(l).backward();
  // d/dx = σ(x) − t
  PRECIS_REQUIRE_CLOSE(x.grad(), from_vector<double>({0, 0, 1, -1, -0.5}), DType::f64);
  // Probabilities of exactly 0 and 1: logs clamped at −100, gradients finite (PyTorch's 1e-12 floor).
  Tensor p = from_vector<double>({0, 1, 0, 1});
  p.requires_grad_(true);
  const Tensor tp = from_vector<double>({1, 0, 0, 1});
  const Tensor lb = binary_cross_entropy(p, tp, Tensor(), Reduction::none);
  REQUIRE(lb.to_vector<double>() == std::vector<double>{100, 100, 0, 0});
  sum(lb).backward();
  const auto gp = p.grad().to_vector<double>();
  REQUIRE(gp[0] == Approx(-1e12));
  REQUIRE(gp[1] == Approx(1e12));
  REQUIRE(gp[2] == 0.0);
  REQUIRE(gp[3] == 0.0);
}

TEST_CASE("binary_cross_entropy_with_logits keeps the gradient of confident logits in every dtype", "[ops][loss]") {
  // The gradient was the forward composite's 1 − 1 + σ(x) summed in x's dtype: 0 in bf16 below
  // x ≈ −5.5 and in f32 below −17. It is now σ(x) − t (with pos_weight (1 + (pw − 1)t)σ(x) − pw·t)
  // formed in fp32 and rounded once, PyTorch's value.
  const std::vector<double> xs = {-10.0, -17.0, -30.0, -6.0, 4.0, 0.5};
  const std::vector<double> ts = {0.0, 0.0, 0.0, 0.0, 1.0, 0.25};
  for (DType dt : {DType::f32, DType::bf16, DType::f16}) {
    for (bool with_pw : {false, true}) {
      INFO(dtype_name(dt) << (with_pw ? " with pos_weight" : ""));
      Tensor x = from_vector<double>(xs, {6}, {.dtype = dt}).requires_grad_();
      const Tensor t = from_vector<double>(ts, {6}, {.dtype = dt});
      const double pw = with_pw ? 2.5 : 1.0;
      const Tensor pwt = with_pw ? full({6}, pw, {.dtype = dt}) : Tensor();
      binary_cross_entropy_with_logits(x, t, Tensor(), pwt, Reduction::sum).backward();
      const auto got = x.grad().to(DType::f64).to_vector<double>();
      const auto xr = x.detach().to(DType::f64).to_vector<double>();
      for (size_t i = 0; i < xs.size(); ++i) {
        const double sig = 1.0 / (1.0 + std::exp(-xr[i]));
        const double want = (1.0 + (pw - 1.0) * ts[i]) * sig - pw * ts[i];
        const double rounded = full({1}, want, {.dtype = dt}).to(DType::f64).item<double>();
        INFO("x = " << xr[i] << ": got " << got[i] << ", want " << rounded);
        // f32's σ(x) − t cancels near t = 1, so an absolute ulp(1) too (PyTorch forms it alike).
        CHECK(std::abs(got[i] - rounded) <= 2e-7 * std::abs(rounded) + 1.2e-7);
        if (rounded > 0.0) CHECK(got[i] > 0.0);
      }
    }
  }
}

TEST_CASE("binary_cross_entropy_with_logits' own backward passes gradcheck for input and target", "[ops][loss]") {
  const Tensor x = from_vector<double>({0.3, -1.2, 2.0, 0.0}).requires_grad_();
  const Tensor t = from_vector<double>({0.2, 0.9, 0.5, 1.0}).requires_grad_();
  const Tensor w = from_vector<double>({1.0, 0.5, 2.0, 1.5}), pw = from_vector<double>({1.5, 2.0, 0.7, 1.0});
  for (Reduction r : {Reduction::mean, Reduction::sum, Reduction::none}) {
    for (bool with_pw : {false, true}) {
      const auto res = autograd::gradcheck(
          [&](const autograd::TensorList& in) {
            return autograd::TensorList{binary_cross_entropy_with_logits(in[0], in[1], w, with_pw ? pw : Tensor(), r)};
          },
          {x, t});
      INFO(res.message);
      CHECK(res.ok);
    }
  }
}

TEST_CASE("binary_cross_entropy refuses an input outside [0, 1] on the CPU, as PyTorch", "[ops][loss]") {
  const Tensor t = from_vector<float>({1.0f, 0.0f});
  PRECIS_REQUIRE_THROWS_WITH_ALL(binary_cross_entropy(from_vector<float>({1.5f, 0.5f}), t), ValueError,
                                 "binary_cross_entropy", "[0, 1]", "binary_cross_entropy_with_logits");
  CHECK_THROWS_AS(binary_cross_entropy(from_vector<float>({NAN, 0.5f}), t), ValueError);
  CHECK(std::isfinite(binary_cross_entropy(from_vector<float>({1.0f, 0.0f}), t).item<float>()));
}

TEST_CASE("element-wise losses reject mismatched shapes and dtypes", "[ops][loss]") {
  const Tensor a = zeros({3, 4}), b = zeros({4}), i = zeros({3, 4}, {.dtype = DType::i64});
  PRECIS_REQUIRE_THROWS_WITH_ALL(mse_loss(a, b), ShapeError, "mse_loss", "input [3, 4] f32 cpu", "target [4] f32 cpu");
  PRECIS_REQUIRE_THROWS_WITH_ALL(binary_cross_entropy(a, b), ShapeError, "binary_cross_entropy", "[4] f32 cpu");
  PRECIS_REQUIRE_THROWS_WITH_ALL(binary_cross_entropy_with_logits(a, i), DTypeError, "binary_cross_entropy_with_logits",
                                 "target [3, 4] i64 cpu");
  PRECIS_REQUIRE_THROWS_WITH_ALL(binary_cross_entropy_with_logits(a, a, Tensor(), zeros({3})), ShapeError,
                                 "pos_weight [3] f32 cpu");
  PRECIS_REQUIRE_THROWS_WITH_ALL(binary_cross_entropy(a, a, zeros({2, 3, 4})), ShapeError, "weight [2, 3, 4] f32 cpu");
}

TEST_CASE("losses under autocast: fp32 category, binary_cross_entropy banned", "[ops][loss][amp]") {
  const Tensor logits = randn_input({4, 6}, false, 60, DType::bf16);
  const Tensor t = random_targets({4}, 6, false, 61);
  const Tensor p = uniform_input({4}, 0.1, 0.9, false, 62, DType::f32);
  amp::Autocast autocast(DType::bf16);
  // FP32: bf16 logits are cast up, so the loss comes out in fp32.
  REQUIRE(cross_entropy(logits, t).dtype() == DType::f32);
  REQUIRE(nll_loss(logits, t).dtype() == DType::f32);
  REQUIRE(mse_loss(p.to(DType::bf16), p.to(DType::bf16)).dtype() == DType::f32);
  REQUIRE(binary_cross_entropy_with_logits(p.to(DType::bf16), p).dtype() == DType::f32);
  PRECIS_REQUIRE_THROWS_WITH_ALL(binary_cross_entropy(p, p), DTypeError, "binary_cross_entropy",
                                 "binary_cross_entropy_with_logits");
}

// ---- gradient checks ---------------------------------------------------------------------------

namespace {

Tensor class_weights(int64_t c, uint64_t seed) { return uniform_input({c}, 0.5, 2.0, false, seed); }

const bool kLossCases = register_grad_cases({
    {OpId::cross_entropy, "mean ignore_index weights smoothing",
     [] { return TensorList{randn_input({5, 4}, true, 30)}; },
     [](const TensorList& x) {
       return TensorList{cross_entropy(x[0], random_targets({5}, 4, true, 31), class_weights(4, 32), kIgnore,
                                       Reduction::mean, 0.15)};
     }},
    {OpId::cross_entropy, "none, non-contiguous",
     [] { return TensorList{non_contiguous(randn_input({4, 6}, true, 33))}; },
     [](const TensorList& x) {
       return TensorList{cross_entropy(x[0], random_targets({4}, 6, false, 34), Tensor(), kIgnore, Reduction::none)};
     }},
    {OpId::cross_entropy, "sum K-dim smoothing",
     [] { return TensorList{randn_input({2, 3, 2, 2}, true, 35)}; },
     [](const TensorList& x) {
       return TensorList{cross_entropy(x[0], random_targets({2, 2, 2}, 3, true, 36), Tensor(), kIgnore,
                                       Reduction::sum, 0.3)};
     }},
    {OpId::nll_loss, "mean weights ignore_index",
     [] { return TensorList{randn_input({5, 4}, true, 37)}; },
     [](const TensorList& x) {
       return TensorList{nll_loss(x[0], random_targets({5}, 4, true, 38), class_weights(4, 39))};
     }},
    {OpId::nll_loss, "none K-dim non-contiguous",
     [] { return TensorList{non_contiguous(randn_input({2, 4, 3}, true, 40))}; },
     [](const TensorList& x) {
       return TensorList{nll_loss(x[0], random_targets({2, 3}, 4, false, 41), Tensor(), kIgnore, Reduction::none)};
     }},
    {OpId::mse_loss, "mean, both inputs", [] { return TensorList{randn_input({3, 4}, true, 42), randn_input({3, 4}, true, 43)}; },
     [](const TensorList& x) { return TensorList{mse_loss(x[0], x[1])}; }},
    {OpId::mse_loss, "none non-contiguous",
     [] { return TensorList{non_contiguous(randn_input({3, 4}, true, 44)), randn_input({3, 4}, false, 45)}; },
     [](const TensorList& x) { return TensorList{mse_loss(x[0], x[1], Reduction::none)}; }},
    {OpId::l1_loss, "mean, both inputs", [] { return TensorList{randn_input({3, 4}, true, 60), randn_input({3, 4}, true, 61)}; },
     [](const TensorList& x) { return TensorList{l1_loss(x[0], x[1])}; }},
    {OpId::l1_loss, "none non-contiguous",
     [] { return TensorList{non_contiguous(randn_input({3, 4}, true, 62)), randn_input({3, 4}, false, 63)}; },
     [](const TensorList& x) { return TensorList{l1_loss(x[0], x[1], Reduction::none)}; }},
    {OpId::smooth_l1_loss, "mean beta 0.5, both inputs",
     [] { return TensorList{randn_input({3, 4}, true, 64), randn_input({3, 4}, true, 65)}; },
     [](const TensorList& x) { return TensorList{smooth_l1_loss(x[0], x[1], Reduction::mean, 0.5)}; }},
    {OpId::smooth_l1_loss, "sum non-contiguous",
     [] { return TensorList{non_contiguous(randn_input({3, 4}, true, 66)), randn_input({3, 4}, false, 67)}; },
     [](const TensorList& x) { return TensorList{smooth_l1_loss(x[0], x[1], Reduction::sum)}; }},
    {OpId::huber_loss, "mean delta 0.7, both inputs",
     [] { return TensorList{randn_input({3, 4}, true, 68), randn_input({3, 4}, true, 69)}; },
     [](const TensorList& x) { return TensorList{huber_loss(x[0], x[1], Reduction::mean, 0.7)}; }},
    {OpId::huber_loss, "none non-contiguous",
     [] { return TensorList{non_contiguous(randn_input({3, 4}, true, 70)), randn_input({3, 4}, false, 71)}; },
     [](const TensorList& x) { return TensorList{huber_loss(x[0], x[1], Reduction::none)}; }},
    {OpId::binary_cross_entropy_with_logits, "weight pos_weight, input and target",
     [] {
       return TensorList{randn_input({3, 4}, true, 46), uniform_input({3, 4}, 0, 1, true, 47),
                         uniform_input({3, 1}, 0.5, 2, false, 48), uniform_input({4}, 0.5, 3, false, 49)};
     },
     [](const TensorList& x) { return TensorList{binary_cross_entropy_with_logits(x[0], x[1], x[2], x[3])}; }},
    {OpId::binary_cross_entropy_with_logits, "none",
     [] { return TensorList{non_contiguous(randn_input({4, 3}, true, 50)), uniform_input({4, 3}, 0, 1, false, 51)}; },
     [](const TensorList& x) {
       return TensorList{binary_cross_entropy_with_logits(x[0], x[1], Tensor(), Tensor(), Reduction::none)};
     }},
    {OpId::binary_cross_entropy, "mean weight, input and target",
     [] {
       return TensorList{uniform_input({3, 4}, 0.05, 0.95, true, 52), uniform_input({3, 4}, 0, 1, true, 53),
                         uniform_input({4}, 0.5, 2, false, 54)};
     },
     [](const TensorList& x) { return TensorList{binary_cross_entropy(x[0], x[1], x[2])}; }},
    {OpId::binary_cross_entropy, "sum and none",
     [] { return TensorList{uniform_input({5}, 0.05, 0.95, true, 55), uniform_input({5}, 0, 1, false, 56)}; },
     [](const TensorList& x) {
       return TensorList{binary_cross_entropy(x[0], x[1], Tensor(), Reduction::sum),
                         binary_cross_entropy(x[0], x[1], Tensor(), Reduction::none)};
     }},
});

}  // namespace
