#include "optim/sgd.h"

#include "autograd/grad_mode.h"
#include "ops/contracts/kernels_optim.h"
#include "ops/op_table.h"
#include "optim/step_common.h"
#include "tensor/factory.h"

namespace precis::optim {
namespace {

kernels::SgdHyper hyper_of(const SGDOptions& o) {
  return {o.lr, o.momentum, o.dampening, o.weight_decay, o.nesterov, o.maximize};
}

}  // namespace

SGD::SGD(std::vector<Tensor> params, SGDOptions defaults) : SGD(std::vector<ParamGroup<SGDOptions>>{{std::move(params), defaults}}) {}

SGD::SGD(std::vector<ParamGroup<SGDOptions>> groups, SGDOptions defaults)
    : OptimizerWithOptions("SGD", detail::params_of(groups), detail::options_of(groups, defaults)) {
  for (size_t g = 0; g < options_.size(); ++g) check_options(options_[g], g);
}

void SGD::check_options(const SGDOptions& o, size_t group) const {
  const std::string who = "SGD (group " + std::to_string(group) + ")";
  detail::check_non_negative(who, "lr", o.lr);
  detail::check_non_negative(who, "momentum", o.momentum);
  detail::check_non_negative(who, "weight_decay", o.weight_decay);
  PRECIS_CHECK(o.dampening == o.dampening, who, ": invalid dampening ", o.dampening);
  PRECIS_CHECK(!o.nesterov || (o.momentum > 0 && o.dampening == 0), who,
               ": nesterov momentum requires momentum > 0 and dampening == 0, got momentum ", o.momentum,
               " and dampening ", o.dampening);
}

void SGD::set_group_momentum(size_t group, double momentum) {
  SGDOptions o = options(group);
  o.momentum = momentum;
  set_options(group, o);
}

void SGD::step(const StepOptions& step_options) {
  NoGradGuard no_grad;
  detail::StepBatches<kernels::SgdParam> batches;
  for_each_param_with_grad(step_options, [&](size_t g, size_t index, const Tensor& p, const Tensor& grad) {
    kernels::SgdParam a;
    a.param = p;
    a.grad = grad;
    a.master = master_for(index, p);
    if (options_[g].momentum != 0.0) {
      const TensorOptions state_opts{.dtype = state_dtype(p), .device = p.device()};
      // The kernel fills the buffer from the gradient at the first applied step ("step" == 0, decided
      // on the device); zeros only keep a state dict saved before that step deterministic.
      a.momentum_buffer = state_entry(index, "momentum_buffer", [&] { return zeros(p.sizes(), state_opts); });
      a.step = state_entry(index, "step", [&] { return zeros({}, {.device = p.device()}); });
    }
    batches.add(g, p, std::move(a));
    p.bump_version();
  });
  batches.run([&](size_t g, DeviceType device, DType dtype, const std::vector<kernels::SgdParam>& params) {
    kernel<kernels::SgdStepKernel>(OpId::sgd_step, device, dtype)(
        params, hyper_of(options_[g]), step_options.grad_scale, step_options.found_inf,
        scheduled_for_step(g, params.front().param.device()));
  });
}

std::vector<std::pair<std::string, double>> SGD::group_options_as_reals(size_t group) const {
  const SGDOptions& o = options_[group];
  return {{"lr", o.lr},
          {"momentum", o.momentum},
          {"dampening", o.dampening},
          {"weight_decay", o.weight_decay},
          {"nesterov", o.nesterov ? 1.0 : 0.0},
          {"maximize", o.maximize ? 1.0 : 0.0}};
}

void SGD::load_group_options(size_t group, const StateDict& e) {
  SGDOptions o;
  o.lr = state_get_real(e, "lr", "SGD");
  o.momentum = state_get_real(e, "momentum", "SGD");
  o.dampening = state_get_real(e, "dampening", "SGD");
  o.weight_decay = state_get_real(e, "weight_decay", "SGD");
  o.nesterov = state_get_real(e, "nesterov", "SGD") != 0.0;
  o.maximize = state_get_real(e, "maximize", "SGD") != 0.0;
  set_options(group, o);
}

}  // namespace precis::optim
