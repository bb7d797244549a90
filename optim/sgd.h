#pragma once
// Stochastic gradient descent with momentum, dampening, Nesterov momentum and weight decay, with
// PyTorch's update rule (torch.optim.SGD):
//   g ← grad (+ weight_decay·p);   b ← g at the first step, else momentum·b + (1 − dampening)·g;
//   d ← g + momentum·b (nesterov) or b;   p ← p − lr·d
#include <vector>

#include "optim/optimizer.h"

namespace precis::optim {

/// SGD's options, as torch.optim.SGD's keyword arguments with the same defaults; checked at
/// construction and by set_options (ValueError naming the group and option).
struct SGDOptions {
  double lr = 1e-3;            ///< learning rate, >= 0 (torch's `lr`)
  double momentum = 0.0;       ///< >= 0; 0 keeps no momentum buffer (torch's `momentum`)
  double dampening = 0.0;      ///< scales the gradient's share of the buffer by 1 − dampening
  double weight_decay = 0.0;   ///< >= 0; L2 penalty weight_decay·p added to the gradient
  bool nesterov = false;  ///< needs momentum > 0 and dampening == 0
  bool maximize = false;  ///< ascend instead of descend
};

/// State per parameter: "momentum_buffer" and "step" (f32 count of applied steps since the buffer
/// was made; the first applied step fills the buffer with the gradient) when momentum != 0, and
/// "master" for f16/bf16 parameters.
class SGD : public OptimizerWithOptions<SGDOptions> {
 public:
  /// One group with `defaults`. Throws ValueError for invalid options or parameters.
  explicit SGD(std::vector<Tensor> params, SGDOptions defaults = {});
  /// Several groups; a group without options uses `defaults`.
  SGD(std::vector<ParamGroup<SGDOptions>> groups, SGDOptions defaults = {});

  void step(const StepOptions& options = {}) override;

  /// True even with momentum 0: OneCycleLR may cycle it (a buffer appears once it is nonzero).
  bool has_momentum() const override { return true; }
  /// The group's momentum.
  double group_momentum(size_t group) const override { return options(group).momentum; }
  /// Sets the group's momentum (checked like set_options).
  void set_group_momentum(size_t group, double momentum) override;

 protected:
  std::vector<std::pair<std::string, double>> group_options_as_reals(size_t group) const override;
  const char* momentum_option_name() const override { return "momentum"; }
  void load_group_options(size_t group, const StateDict& entries) override;
  std::vector<std::string> state_keys() const override { return {"step", "master", "momentum_buffer"}; }
  bool step_implied_by_state() const override { return true; }
  void check_options(const SGDOptions& o, size_t group) const override;
};

}  // namespace precis::optim
