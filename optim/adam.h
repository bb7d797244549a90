#pragma once
// Adam and AdamW with PyTorch's update rules (torch.optim.Adam / AdamW, single-tensor form):
//   step ← step + 1
//   Adam:  g ← grad + weight_decay·p          AdamW:  p ← p·(1 − lr·weight_decay)
//   m ← lerp(m, g, 1 − β1);   v ← β2·v + (1 − β2)·g²;   v̂ ← max(v̂, v) with amsgrad
//   p ← p − lr/(1 − β1^step) · m / (sqrt(v or v̂)/sqrt(1 − β2^step) + eps)
// The bias corrections are formed in double from the f32 step counter, as PyTorch does.
#include <utility>
#include <vector>

#include "optim/optimizer.h"

namespace precis::optim {

/// Adam's options, as torch.optim.Adam's keyword arguments with the same defaults; checked at
/// construction and by set_options (ValueError naming the group and option).
struct AdamOptions {
  double lr = 1e-3;                                ///< learning rate, >= 0 (torch's `lr`)
  std::pair<double, double> betas = {0.9, 0.999};  ///< (β1, β2), each in [0, 1) (torch's `betas`)
  double eps = 1e-8;  ///< added to the denominator, >= 0; warns when it underflows the state dtype
  double weight_decay = 0.0;  ///< L2 penalty added to the gradient
  bool amsgrad = false;   ///< use the running maximum of v (keeps "max_exp_avg_sq"), as torch's `amsgrad`
  bool maximize = false;  ///< ascend the objective instead of descending it (torch's `maximize`)
};

/// AdamW's defaults differ from Adam's only in weight_decay (1e-2, decoupled).
struct AdamWOptions {
  double lr = 1e-3;                                ///< as AdamOptions::lr
  std::pair<double, double> betas = {0.9, 0.999};  ///< as AdamOptions::betas
  double eps = 1e-8;                               ///< as AdamOptions::eps
  double weight_decay = 1e-2;  ///< decoupled: p ← p·(1 − lr·weight_decay) before the Adam update
  bool amsgrad = false;   ///< as AdamOptions::amsgrad
  bool maximize = false;  ///< as AdamOptions::maximize
};

/// State per parameter: "step" (0-d f32), "exp_avg", "exp_avg_sq", "max_exp_avg_sq" (amsgrad),
/// all fp32 (f64 for f64 parameters), and "master" for f16/bf16 parameters.
///
/// Construction warns (core/warning.h) when eps is 0, or so small that it rounds to 0 or to a
/// subnormal in the state dtype (below 1.18e-38 for fp32): adding it no longer keeps the
/// denominator away from 0, and elements with zero second moment produce 0/0 = NaN.
class Adam : public OptimizerWithOptions<AdamOptions> {
 public:
  /// One group with `defaults`. Throws ValueError (and friends) for invalid options or parameters.
  explicit Adam(std::vector<Tensor> params, AdamOptions defaults = {});
  /// Several groups; a group without options uses `defaults`.
  Adam(std::vector<ParamGroup<AdamOptions>> groups, AdamOptions defaults = {});

  void step(const StepOptions& options = {}) override;

  /// The momentum OneCycleLR cycles is beta1.
  bool has_momentum() const override { return true; }
  /// The group's beta1.
  double group_momentum(size_t group) const override { return options(group).betas.first; }
  /// Sets the group's beta1 (ValueError unless in [0, 1)).
  void set_group_momentum(size_t group, double beta1) override;

 protected:
  /// For AdamW: `decoupled` applies weight decay to the parameter instead of the gradient;
  /// `options` has one entry per group, each checked.
  Adam(std::string name, bool decoupled, std::vector<std::vector<Tensor>> groups, std::vector<AdamOptions> options);
  std::vector<std::pair<std::string, double>> group_options_as_reals(size_t group) const override;
  const char* momentum_option_name() const override { return "beta1"; }
  void load_group_options(size_t group, const StateDict& entries) override;
  std::vector<std::string> state_keys() const override {
    return {"step", "master", "exp_avg", "exp_avg_sq", "max_exp_avg_sq"};
  }
  void check_options(const AdamOptions& o, size_t group) const override;

 private:
  bool decoupled_;
};

/// Adam with decoupled weight decay (Loshchilov & Hutter). Options are AdamWOptions for
/// construction; options(g) / set_options use the common AdamOptions form.
class AdamW : public Adam {
 public:
  /// One group with `defaults`. Throws ValueError (and friends) for invalid options or parameters.
  explicit AdamW(std::vector<Tensor> params, AdamWOptions defaults = {});
  /// Several groups; a group without options uses `defaults`.
  AdamW(std::vector<ParamGroup<AdamWOptions>> groups, AdamWOptions defaults = {});
};

}  // namespace precis::optim
