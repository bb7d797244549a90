// The optimizer and clipping kernels of the op table (ops/contracts/kernels_optim.h), called directly on
// the CPU: sgd_step and adam_step for every parameter dtype (f16/bf16 with their fp32 masters,
// also with f32 gradients) against an f64 reference, found_inf and grad_scale; grad_norms,
// clip_grad_norm and clip_grad_value against references; and the argument checks every backend
// shares (ops/math/optim_args.h).
#include <catch2/catch.hpp>

#include <cmath>
#include <functional>
#include <limits>
#include <vector>

#include "ops/contracts/kernels_optim.h"
#include "ops/op_table.h"
#include "tensor/factory.h"
#include "tests/support/tensor_testing.h"

using namespace precis;
using namespace precis::kernels;
using precis::testing::randn_input;

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
const Shape kShapes[] = {{20000}, {3, 7}, {1}};  // across the CPU kernels' 512/16384-element blocks

struct DTypePair {
  DType param, grad;
};
const DTypePair kPairs[] = {{DType::f32, DType::f32}, {DType::f64, DType::f64}, {DType::f16, DType::f16},
                            {DType::bf16, DType::bf16}, {DType::f16, DType::f32}, {DType::bf16, DType::f32}};

DType state_dtype(DType param) { return param == DType::f64 ? DType::f64 : DType::f32; }

std::vector<double> values(const Tensor& t) { return t.to(DType::f64).to_vector<double>(); }

/// The gradients of step `step`: seeded normals rounded to the gradient dtype, times `scale`
/// (a power of two, so that scaled and unscaled values are both exact).
std::vector<Tensor> make_grads(const DTypePair& dt, int step, double scale) {
  std::vector<Tensor> g;
  for (size_t i = 0; i < std::size(kShapes); ++i)
    g.push_back((randn_input(kShapes[i], false, 1000 + 10 * step + i).to(dt.grad).to(DType::f64) * scale).to(dt.grad));
  return g;
}

std::vector<Tensor> make_params(DType dtype) {
  std::vector<Tensor> p;
  for (size_t i = 0; i < std::size(kShapes); ++i) p.push_back(randn_input(kShapes[i], false, 50 + i).to(dtype));
  return p;
}

/// The master a low-precision parameter gets (its f32 value), undefined otherwise.
Tensor master_of(const Tensor& p) { return is_low_precision(p.dtype()) ? p.to(DType::f32).contiguous().clone() : Tensor(); }

void require_close_to(const Tensor& actual, const std::vector<double>& want, DType dtype) {
  PRECIS_REQUIRE_CLOSE(actual.to(DType::f64).contiguous().view({-1}), from_vector<double>(want), dtype);
}

Tensor f32_scalar(double v) { return scalar_tensor(v, {.dtype = DType::f32}); }

// Hands each parameter its gradient of this step and runs the f64 reference update
// update(parameter i, element k, gradient value) on every element.
template <typename Param>
void feed_grads(std::vector<Param>& args, const std::vector<Tensor>& grads,
                const std::function<void(size_t, size_t, double)>& update) {
  for (size_t i = 0; i < args.size(); ++i) {
    args[i].grad = grads[i];
    const std::vector<double> g = values(grads[i]);
    for (size_t k = 0; k < g.size(); ++k) update(i, k, g[k]);
  }
}

}  // namespace

// ---- sgd_step ------------------------------------------------------------------------------------

TEST_CASE("sgd_step matches an f64 reference for every parameter dtype, masters included", "[ops][optim_kernels]") {
  const SgdHyper h{.lr = 0.05, .momentum = 0.9, .dampening = 0.1, .weight_decay = 0.01, .nesterov = false};
  for (const DTypePair& dt : kPairs) {
    INFO("param " << dtype_name(dt.param) << ", grad " << dtype_name(dt.grad));
    std::vector<Tensor> params = make_params(dt.param);
    std::vector<SgdParam> args;
    std::vector<std::vector<double>> ref_p, ref_buf;
    for (const Tensor& p : params) {
      args.push_back({p, Tensor(), master_of(p), zeros(p.sizes(), {.dtype = state_dtype(dt.param)}), zeros({})});
      ref_p.push_back(values(p));
      ref_buf.push_back(std::vector<double>(static_cast<size_t>(p.numel()), 0.0));
    }
    for (int step = 0; step < 4; ++step) {
      feed_grads(args, make_grads(dt, step, 8.0), [&](size_t i, size_t k, double g) {
        double& p = ref_p[i][k];
        double& b = ref_buf[i][k];
        const double d = g / 8.0 + h.weight_decay * p;
        b = step == 0 ? d : h.momentum * b + (1 - h.dampening) * d;
        p -= h.lr * b;
      });
      kernel<SgdStepKernel>(OpId::sgd_step, DeviceType::cpu, dt.param)(args, h, f32_scalar(8.0), Tensor(), Tensor());
    }
    for (size_t i = 0; i < args.size(); ++i) {
      CHECK(args[i].step.item<float>() == 4.0f);
      CHECK(args[i].param.dtype() == dt.param);
      require_close_to(args[i].param, ref_p[i], dt.param);
      require_close_to(args[i].momentum_buffer, ref_buf[i], state_dtype(dt.param));
      if (args[i].master.defined()) {
        require_close_to(args[i].master, ref_p[i], DType::f32);
        // The parameter is its master rounded once.
        CHECK(values(args[i].param) == values(args[i].master.to(dt.param)));
      }
    }
  }
}

TEST_CASE("sgd_step without momentum keeps no state, and found_inf makes it a no-op", "[ops][optim_kernels]") {
  const Tensor p = randn_input({5}, false, 3).to(DType::f32);
  const Tensor g = randn_input({5}, false, 4).to(DType::f32);
  const std::vector<double> p0 = values(p);
  std::vector<SgdParam> args = {{p, g, Tensor(), Tensor(), Tensor()}};
  auto sgd = kernel<SgdStepKernel>(OpId::sgd_step, DeviceType::cpu, DType::f32);
  sgd(args, {.lr = 0.5}, Tensor(), f32_scalar(1.0), Tensor());
  CHECK(values(p) == p0);  // skipped: bits kept
  sgd(args, {.lr = 0.5}, Tensor(), f32_scalar(0.0), Tensor());
  const std::vector<double> gv = values(g);
  for (size_t k = 0; k < p0.size(); ++k) CHECK(values(p)[k] == static_cast<float>(p0[k] - 0.5f * static_cast<float>(gv[k])));
}

TEST_CASE("sgd_step rejects mismatched arguments, naming the parameter and tensor", "[ops][optim_kernels]") {
  auto sgd = kernel<SgdStepKernel>(OpId::sgd_step, DeviceType::cpu, DType::f32);
  const Tensor p = zeros({4}), g = zeros({4});
  // A parameter of another dtype than the kernel's.
  PRECIS_REQUIRE_THROWS_WITH_ALL(sgd({{zeros({4}, {.dtype = DType::f64}), zeros({4}, {.dtype = DType::f64})}}, {.lr = 1},
                                     Tensor(), Tensor(), Tensor()),
                                 DTypeError, "sgd_step", "parameter 0", "f64", "f32");
  // momentum != 0 needs a buffer and a step counter.
  PRECIS_REQUIRE_THROWS_WITH_ALL(sgd({{p, g}}, {.lr = 1, .momentum = 0.9}, Tensor(), Tensor(), Tensor()), ValueError, "sgd_step",
                                 "momentum_buffer", "missing");
  // A gradient of another size.
  PRECIS_REQUIRE_THROWS_WITH_ALL(sgd({{p, zeros({5})}}, {.lr = 1}, Tensor(), Tensor(), Tensor()), ShapeError, "grad", "[5]",
                                 "4 elements");
  // An f16 parameter may take an f32 gradient, an f32 one no f16 gradient.
  PRECIS_REQUIRE_THROWS_WITH_ALL(sgd({{p, zeros({4}, {.dtype = DType::f16})}}, {.lr = 1}, Tensor(), Tensor(), Tensor()), DTypeError,
                                 "gradient", "f16");
  // The scaler inputs are single f32 values.
  PRECIS_REQUIRE_THROWS_WITH_ALL(sgd({{p, g}}, {.lr = 1}, Tensor(), scalar_tensor(0.0, {.dtype = DType::f64}), Tensor()),
                                 DTypeError, "found_inf", "f32");
  // A low-precision parameter without its master.
  auto sgd16 = kernel<SgdStepKernel>(OpId::sgd_step, DeviceType::cpu, DType::f16);
  PRECIS_REQUIRE_THROWS_WITH_ALL(sgd16({{zeros({4}, {.dtype = DType::f16}), g}}, {.lr = 1}, Tensor(), Tensor(), Tensor()),
                                 ValueError, "master", "missing");
}

// ---- adam_step -----------------------------------------------------------------------------------

TEST_CASE("adam_step matches an f64 reference for every parameter dtype, Adam and AdamW", "[ops][optim_kernels]") {
  for (bool decoupled : {false, true}) {
    const AdamHyper h{.lr = 1e-2, .beta1 = 0.9, .beta2 = 0.99, .eps = 1e-8, .weight_decay = 0.05, .amsgrad = true,
                      .decoupled_weight_decay = decoupled};
    for (const DTypePair& dt : kPairs) {
      INFO((decoupled ? "AdamW" : "Adam") << ": param " << dtype_name(dt.param) << ", grad " << dtype_name(dt.grad));
      std::vector<Tensor> params = make_params(dt.param);
      std::vector<AdamParam> args;
      std::vector<std::vector<double>> ref_p, ref_m, ref_v, ref_vmax;
      const DType sd = state_dtype(dt.param);
      for (const Tensor& p : params) {
        args.push_back({p, Tensor(), master_of(p), zeros(p.sizes(), {.dtype = sd}), zeros(p.sizes(), {.dtype = sd}),
                        zeros(p.sizes(), {.dtype = sd}), zeros({})});
        ref_p.push_back(values(p));
        for (auto* r : {&ref_m, &ref_v, &ref_vmax}) r->push_back(std::vector<double>(static_cast<size_t>(p.numel()), 0.0));
      }
      for (int step = 1; step <= 4; ++step) {
        feed_grads(args, make_grads(dt, step, 1.0), [&](size_t i, size_t k, double gk) {
          double& p = ref_p[i][k];
          if (decoupled) p *= 1 - h.lr * h.weight_decay;
          else gk += h.weight_decay * p;
          double& m = ref_m[i][k];
          double& v = ref_v[i][k];
          double& vmax = ref_vmax[i][k];
          m = h.beta1 * m + (1 - h.beta1) * gk;
          v = h.beta2 * v + (1 - h.beta2) * gk * gk;
          vmax = std::max(vmax, v);
          const double bc1 = 1 - std::pow(h.beta1, step), bc2 = 1 - std::pow(h.beta2, step);
          p -= h.lr / bc1 * m / (std::sqrt(vmax) / std::sqrt(bc2) + h.eps);
        });
        kernel<AdamStepKernel>(OpId::adam_step, DeviceType::cpu, dt.param)(args, h, Tensor(), f32_scalar(0.0), Tensor());
      }
      for (size_t i = 0; i < args.size(); ++i) {
        CHECK(args[i].step.item<float>() == 4.0f);
        require_close_to(args[i].param, ref_p[i], dt.param);
        require_close_to(args[i].exp_avg, ref_m[i], sd);
        require_close_to(args[i].exp_avg_sq, ref_v[i], sd);
        require_close_to(args[i].max_exp_avg_sq, ref_vmax[i], sd);
        if (args[i].master.defined()) require_close_to(args[i].master, ref_p[i], DType::f32);
      }
    }
  }
}

TEST_CASE("adam_step: found_inf keeps every bit and the step counter", "[ops][optim_kernels]") {
  const Tensor p = randn_input({100}, false, 9).to(DType::bf16);
  AdamParam a{p, randn_input({100}, false, 10).to(DType::f32), master_of(p), zeros({100}), zeros({100}), Tensor(),
              zeros({})};
  const std::vector<double> p0 = values(p), master0 = values(a.master);
  auto adam = kernel<AdamStepKernel>(OpId::adam_step, DeviceType::cpu, DType::bf16);
  const AdamHyper h{.lr = 0.1, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8};
  adam({a}, h, f32_scalar(1024.0), f32_scalar(1.0), Tensor());
  CHECK(values(p) == p0);
  CHECK(values(a.master) == master0);
  CHECK(a.step.item<float>() == 0.0f);
  CHECK(values(a.exp_avg) == std::vector<double>(100, 0.0));
  adam({a}, h, f32_scalar(1024.0), f32_scalar(0.0), Tensor());
  CHECK(a.step.item<float>() == 1.0f);
  CHECK(values(a.master) != master0);
  // amsgrad off: a max_exp_avg_sq is refused; amsgrad on: it is required.
  PRECIS_REQUIRE_THROWS_WITH_ALL(adam({{p, a.grad, a.master, a.exp_avg, a.exp_avg_sq, zeros({100}), a.step}}, h,
                                      Tensor(), Tensor(), Tensor()),
                                 ValueError, "adam_step", "max_exp_avg_sq", "unexpected");
  AdamHyper ams = h;
  ams.amsgrad = true;
  PRECIS_REQUIRE_THROWS_WITH_ALL(adam({a}, ams, Tensor(), Tensor(), Tensor()), ValueError, "max_exp_avg_sq", "missing");
  PRECIS_REQUIRE_THROWS_WITH_ALL(adam({{p, a.grad, a.master, zeros({100}, {.dtype = DType::f64}), a.exp_avg_sq,
                                        Tensor(), a.step}},
                                      h, Tensor(), Tensor(), Tensor()),
                                 DTypeError, "exp_avg", "f64", "expected f32");
}

// ---- grad_norms ------------------------------------------------------------------------------------

namespace {

/// Gradients of every floating dtype (one empty, one longer than the CPU's 8192-element blocks).
std::vector<Tensor> norm_grads() {
  return {randn_input({20000}, false, 21).to(DType::f32), randn_input({3, 5}, false, 22).to(DType::f64),
          randn_input({1000}, false, 23).to(DType::f16), randn_input({999}, false, 24).to(DType::bf16),
          zeros({0}, {.dtype = DType::f32})};
}

double reference_power_sum(const Tensor& g, double p) {
  double acc = 0;
  for (double v : values(g)) acc = std::isinf(p) ? std::max(acc, std::abs(v)) : acc + std::pow(std::abs(v), p);
  return acc;
}

}  // namespace

TEST_CASE("grad_norms gives each gradient's power sum in f64, low precision included", "[ops][optim_kernels]") {
  const std::vector<Tensor> grads = norm_grads();
  auto norms = kernel<GradNormKernel>(OpId::grad_norms, DeviceType::cpu, DType::f32);
  for (double p : {1.0, 2.0, 3.0, std::numeric_limits<double>::infinity()}) {
    Tensor out = zeros({5}, {.dtype = DType::f64});
    norms(grads, p, out);
    const auto got = out.to_vector<double>();
    for (size_t i = 0; i < grads.size(); ++i) {
      INFO("p = " << p << ", gradient " << i << " " << grads[i].describe());
      CHECK(got[i] == Approx(reference_power_sum(grads[i], p)).epsilon(1e-12));
    }
    CHECK(got[4] == 0.0);
  }
  // A NaN anywhere makes that gradient's sum NaN (the max-norm's too), and only that one.
  std::vector<Tensor> with_nan = norm_grads();
  with_nan[2] = from_vector<double>({1.0, kNaN, 2.0}).to(DType::f16);
  for (double p : {2.0, std::numeric_limits<double>::infinity()}) {
    Tensor out = zeros({5}, {.dtype = DType::f64});
    norms(with_nan, p, out);
    const auto got = out.to_vector<double>();
    CHECK(std::isnan(got[2]));
    CHECK(std::isfinite(got[0]));
  }
}

TEST_CASE("grad_norms rejects bad outputs and gradients", "[ops][optim_kernels]") {
  auto norms = kernel<GradNormKernel>(OpId::grad_norms, DeviceType::cpu, DType::f32);
  const std::vector<Tensor> grads = {zeros({4}), zeros({2})};
  PRECIS_REQUIRE_THROWS_WITH_ALL(norms(grads, 2.0, zeros({3}, {.dtype = DType::f64})), ShapeError, "grad_norms", "out",
                                 "2 entries");
  PRECIS_REQUIRE_THROWS_WITH_ALL(norms(grads, 2.0, zeros({2})), DTypeError, "grad_norms", "out", "f64");
  PRECIS_REQUIRE_THROWS_WITH_ALL(norms({zeros({4}, {.dtype = DType::i64})}, 2.0, zeros({1}, {.dtype = DType::f64})),
                                 DTypeError, "gradient 0", "i64", "floating");
  PRECIS_REQUIRE_THROWS_WITH_ALL(norms({zeros({4, 3}).t()}, 2.0, zeros({1}, {.dtype = DType::f64})), ValueError,
                                 "gradient 0", "not contiguous");
}

// ---- clip_grad_norm / clip_grad_value --------------------------------------------------------------

TEST_CASE("clip_grad_norm scales every gradient by PyTorch's coefficient in its compute type",
          "[ops][optim_kernels]") {
  // PyTorch forms the coefficient in the norm's dtype: f32 for f32/f16/bf16 gradients, f64 for
  // f64 ones (which an f32 coefficient moved off their f64 reference by ~1e-8 a clipped step).
  auto clip = kernel<ClipGradNormKernel>(OpId::clip_grad_norm, DeviceType::cpu, DType::f32);
  const std::vector<Tensor> originals = norm_grads();
  double sq = 0;
  std::vector<double> sums;
  for (const Tensor& g : originals) {
    sums.push_back(reference_power_sum(g, 2.0));
    sq += sums.back();
  }
  const double total = std::sqrt(sq);
  std::vector<Tensor> grads;
  for (const Tensor& g : originals) grads.push_back(g.clone());
  Tensor total_out = zeros({});
  clip(grads, from_vector<double>(sums), 2.0, total / 4, total_out);
  CHECK(total_out.item<float>() == static_cast<float>(total));
  const float coef = static_cast<float>(total / 4) * (1.0f / (static_cast<float>(total) + 1e-6f));
  const double coef64 = (total / 4) * (1.0 / (total + 1e-6));
  for (size_t i = 0; i < grads.size(); ++i) {
    INFO(grads[i].describe());
    const auto before = values(originals[i]);
    const auto after = values(grads[i]);
    for (size_t k = 0; k < before.size(); ++k) {
      double want;
      if (grads[i].dtype() == DType::f64) want = before[k] * coef64;
      else want = static_cast<float>(static_cast<float>(before[k]) * coef);  // fp32 product
      // ... then rounded once to the gradient's dtype.
      want = scalar_tensor(want, {.dtype = DType::f64}).to(grads[i].dtype()).item<double>();
      REQUIRE(after[k] == want);
    }
  }
  // f32 power sums are accepted too; below max_norm nothing changes.
  std::vector<Tensor> again;
  for (const Tensor& g : originals) again.push_back(g.clone());
  clip(again, from_vector<double>(sums).to(DType::f32), 2.0, total * 2, total_out);
  for (size_t i = 0; i < again.size(); ++i) CHECK(values(again[i]) == values(originals[i]));
  // An f64 total_out (what clip_grad_norm_ passes when every gradient is f64) gets the total in f64.
  Tensor total64 = zeros({}, {.dtype = DType::f64});
  clip(again, from_vector<double>(sums), 2.0, total * 2, total64);
  CHECK(total64.item<double>() == total);
}

TEST_CASE("clip_grad_norm leaves gradients alone for a non-finite or invalid total", "[ops][optim_kernels]") {
  auto clip = kernel<ClipGradNormKernel>(OpId::clip_grad_norm, DeviceType::cpu, DType::f32);
  for (double bad : {kNaN, std::numeric_limits<double>::infinity(), -1.0}) {
    INFO("bad power sum " << bad);
    const Tensor g = randn_input({10}, false, 31).to(DType::bf16);
    const auto before = values(g);
    Tensor total = zeros({});
    clip({g}, from_vector<double>({bad}), 2.0, 1e-3, total);
    CHECK(values(g) == before);
    CHECK_FALSE(std::isfinite(total.item<float>()));
  }
  const Tensor g = zeros({3});
  PRECIS_REQUIRE_THROWS_WITH_ALL(clip({g}, from_vector<double>({1.0, 2.0}), 2.0, 1.0, zeros({})), ShapeError,
                                 "clip_grad_norm", "power_sums", "1 entries");
  PRECIS_REQUIRE_THROWS_WITH_ALL(clip({g}, from_vector<double>({1.0}), 2.0, 1.0, zeros({}, {.dtype = DType::f16})),
                                 DTypeError, "clip_grad_norm", "total_out", "f32 or f64");
}

TEST_CASE("clip_grad_value clamps in the compute type, in-range elements keep their bits", "[ops][optim_kernels]") {
  auto clip = kernel<ClipGradValueKernel>(OpId::clip_grad_value, DeviceType::cpu, DType::f32);
  for (DType dt : {DType::f32, DType::f64, DType::f16, DType::bf16}) {
    INFO(dtype_name(dt));
    Tensor g = (randn_input({20000}, false, 41) * 2.0).to(dt);
    g.slice(0, 7, 8).copy_(from_vector<double>({kNaN}));
    const auto before = values(g);
    clip({g}, 0.7);
    // The bound in the compute type (0.7 rounded to f32 except for f64), stored rounded to dt.
    const double bound = dt == DType::f64 ? 0.7 : static_cast<double>(static_cast<float>(0.7));
    const double stored = scalar_tensor(bound, {.dtype = DType::f64}).to(dt).item<double>();
    const auto after = values(g);
    for (size_t k = 0; k < before.size(); ++k) {
      if (std::isnan(before[k])) {
        REQUIRE(std::isnan(after[k]));
      } else {
        const double want = before[k] > bound ? stored : before[k] < -bound ? -stored : before[k];
        REQUIRE(after[k] == want);
      }
    }
  }
  PRECIS_REQUIRE_THROWS_WITH_ALL(clip({zeros({2}, {.dtype = DType::i32})}, 1.0), DTypeError, "clip_grad_value", "i32");
  PRECIS_REQUIRE_THROWS_WITH_ALL(clip({zeros({2, 3}).t()}, 1.0), ValueError, "clip_grad_value", "not contiguous");
}
