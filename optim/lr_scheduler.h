#pragma once
// Learning-rate schedulers. Each computes the lr of every parameter group from its closed form at
// the current step count and writes it into the optimizer (Optimizer::set_group_lr).
//
//   optim::CosineAnnealingLR sched(opt, {.T_max = 1000});
//   ... StepResult r = scaler.step(opt); sched.step(r.applied());
//
// step(applied) advances only when `applied` is true (the default), so a step the loss scaler
// skipped does not consume schedule: a warmup stays a warmup of real updates. The values equal
// PyTorch's torch.optim.lr_scheduler classes (closed forms; PyTorch's recursive forms agree to
// the last bits of double). Like PyTorch, constructing a scheduler sets the step-0 lrs.
//
// On the device, for a step captured in a CUDA graph (core/cuda_graph.h), where the host neither
// learns whether a step was skipped nor runs inside the replay:
//
//   opt.set_capturable(true);                  // the steps read the lr from device memory
//   sched.to_device(total_steps);              // the schedule tabulated there
//   ... inside the captured step: StepResult r = scaler.step(opt); sched.step_on_device(r.skip_flag());
//
// step_on_device counts the step on the device unless it was skipped and copies the new count's
// lr (and momentum) into the optimizer's device copy: the lrs equal step(r.applied())'s.
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "optim/optimizer.h"

namespace precis::optim {

/// The base of the schedulers: holds the optimizer by reference (it must outlive the scheduler),
/// counts applied steps and writes lr_at(group, count) into every group. Not copyable.
class LRScheduler {
 public:
  virtual ~LRScheduler() = default;
  LRScheduler(const LRScheduler&) = delete;
  LRScheduler& operator=(const LRScheduler&) = delete;

  /// Counts one optimizer step when `applied`, then sets the lrs for the new count. A skipped
  /// step (applied == false) changes nothing.
  void step(bool applied = true);
  /// The lr of each group as last set.
  const std::vector<double>& get_last_lr() const {
    pull();
    return last_lr_;
  }
  /// Applied steps counted so far (PyTorch's last_epoch).
  int64_t last_step() const {
    pull();
    return step_;
  }
  /// The lrs the schedule starts from (each group's lr when the scheduler was made).
  const std::vector<double>& base_lrs() const { return base_lrs_; }

  /// "last_step" (0-d i64) and "base_lrs" (1-D f64).
  StateDict state_dict() const;
  /// Restores the count and base lrs and sets the lrs they give.
  void load_state_dict(const StateDict& dict);

  /// Moves the count onto the device of the optimizer's parameters and tabulates there the lrs
  /// (and the momenta the schedule drives) of every count 0 .. `horizon`, for step_on_device.
  /// Needs a capturable optimizer (Optimizer::set_capturable; StateError otherwise) whose groups
  /// are on one device (ValueError), and horizon >= last_step() (ValueError). Outside a capture.
  /// From then on last_step(), get_last_lr(), step(), state_dict() and load_state_dict() read or
  /// write the device count (a host wait, like item()); the optimizer's group_lr() keeps the
  /// last value set on the host, and a host-side change of its options writes the device copy
  /// until the next step_on_device.
  void to_device(int64_t horizon);
  /// Whether to_device() was called.
  bool on_device() const { return device_count_.defined(); }
  /// The device count (1-D i64 {count}; undefined before to_device()): the live tensor that
  /// step_on_device advances, read without a host wait. It and the lr tables stay the same
  /// tensors across load_state_dict() and a to_device() with the same horizon, so a step captured
  /// in a CUDA graph keeps reading them; a longer horizon makes new tables (capture again).
  const Tensor& device_step() const { return device_count_; }
  /// step(applied) done on the device, without a host wait (capturable): adds 1 to the count unless
  /// `skip` is nonzero, then copies the lr and momentum of the count (of `horizon` past it) into
  /// the optimizer's scheduled() tensors. skip: 0-d f32 on the parameters' device, the loss
  /// scaler's StepResult::skip_flag(); undefined: the step was applied. StateError before to_device().
  void step_on_device(const Tensor& skip = Tensor());

 protected:
  friend class SequentialLR;  // runs its children's lr_at with its own base lrs
  /// Takes each group's current lr as its base lr; sets no lr itself (derived constructors call
  /// apply()). `name` (a string literal) prefixes error messages.
  LRScheduler(Optimizer& optimizer, const char* name);
  /// Sets the lrs of the current step; derived constructors call it once their fields are set.
  void apply();
  /// The lr of `group` after `step` applied steps.
  virtual double lr_at(size_t group, int64_t step) const = 0;
  /// The momentum-like coefficient the schedule sets after `step` applied steps (OneCycleLR with
  /// cycle_momentum), or nullopt when it leaves the optimizer's as it is.
  virtual std::optional<double> momentum_at(int64_t step) const { return std::nullopt; }

  Optimizer& optimizer_;          ///< the optimizer whose lrs are set (not owned)
  const char* name_;              ///< "StepLR", ...: the scheduler in messages
  std::vector<double> base_lrs_;  ///< see base_lrs()
  mutable int64_t step_ = 0;             ///< see last_step()
  mutable std::vector<double> last_lr_;  ///< see get_last_lr()

 private:
  /// On the device: reads the count into step_ and last_lr_ (a host wait).
  void pull() const;
  /// On the device: writes step_ into the device count.
  void push();
  Tensor device_count_;        ///< 1-D i64 {count} on the device; undefined until to_device()
  /// Per group: (horizon + 1, 1 or 2) f64 rows {lr[, momentum]} by count (momentum when driven).
  std::vector<Tensor> table_;
  int64_t horizon_ = 0;        ///< the last tabulated count
};

/// StepLR's options, as torch.optim.lr_scheduler.StepLR's arguments (step_size has no default there).
struct StepLROptions {
  int64_t step_size = 1;  ///< > 0
  double gamma = 0.1;     ///< factor applied every step_size steps (torch's default)
};
/// lr = base · gamma^floor(step / step_size).
class StepLR : public LRScheduler {
 public:
  /// Sets the step-0 lrs; ValueError when step_size <= 0.
  StepLR(Optimizer& optimizer, StepLROptions options);

 protected:
  double lr_at(size_t group, int64_t step) const override;

 private:
  StepLROptions options_;
};

/// MultiStepLR's options, as torch.optim.lr_scheduler.MultiStepLR's arguments.
struct MultiStepLROptions {
  std::vector<int64_t> milestones;  ///< step counts at which the lr is multiplied by gamma
  double gamma = 0.1;               ///< factor per milestone passed (torch's default)
};
/// lr = base · gamma^(number of milestones <= step).
class MultiStepLR : public LRScheduler {
 public:
  /// Sets the step-0 lrs. The milestones may come in any order (they are sorted); a repeated
  /// milestone applies gamma once per occurrence, as in PyTorch.
  MultiStepLR(Optimizer& optimizer, MultiStepLROptions options);

 protected:
  double lr_at(size_t group, int64_t step) const override;

 private:
  MultiStepLROptions options_;
};

/// CosineAnnealingLR's options, as torch.optim.lr_scheduler.CosineAnnealingLR's arguments.
struct CosineAnnealingLROptions {
  int64_t T_max = 1;  ///< > 0; half a cosine period, in steps
  double eta_min = 0.0;  ///< the lr at step T_max (default 0, as in torch)
};
/// lr = eta_min + (base − eta_min)·(1 + cos(π·step/T_max))/2 (periodic past T_max, as PyTorch).
class CosineAnnealingLR : public LRScheduler {
 public:
  /// Sets the step-0 lrs; ValueError when T_max <= 0.
  CosineAnnealingLR(Optimizer& optimizer, CosineAnnealingLROptions options);

 protected:
  double lr_at(size_t group, int64_t step) const override;

 private:
  CosineAnnealingLROptions options_;
};

/// The shape of WarmupDecayLR's decay after the warmup.
enum class Decay { Cosine, Linear };

/// WarmupDecayLR's options (no single PyTorch class; the warmup-then-decay schedule of BERT-style
/// training).
struct WarmupDecayLROptions {
  int64_t warmup_steps = 0;  ///< >= 0
  int64_t total_steps = 1;   ///< > warmup_steps
  Decay decay = Decay::Cosine;  ///< half a cosine from base to min_lr, or a straight line
  double min_lr = 0.0;       ///< reached at total_steps and held after
};
/// Linear warmup from 0 to the base lr over warmup_steps (lr = base·step/warmup_steps), then a
/// cosine or linear decay from base to min_lr at total_steps; min_lr after that.
class WarmupDecayLR : public LRScheduler {
 public:
  /// Sets the step-0 lrs (0 when warmup_steps > 0); ValueError unless
  /// 0 <= warmup_steps < total_steps and min_lr >= 0.
  WarmupDecayLR(Optimizer& optimizer, WarmupDecayLROptions options);

 protected:
  double lr_at(size_t group, int64_t step) const override;

 private:
  WarmupDecayLROptions options_;
};

/// OneCycleLR's interpolation within a phase: torch's anneal_strategy "cos" or "linear".
enum class Anneal { Cos, Linear };

/// OneCycleLR's options, as torch.optim.lr_scheduler.OneCycleLR's arguments with its defaults
/// (one max_lr for every group; total_steps given directly, not as epochs × steps_per_epoch).
struct OneCycleLROptions {
  double max_lr = 0.0;        ///< > 0, the peak lr of every group
  int64_t total_steps = 0;    ///< > 0; stepping past it is an error (as in PyTorch)
  double pct_start = 0.3;     ///< fraction of the cycle spent increasing the lr
  Anneal anneal_strategy = Anneal::Cos;  ///< cosine (torch's "cos", the default) or linear
  bool cycle_momentum = true; ///< cycle SGD's momentum / Adam's beta1 inversely to the lr
  double base_momentum = 0.85;  ///< the momentum at the lr peak (lowest momentum)
  double max_momentum = 0.95;   ///< the momentum at the start and end of the cycle
  double div_factor = 25.0;         ///< initial lr = max_lr / div_factor
  double final_div_factor = 1e4;    ///< min lr = initial lr / final_div_factor
  bool three_phase = false;  ///< a third phase that anneals from the initial lr to the min lr
};
/// The 1cycle policy, torch.optim.lr_scheduler.OneCycleLR with its defaults. The base lrs are
/// max_lr / div_factor (the scheduler sets them at construction). Steps 0 .. total_steps − 1 equal
/// PyTorch's; at step total_steps the lr stays at the final value (PyTorch extrapolates past it).
class OneCycleLR : public LRScheduler {
 public:
  /// Replaces the base lrs with max_lr / div_factor and sets the step-0 lrs (and momenta when
  /// cycle_momentum). ValueError for an option out of range, or for cycle_momentum with an
  /// optimizer without momentum (Optimizer::has_momentum()).
  OneCycleLR(Optimizer& optimizer, OneCycleLROptions options);

 protected:
  double lr_at(size_t group, int64_t step) const override;
  std::optional<double> momentum_at(int64_t step) const override;

 private:
  struct Phase {
    double end_step;
    double start_lr, end_lr;
    double start_momentum, end_momentum;
  };
  /// (lr, momentum) at `step`.
  std::pair<double, double> values_at(int64_t step) const;
  OneCycleLROptions options_;
  std::vector<Phase> phases_;
};

/// LinearLR's options, as torch.optim.lr_scheduler.LinearLR's arguments with its defaults.
struct LinearLROptions {
  double start_factor = 1.0 / 3.0;  ///< in (0, 1]: the factor at step 0
  double end_factor = 1.0;          ///< in [0, 1]: the factor from total_iters on
  int64_t total_iters = 5;          ///< > 0
};
/// lr = base · (start_factor + (end_factor − start_factor)·min(step, total_iters)/total_iters): a
/// linear warmup (or decay) of the factor, the usual first scheduler of a SequentialLR.
class LinearLR : public LRScheduler {
 public:
  /// Sets the step-0 lrs; ValueError for an option out of its range (PyTorch's ranges).
  LinearLR(Optimizer& optimizer, LinearLROptions options = {});

 protected:
  double lr_at(size_t group, int64_t step) const override;

 private:
  LinearLROptions options_;
};

/// ConstantLR's options, as torch.optim.lr_scheduler.ConstantLR's arguments with its defaults.
struct ConstantLROptions {
  double factor = 1.0 / 3.0;  ///< in [0, 1]
  int64_t total_iters = 5;    ///< >= 0
};
/// lr = base · factor before step total_iters, base from then on.
class ConstantLR : public LRScheduler {
 public:
  /// Sets the step-0 lrs; ValueError for an option out of its range.
  ConstantLR(Optimizer& optimizer, ConstantLROptions options = {});

 protected:
  double lr_at(size_t group, int64_t step) const override;

 private:
  ConstantLROptions options_;
};

/// ExponentialLR's options, as torch.optim.lr_scheduler.ExponentialLR's (gamma has no default).
struct ExponentialLROptions {
  double gamma = 0.0;  ///< > 0: the factor per step
};
/// lr = base · gamma^step.
class ExponentialLR : public LRScheduler {
 public:
  /// Sets the step-0 lrs; ValueError unless gamma > 0.
  ExponentialLR(Optimizer& optimizer, ExponentialLROptions options);

 protected:
  double lr_at(size_t group, int64_t step) const override;

 private:
  ExponentialLROptions options_;
};

/// PolynomialLR's options, as torch.optim.lr_scheduler.PolynomialLR's arguments with its defaults.
struct PolynomialLROptions {
  int64_t total_iters = 5;  ///< > 0: the step at which the lr reaches 0
  double power = 1.0;       ///< >= 0
};
/// lr = base · (1 − min(step, total_iters)/total_iters)^power.
class PolynomialLR : public LRScheduler {
 public:
  /// Sets the step-0 lrs; ValueError for an option out of its range.
  PolynomialLR(Optimizer& optimizer, PolynomialLROptions options = {});

 protected:
  double lr_at(size_t group, int64_t step) const override;

 private:
  PolynomialLROptions options_;
};

/// lr = base · lr_lambda(step), torch.optim.lr_scheduler.LambdaLR: any schedule written as a
/// factor of the step count (Hugging Face's warmup schedules are LambdaLRs). The functions run on
/// the host at every step (and for every tabulated count in to_device()); they must be pure
/// functions of the step for a resumed run to continue the same schedule.
class LambdaLR : public LRScheduler {
 public:
  /// The factor of the base lr after `step` applied steps.
  using Lambda = std::function<double(int64_t step)>;
  /// One function for every group. Sets the step-0 lrs; ValueError when it is empty.
  LambdaLR(Optimizer& optimizer, Lambda lr_lambda);
  /// One function per group (as many as the optimizer has groups; ValueError otherwise, or when
  /// one is empty).
  LambdaLR(Optimizer& optimizer, std::vector<Lambda> lr_lambdas);

 protected:
  double lr_at(size_t group, int64_t step) const override;

 private:
  std::vector<Lambda> lambdas_;
};

/// Runs schedulers one after another, torch.optim.lr_scheduler.SequentialLR:
///
///   auto warmup = std::make_shared<optim::LinearLR>(opt, optim::LinearLROptions{.start_factor = 0.1});
///   auto decay = std::make_shared<optim::CosineAnnealingLR>(opt, optim::CosineAnnealingLROptions{.T_max = 95});
///   optim::SequentialLR sched(opt, {warmup, decay}, {5});   // step only sched
///
/// At count s, with k milestones <= s, scheduler k sets the lr at its own count s − milestones[k−1]
/// (s before the first milestone). As in PyTorch, every child's schedule starts from the lrs the
/// optimizer had when the first child was made (PyTorch's initial_lr; each child's constructor
/// sets its step-0 lr, so a later child would otherwise start from an earlier one's): make the
/// children on this optimizer, first child first, and step only the SequentialLR (the children's
/// own counts stay at 0). Its state_dict() is its count and base lrs, as for any scheduler.
class SequentialLR : public LRScheduler {
 public:
  /// Sets the step-0 lrs (the first child's). ValueError when `schedulers` is empty or holds a
  /// null or a scheduler of another optimizer, when there is not one milestone fewer than
  /// schedulers, or when the milestones are negative or not in order.
  SequentialLR(Optimizer& optimizer, std::vector<std::shared_ptr<LRScheduler>> schedulers,
               std::vector<int64_t> milestones);

 protected:
  double lr_at(size_t group, int64_t step) const override;
  std::optional<double> momentum_at(int64_t step) const override;

 private:
  /// The child active at `step` and its own count there; its base lrs made this scheduler's.
  std::pair<LRScheduler*, int64_t> child_at(int64_t step) const;
  std::vector<std::shared_ptr<LRScheduler>> schedulers_;
  std::vector<int64_t> milestones_;
};

}  // namespace precis::optim
