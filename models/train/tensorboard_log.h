#pragma once
// precis-train --tensorboard DIR: the training run as TensorBoard curves, written by
// summary::SummaryWriter at the trainer's log points. Internal to models/train.
//
// Tags (x axis: the global optimizer step, counting steps before a resume):
//   train/loss, train/accuracy        the step's mean over its micro-batches
//   train/lr                          the learning rate the step ran with
//   train/loss_scale                  the loss scale the step ran with (1 when no scaler runs)
//   train/skipped_steps               steps the scaler skipped so far (restored on resume)
//   train/skip_reason                 0 applied, 1 overflow, 2 non-finite loss; a skip also adds
//                                     the text train/skipped ("step 12 skipped: overflow, ...")
//   train/grad_norm                   total 2-norm of the unscaled gradients
//   train/samples_per_s               examples per second of the step
//   train/data_wait                   share of the epoch so far spent waiting for data, in [0, 1]
//   eval/loss, eval/accuracy          the test split at each epoch end (at that epoch's last step)
//   fp8/<layer>/<operand>_amax, fp8/<layer>/<operand>_scale
//                                     --precision fp8, for the first and the last fp8 linear layer
//                                     (operand: input, weight, grad_output): the amax the step
//                                     recorded (the newest history entry) and the scale the next
//                                     step casts with
//   weights/<param>, grads/<param>    histograms every --tensorboard-histograms N steps
//   run/options                       text at step 0: the run's options
// Each run's file starts with a session START (SummaryWriterOptions::purge_step): at 0 for a fresh
// run, at k + 1 for a run resumed from a checkpoint at step k, so TensorBoard drops the steps > k
// that the interrupted run had logged: no step appears twice. (TensorBoard's server ignores the
// first START of a folder, its reader does not need one; both drop at a later START.)
#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "amp/grad_scaler.h"
#include "summary/summary_writer.h"

namespace precis::nn {
class Module;
}

namespace precis::train {

struct StepLog {
  int64_t step = 0;
  double loss = 0, accuracy = 0, lr = 0, loss_scale = 1;
  bool applied = true;
  amp::SkipReason reason = amp::SkipReason::none;
  double scale_after = 1;
  int64_t skipped_total = 0;
  double grad_norm = 0;
  double samples_per_s = 0, data_wait = 0;
};

class TensorBoardLog {
 public:
  /// Opens a writer in `dir`; resumed_step >= 0: the run resumed from a checkpoint at that step.
  /// histogram_every: steps between weight/gradient histograms (0: none).
  TensorBoardLog(const std::string& dir, int64_t histogram_every, int64_t resumed_step,
                 const std::map<std::string, std::string>& identity);
  void step(const StepLog& s);
  bool histograms_due(int64_t step) const { return every_ > 0 && step % every_ == 0; }
  /// Weight and gradient histograms of `model` at `step` (gradients: those the step applied).
  void histograms(const nn::Module& model, int64_t step);
  /// The fp8 scalars (see the tags above) of `model`'s first and last fp8 linear layers after
  /// `step`; nothing when it has none. Reads the device (a log point).
  void fp8(const nn::Module& model, int64_t step);
  void evaluation(int64_t step, double loss, double accuracy);
  /// Writes everything pending (at checkpoints, so that a resumed run has no gap before its own).
  void flush() { writer_.flush(); }
  const std::string& file_path() const { return writer_.file_path(); }

 private:
  summary::SummaryWriter writer_;
  int64_t every_;
};

}  // namespace precis::train
