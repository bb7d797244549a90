#pragma once
// Gradient accumulation: N micro-batches add their gradients into the same .grad before one
// optimizer step. To average (rather than sum) over the micro-batches, scale each micro-batch
// loss by 1/N before backward:
//
//   optim::GradAccumulator acc(4);
//   for (auto& batch : loader) {
//     Tensor loss = loss_fn(model(batch.x), batch.y);
//     (loss * acc.loss_scale()).backward();       // with a scaler: scaler.scale(loss * acc.loss_scale())
//     if (acc.micro_step()) {                     // true on every 4th micro-batch
//       opt.step();                               // or scaler.step(opt); scaler.update();
//       opt.zero_grad();
//     }
//   }
//
// The mean of a mean loss over equal micro-batches equals the loss over the whole batch, so the
// accumulated gradient equals the full-batch gradient (up to rounding).
#include <cstdint>

#include "tensor/state_dict.h"

namespace precis::optim {

/// Counts micro-batches and says when the accumulated gradients are due for an optimizer step
/// (see the example above). It only counts: it neither scales nor touches gradients. Its counters
/// go into checkpoints through state_dict().
class GradAccumulator {
 public:
  /// steps >= 1 micro-batches per optimizer step (1: no accumulation).
  explicit GradAccumulator(int64_t steps);

  /// Counts one micro-batch (call after its backward); true when it completes an optimizer step.
  bool micro_step();
  /// Whether the next micro_step() will complete an optimizer step: lets a data-parallel wrapper
  /// skip the gradient all-reduce on the other micro-batches.
  bool is_last_micro_step() const { return count_ + 1 == steps_; }
  /// 1 / steps: the factor that turns summed micro-batch gradients into their mean.
  double loss_scale() const { return 1.0 / static_cast<double>(steps_); }

  int64_t steps() const { return steps_; }  ///< micro-batches per optimizer step
  /// Micro-batches counted towards the current optimizer step (0 .. steps-1).
  int64_t micro_steps_pending() const { return count_; }
  /// Optimizer steps completed so far.
  int64_t optimizer_steps() const { return optimizer_steps_; }
  /// Forgets the pending micro-batches (e.g. after the gradients were zeroed mid-window).
  void reset() { count_ = 0; }

  /// "steps", "pending", "optimizer_steps" (0-d i64).
  StateDict state_dict() const;
  /// Restores the counters; throws ValueError when the saved steps differ from this one's.
  void load_state_dict(const StateDict& dict);

 private:
  int64_t steps_;
  int64_t count_ = 0;
  int64_t optimizer_steps_ = 0;
};

}  // namespace precis::optim
