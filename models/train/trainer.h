#pragma once
// The training loop behind precis-train, as a library function so that tests can drive it:
//
//   train::TrainOptions o;  o.model = "resnet20"; o.precision = DType::bf16; o.epochs = 3; ...
//   train::TrainSummary s = train::train(o, std::cout);
//   std::cout << s.json() << "\n";
//
// Device (options.device): the model moves there before the optimizer is built, each batch is
// copied there before its forward (the loader builds it on the host), evaluation runs there and a
// resumed checkpoint loads there; the autocast region is the device's. A device that cannot be
// used is a DeviceError before the data is read.
//
// One optimizer step: forward under amp::Autocast (bf16 or f16 when precision is not f32) →
// scaler.scale(loss / accum).backward() for each of `accum` micro-batches → the gradient-ready
// hook (TrainHooks) → optional scaler.clip_grad_norm_ → scaler.step(opt) (skipped on overflow for
// f16) → scaler.update() → scheduler.step(applied) (on a GPU: step_on_device with the scaler's
// skip flag, the optimizer capturable: no host read) → zero_grad. bf16 and f32 run with the scaler
// disabled (a pass-through). The loss and accuracy sums stay on the device; they are read only
// where they are printed (a due progress line, a --metrics row, the epoch summary).
// With master_weights the model's parameters are cast to `precision` (normalisation layers stay fp32) and
// the optimizer keeps fp32 master copies (docs/design/precision.md's low-precision model mode).
//
// Bit-exact resume: a checkpoint (models/train/checkpoint.h) is written only between optimizer
// steps and holds the model, optimizer (with masters), scaler, scheduler and accumulator state,
// the default generator's (seed, offset) (dropout), the data loader's position and the epoch's
// running metrics. Everything else a step depends on is a function of these (the loader's batches
// are a function of (seed, epoch, batch); see data/data_loader.h), so a run stopped after step k
// and resumed produces the same parameters, bit for bit, as the uninterrupted run (with the same
// thread count: kernels may split reductions by thread).
#include <cstdint>
#include <functional>
#include <ostream>
#include <string>

#include "models/train/train_options.h"

namespace precis::nn {
class Module;
}
namespace precis::optim {
class Optimizer;
}
namespace precis::amp {
class GradScaler;
}

namespace precis::train {

/// The state of an optimizer step at its gradient-ready point.
struct GradientsReady {
  nn::Module& model;            ///< its parameters' .grad hold the step's summed gradients
  optim::Optimizer& optimizer;
  amp::GradScaler& scaler;      ///< with f16 the gradients are still multiplied by its scale
  int64_t step;                 ///< the optimizer step about to be taken (1-based, counting steps before a resume)
  int64_t micro_batches;        ///< micro-batches summed into the gradients (accum, or fewer at an epoch end)
};

/// Seams in the training step for code that extends it (data parallelism, device work).
struct TrainHooks {
  /// The gradient-ready point of every optimizer step: after the backward of the step's last
  /// micro-batch, before the scaler unscales, checks, clips and applies the gradients. Data-parallel
  /// training all-reduces (averages) the .grad of every parameter here, so that each replica then
  /// unscales, clips and steps identical gradients and finds the same overflow. The hook may change
  /// gradients in place (tests inject overflows this way) but not replace the parameters. An
  /// exception from it ends train() as any error does.
  std::function<void(const GradientsReady&)> gradients_ready;
};

struct TrainSummary {
  std::string model;
  std::string precision;
  double epochs = 0;            ///< epochs trained: whole ones plus the part of one cut by stop_after_steps
  double test_accuracy = 0;     ///< NaN when the run stopped before evaluating
  double test_loss = 0;
  double samples_per_s = 0;     ///< training examples per second of training time
  double wall_s = 0;            ///< the whole run: data set-up, training, evaluation, checkpoints
  double train_s = 0;           ///< the training steps alone (data waits included)
  int64_t steps = 0;            ///< optimizer steps taken (counting those before a resume)
  int64_t skipped_steps = 0;    ///< steps the loss scaler skipped
  bool stopped_early = false;   ///< stop_after_steps ended the run
  std::string last_checkpoint;  ///< the last checkpoint written, else the one resumed from (empty if none)
  /// {"model","precision","epochs","test_accuracy","samples_per_s","wall_s"} on one line, plus
  /// "train_s", "steps" and "skipped_steps". test_accuracy is null when not evaluated.
  std::string json() const;
};

/// Checks the options' values and combinations; ValueError naming the option otherwise.
void validate(const TrainOptions& options);

/// Runs the training `options` describe, printing progress, per-epoch summaries and evaluations to
/// `out` (not the JSON line: the caller prints summary.json()), calling `hooks` at their points.
/// Throws precis::Error for bad options, data or checkpoints.
TrainSummary train(const TrainOptions& options, std::ostream& out, const TrainHooks& hooks = {});

}  // namespace precis::train
