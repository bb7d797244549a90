#include "optim/lr_scheduler.h"

#include <algorithm>
#include <cmath>
#include <numbers>

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
  apply_extra(step_);
}

void LRScheduler::step(bool applied) {
  if (!applied) return;
  ++step_;
  try {
    apply();
  } catch (...) {
    --step_;  // a schedule that refuses the step leaves the count as it was
    throw;
  }
}

StateDict LRScheduler::state_dict() const {
  return {{"last_step", state_int(step_)}, {"base_lrs", from_vector<double>(base_lrs_)}};
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

void OneCycleLR::apply_extra(int64_t step) {
  if (!options_.cycle_momentum) return;
  const double m = values_at(step).second;
  for (size_t g = 0; g < optimizer_.num_param_groups(); ++g) optimizer_.set_group_momentum(g, m);
}

}  // namespace precis::optim
