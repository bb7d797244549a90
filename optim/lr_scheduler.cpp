#include "optim/lr_scheduler.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "autograd/grad_mode.h"
#include "core/cuda_graph.h"
#include "ops/functional.h"
#include "tensor/factory.h"

namespace precis::optim {

LRScheduler::LRScheduler(Optimizer& optimizer, const char* name) : optimizer_(optimizer), name_(name) {
  for (size_t g = 0; g < optimizer.num_param_groups(); ++g) base_lrs_.push_back(optimizer.group_lr(g));
}

void LRScheduler::apply() {
  last_lr_.resize(base_lrs_.size());
  for (size_t g = 0; g < base_lrs_.size(); ++g) {
    last_lr_[g] = lr_at(g, step_);
    optimizer_.set_group_lr(g, last_lr_[g]);
  }
  if (const std::optional<double> m = momentum_at(step_))
    for (size_t g = 0; g < optimizer_.num_param_groups(); ++g) optimizer_.set_group_momentum(g, *m);
}

void LRScheduler::step(bool applied) {
  pull();
  if (!applied) return;
  ++step_;
  try {
    apply();
  } catch (...) {
    --step_;  // a schedule that refuses the step leaves the count as it was
    throw;
  }
  push();
}

StateDict LRScheduler::state_dict() const {
  pull();
  return {{"last_step", state_int(step_)}, {"base_lrs", from_vector<double>(base_lrs_)}};
}

// ---- on the device -------------------------------------------------------------------------------

void LRScheduler::to_device(int64_t horizon) {
  PRECIS_CHECK_T(StateError, optimizer_.capturable(), name_, ".to_device: the ", optimizer_.name(),
                 " optimizer is not capturable, so its steps would not read the lrs set on the device; call "
                 "set_capturable(true) on it first");
  PRECIS_CHECK_T(StateError, !cuda::is_capturing(), name_,
                 ".to_device: called while a CUDA graph capture is in progress; move the schedule before capturing");
  pull();
  PRECIS_CHECK(horizon >= step_, name_, ".to_device: horizon ", horizon, " is before the current step ", step_,
               "; give the last step count the run reaches (its total number of optimizer steps)");
  const Device device = optimizer_.scheduled(0).device();
  for (size_t g = 1; g < optimizer_.num_param_groups(); ++g)
    PRECIS_CHECK(optimizer_.scheduled(g).device() == device, name_, ".to_device: parameter group ", g, " is on ",
                 optimizer_.scheduled(g).device().str(), " and group 0 on ", device.str(),
                 "; a schedule on the device needs every group on one device");
  // One column (lr) or two (lr, momentum) when the schedule drives the momentum; a momentum it
  // does not drive stays the optimizer's.
  const int64_t columns = momentum_at(step_).has_value() ? 2 : 1;
  std::vector<Tensor> table;
  for (size_t g = 0; g < optimizer_.num_param_groups(); ++g) {
    std::vector<double> rows;
    rows.reserve(static_cast<size_t>(columns * (horizon + 1)));
    for (int64_t k = 0; k <= horizon; ++k) {
      rows.push_back(lr_at(g, k));
      if (columns == 2) rows.push_back(*momentum_at(k));
    }
    table.push_back(from_vector<double>(rows).reshape({horizon + 1, columns}).to(device));
  }
  // Tables and a count that stay the same size and device are written in place: a step captured
  // in a CUDA graph (step_on_device) reads the tensors it had at the capture. A longer horizon
  // needs new tables, and a new capture.
  NoGradGuard no_grad;
  const bool same = table_.size() == table.size() &&
                    std::equal(table.begin(), table.end(), table_.begin(), [](const Tensor& a, const Tensor& b) {
                      return a.sizes() == b.sizes() && a.device() == b.device();
                    });
  if (same) {
    for (size_t g = 0; g < table.size(); ++g) table_[g].copy_(table[g]);
  } else {
    table_ = std::move(table);
  }
  horizon_ = horizon;
  if (device_count_.defined() && device_count_.device() == device)
    device_count_.fill_(step_);
  else
    device_count_ = full({1}, step_, {.dtype = DType::i64, .device = device});
}

void LRScheduler::step_on_device(const Tensor& skip) {
  PRECIS_CHECK_T(StateError, on_device(), name_,
                 ".step_on_device: the schedule is not on the device; call to_device(horizon) first");
  NoGradGuard no_grad;
  if (skip.defined()) {
    PRECIS_CHECK_DTYPE(skip.dtype() == DType::f32 && skip.numel() == 1, name_,
                       ".step_on_device: skip must be one f32 value (StepResult::skip_flag()), got ", skip.describe());
    PRECIS_CHECK_DEVICE(skip.device() == device_count_.device(), name_, ".step_on_device: skip ", skip.describe(),
                        " is not on the schedule's device ", device_count_.device().str());
    device_count_.copy_(add(device_count_, eq(skip.reshape({1}), 0.0).to(DType::i64)));
  } else {
    device_count_.copy_(add(device_count_, int64_t{1}));
  }
  const Tensor row = minimum(device_count_, horizon_);
  for (size_t g = 0; g < table_.size(); ++g)
    optimizer_.scheduled(g).narrow(0, 0, table_[g].size(1)).copy_(index_select(table_[g], 0, row).reshape({-1}));
}

void LRScheduler::pull() const {
  if (!on_device()) return;
  const int64_t count = device_count_.item<int64_t>();
  if (count == step_) return;
  step_ = count;
  for (size_t g = 0; g < last_lr_.size(); ++g) last_lr_[g] = lr_at(g, std::min(step_, horizon_));
}

void LRScheduler::push() {
  if (on_device()) device_count_.fill_(step_);
}

void LRScheduler::load_state_dict(const StateDict& dict) {
  const int64_t step = state_get_int(dict, "last_step", name_);
  const Tensor base = state_tensor(dict, "base_lrs", name_);
  PRECIS_CHECK(base.numel() == static_cast<int64_t>(base_lrs_.size()), name_, ".load_state_dict: the state dict has ",
               base.numel(), " base lrs but the optimizer has ", base_lrs_.size(), " parameter groups");
  PRECIS_CHECK(step >= 0, name_, ".load_state_dict: invalid last_step ", step);
  base_lrs_ = base.to_vector<double>();
  step_ = step;
  apply();
  if (on_device()) {  // the count (to_device reads it), and a table of the loaded base lrs
    push();
    to_device(std::max(horizon_, step_));
  }
}

// ---- StepLR / MultiStepLR / CosineAnnealingLR ---------------------------------------------------

StepLR::StepLR(Optimizer& optimizer, StepLROptions options) : LRScheduler(optimizer, "StepLR"), options_(options) {
  PRECIS_CHECK(options.step_size > 0, "StepLR: step_size must be > 0, got ", options.step_size);
  apply();
}

double StepLR::lr_at(size_t group, int64_t step) const {
  return base_lrs_[group] * std::pow(options_.gamma, static_cast<double>(step / options_.step_size));
}

MultiStepLR::MultiStepLR(Optimizer& optimizer, MultiStepLROptions options)
    : LRScheduler(optimizer, "MultiStepLR"), options_(std::move(options)) {
  std::sort(options_.milestones.begin(), options_.milestones.end());
  apply();
}

double MultiStepLR::lr_at(size_t group, int64_t step) const {
  const auto passed = std::upper_bound(options_.milestones.begin(), options_.milestones.end(), step) -
                      options_.milestones.begin();
  return base_lrs_[group] * std::pow(options_.gamma, static_cast<double>(passed));
}

CosineAnnealingLR::CosineAnnealingLR(Optimizer& optimizer, CosineAnnealingLROptions options)
    : LRScheduler(optimizer, "CosineAnnealingLR"), options_(options) {
  PRECIS_CHECK(options.T_max > 0, "CosineAnnealingLR: T_max must be > 0, got ", options.T_max);
  apply();
}

double CosineAnnealingLR::lr_at(size_t group, int64_t step) const {
  const double eta_min = options_.eta_min;
  const double phase = std::numbers::pi * static_cast<double>(step) / static_cast<double>(options_.T_max);
  return eta_min + (base_lrs_[group] - eta_min) * (1.0 + std::cos(phase)) / 2.0;
}

// ---- WarmupDecayLR ------------------------------------------------------------------------------------

WarmupDecayLR::WarmupDecayLR(Optimizer& optimizer, WarmupDecayLROptions options)
    : LRScheduler(optimizer, "WarmupDecayLR"), options_(options) {
  PRECIS_CHECK(options.warmup_steps >= 0 && options.total_steps > options.warmup_steps,
               "WarmupDecayLR: need 0 <= warmup_steps < total_steps, got warmup_steps ", options.warmup_steps,
               " and total_steps ", options.total_steps);
  PRECIS_CHECK(options.min_lr >= 0, "WarmupDecayLR: min_lr must be >= 0, got ", options.min_lr);
  apply();
}

double WarmupDecayLR::lr_at(size_t group, int64_t step) const {
  const double base = base_lrs_[group];
  const auto& o = options_;
  if (step < o.warmup_steps) return base * (static_cast<double>(step) / static_cast<double>(o.warmup_steps));
  if (step >= o.total_steps) return o.min_lr;
  const double progress =
      static_cast<double>(step - o.warmup_steps) / static_cast<double>(o.total_steps - o.warmup_steps);
  const double f = o.decay == Decay::Cosine ? 0.5 * (1.0 + std::cos(std::numbers::pi * progress)) : 1.0 - progress;
  return o.min_lr + (base - o.min_lr) * f;
}

// ---- OneCycleLR -------------------------------------------------------------------------------------------

OneCycleLR::OneCycleLR(Optimizer& optimizer, OneCycleLROptions options)
    : LRScheduler(optimizer, "OneCycleLR"), options_(options) {
  const auto& o = options_;
  PRECIS_CHECK(o.total_steps > 0, "OneCycleLR: total_steps must be > 0, got ", o.total_steps);
  PRECIS_CHECK(o.max_lr > 0, "OneCycleLR: max_lr must be > 0, got ", o.max_lr);
  PRECIS_CHECK(o.pct_start >= 0 && o.pct_start <= 1, "OneCycleLR: pct_start must be in [0, 1], got ", o.pct_start);
  PRECIS_CHECK(o.div_factor > 0 && o.final_div_factor > 0, "OneCycleLR: div_factor and final_div_factor must be > 0");
  PRECIS_CHECK(!o.cycle_momentum || optimizer.has_momentum(), "OneCycleLR: cycle_momentum needs an optimizer with "
               "momentum or beta1; ", optimizer.name(), " has neither (pass .cycle_momentum = false)");
  const double initial = o.max_lr / o.div_factor;
  const double min_lr = initial / o.final_div_factor;
  const double n = static_cast<double>(o.total_steps);
  if (o.three_phase) {
    phases_ = {{o.pct_start * n - 1, initial, o.max_lr, o.max_momentum, o.base_momentum},
               {2 * o.pct_start * n - 2, o.max_lr, initial, o.base_momentum, o.max_momentum},
               {n - 1, initial, min_lr, o.max_momentum, o.max_momentum}};
  } else {
    phases_ = {{o.pct_start * n - 1, initial, o.max_lr, o.max_momentum, o.base_momentum},
               {n - 1, o.max_lr, min_lr, o.base_momentum, o.max_momentum}};
  }
  for (double& b : base_lrs_) b = initial;
  apply();
}

std::pair<double, double> OneCycleLR::values_at(int64_t step) const {
  PRECIS_CHECK_T(StateError, step <= options_.total_steps, "OneCycleLR: stepped ", step,
                 " times but total_steps is ", options_.total_steps, "; make total_steps cover every optimizer step");
  auto anneal = [&](double start, double end, double pct) {
    if (options_.anneal_strategy == Anneal::Cos) return end + (start - end) / 2.0 * (std::cos(std::numbers::pi * pct) + 1);
    return (end - start) * pct + start;
  };
  double start_step = 0;
  const double s = static_cast<double>(step);
  for (size_t i = 0; i < phases_.size(); ++i) {
    const Phase& ph = phases_[i];
    if (s <= ph.end_step || i + 1 == phases_.size()) {
      // Clamped: at step == total_steps (the scheduler step after the last optimizer step, which
      // PyTorch allows) PyTorch extrapolates past the end, to a negative lr for linear annealing.
      const double pct = std::min(1.0, (s - start_step) / (ph.end_step - start_step));
      return {anneal(ph.start_lr, ph.end_lr, pct), anneal(ph.start_momentum, ph.end_momentum, pct)};
    }
    start_step = ph.end_step;
  }
  return {0, 0};
}

double OneCycleLR::lr_at(size_t, int64_t step) const { return values_at(step).first; }

std::optional<double> OneCycleLR::momentum_at(int64_t step) const {
  if (!options_.cycle_momentum) return std::nullopt;
  return values_at(step).second;
}


// ---- LinearLR, ConstantLR, ExponentialLR, PolynomialLR: PyTorch's closed forms ----------------------------

LinearLR::LinearLR(Optimizer& optimizer, LinearLROptions options)
    : LRScheduler(optimizer, "LinearLR"), options_(options) {
  PRECIS_CHECK(options.start_factor > 0 && options.start_factor <= 1,
               "LinearLR: start_factor must be in (0, 1], got ", options.start_factor);
  PRECIS_CHECK(options.end_factor >= 0 && options.end_factor <= 1, "LinearLR: end_factor must be in [0, 1], got ",
               options.end_factor);
  PRECIS_CHECK(options.total_iters > 0, "LinearLR: total_iters must be > 0, got ", options.total_iters);
  apply();
}

double LinearLR::lr_at(size_t group, int64_t step) const {
  const auto& o = options_;
  const double done = static_cast<double>(std::min(step, o.total_iters)) / static_cast<double>(o.total_iters);
  return base_lrs_[group] * (o.start_factor + (o.end_factor - o.start_factor) * done);
}

ConstantLR::ConstantLR(Optimizer& optimizer, ConstantLROptions options)
    : LRScheduler(optimizer, "ConstantLR"), options_(options) {
  PRECIS_CHECK(options.factor >= 0 && options.factor <= 1, "ConstantLR: factor must be in [0, 1], got ",
               options.factor);
  PRECIS_CHECK(options.total_iters >= 0, "ConstantLR: total_iters must be >= 0, got ", options.total_iters);
  apply();
}

double ConstantLR::lr_at(size_t group, int64_t step) const {
  return base_lrs_[group] * (options_.factor + (step >= options_.total_iters ? 1.0 - options_.factor : 0.0));
}

ExponentialLR::ExponentialLR(Optimizer& optimizer, ExponentialLROptions options)
    : LRScheduler(optimizer, "ExponentialLR"), options_(options) {
  PRECIS_CHECK(options.gamma > 0, "ExponentialLR: gamma must be > 0 (it has no default), got ", options.gamma);
  apply();
}

double ExponentialLR::lr_at(size_t group, int64_t step) const {
  return base_lrs_[group] * std::pow(options_.gamma, static_cast<double>(step));
}

PolynomialLR::PolynomialLR(Optimizer& optimizer, PolynomialLROptions options)
    : LRScheduler(optimizer, "PolynomialLR"), options_(options) {
  PRECIS_CHECK(options.total_iters > 0, "PolynomialLR: total_iters must be > 0, got ", options.total_iters);
  PRECIS_CHECK(options.power >= 0, "PolynomialLR: power must be >= 0, got ", options.power);
  apply();
}

double PolynomialLR::lr_at(size_t group, int64_t step) const {
  const auto& o = options_;
  const double done = static_cast<double>(std::min(step, o.total_iters)) / static_cast<double>(o.total_iters);
  return base_lrs_[group] * std::pow(1.0 - done, o.power);
}

// ---- LambdaLR ---------------------------------------------------------------------------------------------

LambdaLR::LambdaLR(Optimizer& optimizer, Lambda lr_lambda)
    : LambdaLR(optimizer, std::vector<Lambda>(optimizer.num_param_groups(), lr_lambda)) {}

LambdaLR::LambdaLR(Optimizer& optimizer, std::vector<Lambda> lr_lambdas)
    : LRScheduler(optimizer, "LambdaLR"), lambdas_(std::move(lr_lambdas)) {
  PRECIS_CHECK(lambdas_.size() == base_lrs_.size(), "LambdaLR: got ", lambdas_.size(), " functions for ",
               base_lrs_.size(), " parameter groups; pass one function, or one per group");
  for (size_t g = 0; g < lambdas_.size(); ++g)
    PRECIS_CHECK(lambdas_[g] != nullptr, "LambdaLR: the function of group ", g, " is empty");
  apply();
}

double LambdaLR::lr_at(size_t group, int64_t step) const { return base_lrs_[group] * lambdas_[group](step); }

// ---- SequentialLR -----------------------------------------------------------------------------------------

SequentialLR::SequentialLR(Optimizer& optimizer, std::vector<std::shared_ptr<LRScheduler>> schedulers,
                           std::vector<int64_t> milestones)
    : LRScheduler(optimizer, "SequentialLR"), schedulers_(std::move(schedulers)), milestones_(std::move(milestones)) {
  PRECIS_CHECK(!schedulers_.empty(), "SequentialLR: no schedulers; pass at least one");
  for (size_t k = 0; k < schedulers_.size(); ++k) {
    PRECIS_CHECK(schedulers_[k] != nullptr, "SequentialLR: scheduler ", k, " is null");
    PRECIS_CHECK(&schedulers_[k]->optimizer_ == &optimizer, "SequentialLR: scheduler ", k, " (",
                 schedulers_[k]->name_, ") drives another optimizer; make every child on the SequentialLR's");
  }
  PRECIS_CHECK(milestones_.size() + 1 == schedulers_.size(), "SequentialLR: ", schedulers_.size(),
               " schedulers need ", schedulers_.size() - 1, " milestones, got ", milestones_.size());
  for (size_t k = 0; k < milestones_.size(); ++k)
    PRECIS_CHECK(milestones_[k] >= 0 && (k == 0 || milestones_[k] >= milestones_[k - 1]), "SequentialLR: milestone ",
                 k, " (", milestones_[k], ") must be >= 0 and not before the one preceding it");
  // The lrs the first child was made with (before any child set its step-0 lr): PyTorch's initial_lr.
  base_lrs_ = schedulers_[0]->base_lrs_;
  apply();
}

std::pair<LRScheduler*, int64_t> SequentialLR::child_at(int64_t step) const {
  const auto k =
      static_cast<size_t>(std::upper_bound(milestones_.begin(), milestones_.end(), step) - milestones_.begin());
  LRScheduler* child = schedulers_[k].get();
  // This scheduler's base lrs (load_state_dict may have replaced them) are every child's.
  child->base_lrs_ = base_lrs_;
  return {child, k == 0 ? step : step - milestones_[k - 1]};
}

double SequentialLR::lr_at(size_t group, int64_t step) const {
  const auto [child, local] = child_at(step);
  return child->lr_at(group, local);
}

std::optional<double> SequentialLR::momentum_at(int64_t step) const {
  const auto [child, local] = child_at(step);
  return child->momentum_at(local);
}

}  // namespace precis::optim
