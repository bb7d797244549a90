// The optimizer and clipping kernels of the op table (ops/kernels_optim.h), called directly on
// the CPU: sgd_step and adam_step for every parameter dtype (f16/bf16 with their fp32 masters,
// also with f32 gradients) against an f64 reference, found_inf and grad_scale; grad_norms,
// clip_grad_norm and clip_grad_value against references; and the argument checks every backend
// shares (ops/optim_args.h).
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <vector>

#include "ops/kernels_optim.h"
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
      const std::vector<Tensor> grads = make_grads(dt, step, 8.0);
      for (size_t i = 0; i < args.size(); ++i) {
        args[i].grad = grads[i];
        const std::vector<double> g = values(grads[i]);
        for (size_t k = 0; k < g.size(); ++k) {
          double& p = ref_p[i][k];
          double& b = ref_buf[i][k];
          const double d = g[k] / 8.0 + h.weight_decay * p;
          b = step == 0 ? d : h.momentum * b + (1 - h.dampening) * d;
          p -= h.lr * b;
        }
      }
      kernel<SgdStepKernel>(OpId::sgd_step, DeviceType::cpu, dt.param)(args, h, f32_scalar(8.0), Tensor());
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
  sgd(args, {.lr = 0.5}, Tensor(), f32_scalar(1.0));
  CHECK(values(p) == p0);  // skipped: bits kept
  sgd(args, {.lr = 0.5}, Tensor(), f32_scalar(0.0));
  const std::vector<double> gv = values(g);
  for (size_t k = 0; k < p0.size(); ++k) CHECK(values(p)[k] == static_cast<float>(p0[k] - 0.5f * static_cast<float>(gv[k])));
}

TEST_CASE("sgd_step rejects mismatched arguments, naming the parameter and tensor", "[ops][optim_kernels]") {
  auto sgd = kernel<SgdStepKernel>(OpId::sgd_step, DeviceType::cpu, DType::f32);
  const Tensor p = zeros({4}), g = zeros({4});
  // A parameter of another dtype than the kernel's.
  PRECIS_REQUIRE_THROWS_WITH_ALL(sgd({{zeros({4}, {.dtype = DType::f64}), zeros({4}, {.dtype = DType::f64})}}, {.lr = 1},
                                     Tensor(), Tensor()),
                                 DTypeError, "sgd_step", "parameter 0", "f64", "f32");
  // momentum != 0 needs a buffer and a step counter.
  PRECIS_REQUIRE_THROWS_WITH_ALL(sgd({{p, g}}, {.lr = 1, .momentum = 0.9}, Tensor(), Tensor()), ValueError, "sgd_step",
                                 "momentum_buffer", "missing");
  // A gradient of another size.
  PRECIS_REQUIRE_THROWS_WITH_ALL(sgd({{p, zeros({5})}}, {.lr = 1}, Tensor(), Tensor()), ShapeError, "grad", "[5]",
                                 "4 elements");
  // An f16 parameter may take an f32 gradient, an f32 one no f16 gradient.
  PRECIS_REQUIRE_THROWS_WITH_ALL(sgd({{p, zeros({4}, {.dtype = DType::f16})}}, {.lr = 1}, Tensor(), Tensor()), DTypeError,
                                 "gradient", "f16");
  // The scaler inputs are single f32 values.
  PRECIS_REQUIRE_THROWS_WITH_ALL(sgd({{p, g}}, {.lr = 1}, Tensor(), scalar_tensor(0.0, {.dtype = DType::f64})),
                                 DTypeError, "found_inf", "f32");
  // A low-precision parameter without its master.
  auto sgd16 = kernel<SgdStepKernel>(OpId::sgd_step, DeviceType::cpu, DType::f16);
  PRECIS_REQUIRE_THROWS_WITH_ALL(sgd16({{zeros({4}, {.dtype = DType::f16}), g}}, {.lr = 1}, Tensor(), Tensor()),
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
        const std::vector<Tensor> grads = make_grads(dt, step, 1.0);
        for (size_t i = 0; i < args.size(); ++i) {
          args[i].grad = grads[i];
          const std::vector<double> g = values(grads[i]);
          for (size_t k = 0; k < g.size(); ++k) {
            double& p = ref_p[i][k];
            double gk = g[k];
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
          }
        }
        kernel<AdamStepKernel>(OpId::adam_step, DeviceType::cpu, dt.param)(args, h, Tensor(), f32_scalar(0.0));
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
  adam({a}, h, f32_scalar(1024.0), f32_scalar(1.0));
  CHECK(values(p) == p0);
  CHECK(values(a.master) == master0);
  CHECK(a.step.item<float>() == 0.0f);
  CHECK(values(a.exp_avg) == std::vector<double>(100, 0.0));
  adam({a}, h, f32_scalar(1024.0), f32_scalar(0.0));
  CHECK(a.step.item<float>() == 1.0f);
  CHECK(values(a.master) != master0);
  // amsgrad off: a max_exp_avg_sq is refused; amsgrad on: it is required.
  PRECIS_REQUIRE_THROWS_WITH_ALL(adam({{p, a.grad, a.master, a.exp_avg, a.exp_avg_sq, zeros({100}), a.step}}, h,
                                      Tensor(), Tensor()),
                                 ValueError, "adam_step", "max_exp_avg_sq", "unexpected");
  AdamHyper ams = h;
  ams.amsgrad = true;
  PRECIS_REQUIRE_THROWS_WITH_ALL(adam({a}, ams, Tensor(), Tensor()), ValueError, "max_exp_avg_sq", "missing");
  PRECIS_REQUIRE_THROWS_WITH_ALL(adam({{p, a.grad, a.master, zeros({100}, {.dtype = DType::f64}), a.exp_avg_sq,
                                        Tensor(), a.step}},
                                      h, Tensor(), Tensor()),
                                 DTypeError, "exp_avg", "f64", "expected f32");
}
