#include "optim/adam.h"

#include <cfloat>

#include "autograd/grad_mode.h"
#include "core/warning.h"
#include "ops/contracts/kernels_optim.h"
#include "ops/op_table.h"
#include "optim/step_common.h"
#include "tensor/factory.h"

namespace precis::optim {
namespace {

AdamOptions from_adamw(const AdamWOptions& o) {
  return {o.lr, o.betas, o.eps, o.weight_decay, o.amsgrad, o.maximize};
}

std::vector<ParamGroup<AdamOptions>> from_adamw(const std::vector<ParamGroup<AdamWOptions>>& groups,
                                                const AdamWOptions& defaults) {
  std::vector<ParamGroup<AdamOptions>> out;
  for (const auto& g : groups) out.push_back({g.params, from_adamw(g.options.value_or(defaults))});
  return out;
}

}  // namespace

Adam::Adam(std::vector<Tensor> params, AdamOptions defaults)
    : Adam(std::vector<ParamGroup<AdamOptions>>{{std::move(params), defaults}}) {}

Adam::Adam(std::vector<ParamGroup<AdamOptions>> groups, AdamOptions defaults)
    : Adam("Adam", false, detail::params_of(groups), detail::options_of(groups, defaults)) {}

Adam::Adam(std::string name, bool decoupled, std::vector<std::vector<Tensor>> groups, std::vector<AdamOptions> options)
    : OptimizerWithOptions(std::move(name), std::move(groups), std::move(options)), decoupled_(decoupled) {
  for (size_t g = 0; g < options_.size(); ++g) check_options(options_[g], g);
}

AdamW::AdamW(std::vector<Tensor> params, AdamWOptions defaults)
    : AdamW(std::vector<ParamGroup<AdamWOptions>>{{std::move(params), defaults}}) {}

AdamW::AdamW(std::vector<ParamGroup<AdamWOptions>> groups, AdamWOptions defaults)
    : Adam("AdamW", true, detail::params_of(groups), detail::options_of(from_adamw(groups, defaults), AdamOptions{})) {}

void Adam::check_options(const AdamOptions& o, size_t group) const {
  const std::string who = name_ + " (group " + std::to_string(group) + ")";
  detail::check_non_negative(who, "lr", o.lr);
  detail::check_non_negative(who, "eps", o.eps);
  detail::check_non_negative(who, "weight_decay", o.weight_decay);
  PRECIS_CHECK(o.betas.first >= 0.0 && o.betas.first < 1.0, who, ": invalid beta1 ", o.betas.first,
               " (must be in [0, 1))");
  PRECIS_CHECK(o.betas.second >= 0.0 && o.betas.second < 1.0, who, ": invalid beta2 ", o.betas.second,
               " (must be in [0, 1))");
  // The denominator sqrt(v̂) + eps is formed in the state dtype: an eps that is 0 there (or
  // subnormal, flushed to 0 under FTZ and imprecise otherwise) no longer guards against 0/0.
  for (const Tensor& p : groups_[group]) {
    const bool f64 = state_dtype(p) == DType::f64;
    const double min_normal = f64 ? DBL_MIN : static_cast<double>(FLT_MIN);
    if (o.eps < min_normal) {
      warn(precis::detail::str_cat(who, ": eps = ", o.eps,
                           o.eps == 0.0 ? " is zero" : " underflows (is below the smallest normal number)",
                           " in the ", f64 ? "f64" : "fp32", " optimizer state of parameter ", p.describe(),
                           ": sqrt(v) + eps can be 0 and elements whose gradients are 0 become NaN (0/0). "
                           "Use an eps of at least ", f64 ? "1e-300" : "1e-30", " (the default is 1e-8)."));
      break;
    }
  }
}

void Adam::set_group_momentum(size_t group, double beta1) {
  AdamOptions o = options(group);
  o.betas.first = beta1;
  set_options(group, o);
}

void Adam::step(const StepOptions& step_options) {
  NoGradGuard no_grad;
  detail::StepBatches<kernels::AdamParam> batches;
  for_each_param_with_grad(step_options, [&](size_t g, size_t index, const Tensor& p, const Tensor& grad) {
    const TensorOptions state_opts{.dtype = state_dtype(p), .device = p.device()};
    auto zeros_state = [&] { return zeros(p.sizes(), state_opts); };
    kernels::AdamParam a;
    a.param = p;
    a.grad = grad;
    a.master = master_for(index, p);
    a.step = state_entry(index, "step", [&] { return zeros({}, {.device = p.device()}); });
    a.exp_avg = state_entry(index, "exp_avg", zeros_state);
    a.exp_avg_sq = state_entry(index, "exp_avg_sq", zeros_state);
    if (options_[g].amsgrad) a.max_exp_avg_sq = state_entry(index, "max_exp_avg_sq", zeros_state);
    batches.add(g, p, std::move(a));
    p.bump_version();
  });
  batches.run([&](size_t g, DeviceType device, DType dtype, const std::vector<kernels::AdamParam>& params) {
    const AdamOptions& o = options_[g];
    const kernels::AdamHyper hyper{o.lr,      o.betas.first, o.betas.second, o.eps, o.weight_decay,
                                   o.amsgrad, decoupled_,    o.maximize};
    kernel<kernels::AdamStepKernel>(OpId::adam_step, device, dtype)(params, hyper, step_options.grad_scale,
                                                                    step_options.found_inf,
                                                                    scheduled_for_step(g, params.front().param.device()));
  });
}

std::vector<std::pair<std::string, double>> Adam::group_options_as_reals(size_t group) const {
  const AdamOptions& o = options_[group];
  return {{"lr", o.lr},
          {"beta1", o.betas.first},
          {"beta2", o.betas.second},
          {"eps", o.eps},
          {"weight_decay", o.weight_decay},
          {"amsgrad", o.amsgrad ? 1.0 : 0.0},
          {"maximize", o.maximize ? 1.0 : 0.0}};
}

void Adam::load_group_options(size_t group, const StateDict& e) {
  const char* owner = name_.c_str();
  AdamOptions o;
  o.lr = state_get_real(e, "lr", owner);
  o.betas = {state_get_real(e, "beta1", owner), state_get_real(e, "beta2", owner)};
  o.eps = state_get_real(e, "eps", owner);
  o.weight_decay = state_get_real(e, "weight_decay", owner);
  o.amsgrad = state_get_real(e, "amsgrad", owner) != 0.0;
  o.maximize = state_get_real(e, "maximize", owner) != 0.0;
  set_options(group, o);
}

}  // namespace precis::optim
