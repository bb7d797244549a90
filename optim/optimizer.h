#pragma once
// optim::Optimizer: the base of SGD, Adam and AdamW. Parameters are leaf tensors that require grad,
// organised in parameter groups, each with its own options (lr, weight decay, momentum, betas...).
//
//   optim::SGD opt(model.parameters(), {.lr = 0.1, .momentum = 0.9});
//   for (...) { opt.zero_grad(); loss.backward(); opt.step(); }
//
// Low-precision model mode (docs/design/precision.md): an f16/bf16 parameter gets an fp32 master copy (state
// "master", made from the parameter at its first step) and fp32 states; each step updates the
// master and writes its rounded value into the parameter in the same pass. f32 and f64 parameters
// are updated directly (states in their dtype).
//
// Steps run under NoGradGuard and bump the version of every updated parameter. Parameters whose
// .grad is undefined are skipped (as in PyTorch); a step in which no parameter has a gradient warns
// once (a missing backward(), or parameters that are not the ones the loss was computed from).
// A parameter converted in place after the optimizer was built (nn::Module::to keeps the tensor
// and changes its dtype or device) has its state converted at its next step: moments to the new
// state dtype and device, the fp32 master made fresh when it becomes f16/bf16, dropped when it
// stops being so.
#include <cstddef>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "tensor/state_dict.h"
#include "tensor/tensor.h"

namespace precis::optim {

/// Inputs from the loss scaler (amp::GradScaler) for one step. Both are optional 0-d f32 tensors
/// on the parameters' device:
/// - grad_scale: the gradients are still multiplied by this scale; the update uses
///   grad · float(1 / grad_scale) (the gradients themselves are not modified);
/// - found_inf: when nonzero, the step is a no-op (parameters, states and step counters keep
///   their bits). It is read by the update kernel itself, so a GPU step needs no host sync.
struct StepOptions {
  Tensor grad_scale;  ///< the scale the gradients still carry; undefined: unscaled gradients
  Tensor found_inf;   ///< nonzero: skip the whole step; undefined: always step
};

/// A group of parameters with its own options; when `options` is empty the optimizer's defaults
/// apply. A group's options replace the defaults entirely (they are not merged field by field).
template <typename Options>
struct ParamGroup {
  std::vector<Tensor> params;      ///< leaf floating tensors that require grad, in no other group
  std::optional<Options> options;  ///< nullopt: the optimizer's defaults
};

/// The optimizer interface: parameter groups, step(), zero_grad(), per-parameter state, state
/// dicts, and the lr/momentum access LR schedulers use. Not copyable (it owns state keyed by
/// parameter position). Not thread-safe: step() and the setters must not race with each other.
class Optimizer {
 public:
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  /// One update of every parameter that has a gradient. See StepOptions for the scaler inputs.
  virtual void step(const StepOptions& options = {}) = 0;

  /// Clears the gradients: set_to_none drops them (the default, as in PyTorch >= 2.0), otherwise
  /// they are filled with zeros in place.
  virtual void zero_grad(bool set_to_none = true);

  /// "SGD", "Adam", "AdamW": used in messages and state-dict errors.
  const std::string& name() const { return name_; }
  /// The number of parameter groups (1 when built from a plain parameter list).
  size_t num_param_groups() const { return groups_.size(); }
  /// The parameters of a group, aliasing the optimizer's own list (valid while it lives);
  /// IndexError when `group` is out of range.
  const std::vector<Tensor>& group_params(size_t group) const;
  /// Every parameter, group after group (the order state dicts number them in).
  std::vector<Tensor> parameters() const;

  // Generic access to the options LR schedulers change.
  /// The learning rate of a group (IndexError when out of range).
  virtual double group_lr(size_t group) const = 0;
  /// lr >= 0 (ValueError otherwise).
  virtual void set_group_lr(size_t group, double lr) = 0;
  /// Sets the lr of every group.
  void set_lr(double lr);
  /// Whether the optimizer has a momentum-like coefficient OneCycleLR can cycle: SGD's momentum,
  /// Adam's beta1.
  virtual bool has_momentum() const { return false; }
  /// The momentum-like coefficient of a group; ValueError when has_momentum() is false.
  virtual double group_momentum(size_t group) const;
  /// Sets that coefficient (validated like the options); ValueError when has_momentum() is false.
  virtual void set_group_momentum(size_t group, double momentum);

  /// Capturable mode, for a step captured in a CUDA graph (PyTorch's capturable=True with tensor
  /// lrs): each group's lr and momentum-like coefficient are also kept in device memory, on the
  /// device of the group's parameters (scheduled()), and the step kernels read them there when
  /// they run, so that a replayed step uses the values set since its capture (set_group_lr, an
  /// LRScheduler's step or step_on_device) instead of the capture's. Setting an option writes
  /// the device values with device work only (no host wait); it is refused while a capture is in
  /// progress (StateError: the write would be recorded, and each replay would repeat it).
  /// Turning the mode on or off while capturing is a StateError too; turning it on is a
  /// ValueError when a group's parameters are on different devices. The steps' results are
  /// those of the host values, bit for bit. Turning it on again keeps the device tensors (a
  /// step captured since reads them) and rewrites their values. A schedule counted on the device
  /// (LRScheduler::step_on_device) changes only the device copy: group_lr() and group_momentum()
  /// then return the values last set on the host, while state_dict() saves the device's. Off by
  /// default.
  virtual void set_capturable(bool capturable);
  /// Whether the optimizer is in capturable mode.
  virtual bool capturable() const { return capturable_; }
  /// The device copy of a group's scheduled hyperparameters in capturable mode: a 1-D f64 tensor
  /// {lr, momentum} (momentum: SGD's momentum, Adam's beta1; 0 without one) on the device of the
  /// group's parameters, the live tensor the steps read (LRScheduler::step_on_device writes it).
  /// Undefined when not capturable; IndexError when `group` is out of range.
  virtual Tensor scheduled(size_t group) const;

  /// A per-parameter state tensor ("step", "master", "momentum_buffer", "exp_avg", "exp_avg_sq",
  /// "max_exp_avg_sq"); undefined when the parameter has none (yet). The tensor is the live state.
  virtual Tensor state(const Tensor& param, const std::string& key) const;

  /// Hyperparameters of every group and all per-parameter state, as a StateDict:
  ///   "param_groups.<g>.params"  1-D i64, the indices of the group's parameters
  ///   "param_groups.<g>.<option>" 0-d f64 (booleans too, as 0 or 1)
  ///   "state.<i>.<key>"          the per-parameter state of parameter i (see parameters())
  /// The tensors are copies (later steps do not change a returned dict).
  virtual StateDict state_dict() const;
  /// Restores what state_dict() returned, into an optimizer over parameters of the same groups,
  /// counts and shapes (ValueError / ShapeError naming the mismatch otherwise). The group options
  /// are replaced by the saved ones. A parameter's moments without its "step" are refused, except
  /// SGD's momentum buffer, which counts as in use (a PyTorch SGD state has no step). A resumed
  /// run continues bit for bit. A state tensor that
  /// exists with the loaded one's dtype, device and shape is written in place (and the device
  /// lrs of capturable mode always are), so a step captured in a CUDA graph keeps reading them.
  virtual void load_state_dict(const StateDict& dict);

  /// optim::clip_grad_norm_ over parameters() (optim/clip_grad.h); a sharded optimizer
  /// (dist::ZeroOptimizer) clips by the whole model's norm instead. Returns the total norm.
  virtual Tensor clip_grad_norm_(double max_norm, double norm_type = 2.0);

  /// For an optimizer whose parameters are this process's shard of a model's (dist::ZeroOptimizer):
  /// the loss scaler calls it after measuring this process's gradients, to make the measurement
  /// the whole model's. found_inf: 0-d f32, nonzero when a gradient here is not finite; becomes 1
  /// where any process's is, else 0. sq_norms: 1-D f64, the squared 2-norm of each parameter
  /// with a gradient (parameters() order); becomes values whose in-order sum is the squared norm
  /// of the whole model's gradient, as unsharded training would compute it. A collective where
  /// the parameters are sharded (every process calls it alike); this default changes nothing.
  virtual void reduce_gradient_stats(const Tensor& found_inf, const Tensor& sq_norms) {
    (void)found_inf;
    (void)sq_norms;
  }

 protected:
  /// Checks the parameters (defined, floating, leaf, requires grad, contiguous, each in one group
  /// only, no empty group; ValueError / DTypeError / NotImplementedError otherwise) and sizes the
  /// state. `name` prefixes every message.
  Optimizer(std::string name, std::vector<std::vector<Tensor>> groups);

  /// Options of a group as named reals (booleans as 0/1), for the state dict.
  virtual std::vector<std::pair<std::string, double>> group_options_as_reals(size_t group) const = 0;
  /// The name group_options_as_reals gives the momentum-like coefficient ("momentum", "beta1");
  /// empty when has_momentum() is false. state_dict() of a capturable optimizer saves it, and the
  /// lr, as the device copy holds them.
  virtual const char* momentum_option_name() const { return ""; }
  /// Sets group options from the state dict entries (a sub-dict of "param_groups.<g>.").
  virtual void load_group_options(size_t group, const StateDict& entries) = 0;
  /// The state keys this optimizer may hold (load_state_dict rejects others).
  virtual std::vector<std::string> state_keys() const = 0;
  /// Whether a loaded moment without a "step" entry counts as one already in use (step 1): SGD's
  /// momentum buffer (PyTorch's SGD saves no step). Otherwise (Adam's bias correction needs the
  /// count) load_state_dict refuses it, as PyTorch's does.
  virtual bool step_implied_by_state() const { return false; }
  /// ValueError, named for `owner`, unless `dict` has exactly this optimizer's number of
  /// parameter groups (the first structural check of load_state_dict).
  void check_group_count(const StateDict& dict, const std::string& owner) const;

  /// Calls fn(group, index, param, grad) for each parameter with a defined gradient, after
  /// checking the gradient (shape, device, accepted dtype) and the scaler inputs against it.
  /// `grad` is contiguous.
  template <typename Fn>
  void for_each_param_with_grad(const StepOptions& options, Fn&& fn);
  /// Checks that each defined scaler input holds one f32 value on `param`'s device.
  void check_step_options(const StepOptions& options, const Tensor& param) const;
  /// The gradient of `param` made contiguous, or undefined when it has none; ShapeError,
  /// DeviceError or DTypeError unless it has the parameter's shape, device and dtype (f32 is also
  /// accepted for an f16/bf16 parameter).
  Tensor checked_grad(const Tensor& param, size_t index) const;
  /// Converts the state of parameter `index` to the parameter's current dtype and device (it may
  /// have been converted in place by Module::to since the state was made).
  void follow_param(size_t index, const Tensor& param);
  /// The once-per-optimizer warning of a step in which no parameter had a gradient.
  void warn_no_gradients();

  /// The state entry `key` of parameter `index`, created by `make` when absent.
  template <typename Make>
  Tensor& state_entry(size_t index, const std::string& key, Make&& make) {
    Tensor& t = state_[index][key];
    if (!t.defined()) t = make();
    return t;
  }
  /// In capturable mode, writes a group's lr and momentum-like coefficient into its scheduled()
  /// tensor (StateError while capturing); does nothing otherwise. Every change of the options
  /// calls it (OptimizerWithOptions::set_options).
  void write_scheduled(size_t group);
  /// The scheduled() tensor a step of group `group`'s parameters on `device` passes its kernel:
  /// undefined unless capturable; remade on `device` (outside a capture: StateError inside one)
  /// when the parameters were moved there since it was made.
  Tensor scheduled_for_step(size_t group, Device device);

  /// The fp32 master of a low-precision parameter (made from its values at first use), else
  /// undefined.
  Tensor master_for(size_t index, const Tensor& param);
  /// The dtype states of `param` are kept in: f64 for f64 parameters, else f32.
  static DType state_dtype(const Tensor& param);

  std::string name_;                         ///< "SGD", "Adam", "AdamW" (see name())
  std::vector<std::vector<Tensor>> groups_;  ///< the parameters, group by group
  /// Per-parameter state, indexed as parameters().
  std::vector<std::map<std::string, Tensor>> state_;
  bool warned_no_gradients_ = false;  ///< set once warn_no_gradients() has warned
  bool capturable_ = false;            ///< see capturable()
  std::vector<Tensor> scheduled_;      ///< see scheduled(): one per group in capturable mode
};

/// The base of the optimizers configured by an options struct per group (SGD, Adam): the
/// options, validated by the derived check_options on every change, and the lr schedulers set.
template <typename Options>
class OptimizerWithOptions : public Optimizer {
 public:
  /// The options of a group (change them with set_options, which validates).
  const Options& options(size_t group) const {
    (void)group_params(group);  // range check
    return options_[group];
  }
  /// Replaces a group's options after checking them (ValueError naming the bad option).
  void set_options(size_t group, const Options& options) {
    (void)group_params(group);
    check_options(options, group);
    options_[group] = options;
    write_scheduled(group);
  }

  /// The learning rate of a group (its options' lr).
  double group_lr(size_t group) const override { return options(group).lr; }
  /// Sets a group's learning rate (what the lr schedulers call), checked like set_options.
  void set_group_lr(size_t group, double lr) override {
    Options o = options(group);
    o.lr = lr;
    set_options(group, o);
  }

 protected:
  /// The derived constructor checks `options` (check_options is virtual: not callable from here).
  OptimizerWithOptions(std::string name, std::vector<std::vector<Tensor>> groups, std::vector<Options> options)
      : Optimizer(std::move(name), std::move(groups)), options_(std::move(options)) {}
  /// ValueError naming the group and the option when `o` is invalid.
  virtual void check_options(const Options& o, size_t group) const = 0;

  /// One options struct per parameter group.
  std::vector<Options> options_;
};

template <typename Fn>
void Optimizer::for_each_param_with_grad(const StepOptions& options, Fn&& fn) {
  size_t index = 0, with_grad = 0;
  for (size_t g = 0; g < groups_.size(); ++g) {
    for (const Tensor& p : groups_[g]) {
      Tensor grad = checked_grad(p, index);
      if (grad.defined()) {
        check_step_options(options, p);
        follow_param(index, p);
        fn(g, index, p, grad);
        ++with_grad;
      }
      ++index;
    }
  }
  if (with_grad == 0) warn_no_gradients();
}

namespace detail {
/// Checks that `params` are usable by an optimizer (defined, floating, leaf, requires grad,
/// contiguous, not repeated across groups) and that no group is empty.
void check_params(const std::string& optimizer, const std::vector<std::vector<Tensor>>& groups);
/// ValueError naming the optimizer, option and value when !(value >= 0) (or NaN).
void check_non_negative(const std::string& optimizer, const char* option, double value);

/// The parameters of each group.
template <typename Options>
std::vector<std::vector<Tensor>> params_of(const std::vector<ParamGroup<Options>>& groups) {
  std::vector<std::vector<Tensor>> out;
  for (const auto& g : groups) out.push_back(g.params);
  return out;
}
/// The options of each group (`defaults` where a group has none).
template <typename Options>
std::vector<Options> options_of(const std::vector<ParamGroup<Options>>& groups, const Options& defaults) {
  std::vector<Options> out;
  for (const auto& g : groups) out.push_back(g.options.value_or(defaults));
  return out;
}
}  // namespace detail

}  // namespace precis::optim
