#pragma once
// amp::GradScaler: dynamic loss scaling for f16 training (docs/design/loss-scaler.md).
//
//   amp::GradScaler scaler;
//   for (...) {
//     opt.zero_grad();
//     Tensor loss;
//     { amp::Autocast ac(DType::f16, DeviceType::cuda); loss = cross_entropy(model(x), y); }
//     scaler.scale(loss).backward();
//     scaler.unscale_(opt);                       // optional: needed before clipping
//     scaler.clip_grad_norm_(opt, 1.0);           // reuses the norms unscale_ computed
//     amp::StepResult r = scaler.step(opt);       // skipped when non-finite
//     scaler.update();
//     sched.step(r.applied());
//   }
//
// What it adds to PyTorch's GradScaler:
//  - causes told apart: a non-finite loss is a model bug (skip with reason non_finite_loss, keep
//    the scale); non-finite gradients with a finite loss are an overflow (skip, back off);
//  - attribution: non-finite counts per parameter, names of the offenders for a skipped step;
//  - step() returns a StepResult; schedulers advance on applied steps;
//  - state lives in tensors on the gradients' device and the skip is decided there (the
//    optimizer reads found_inf in its kernel); the host reads only when a StepResult field, the
//    history or scale() is asked for: scale, unscale_, clip_grad_norm_, step and update never
//    wait for a GPU (core/sync_debug.h counts it; tests/fake_cuda/step_sync_test.cpp);
//  - gradient accumulation: scaled micro-losses add up; unscale_ is idempotent within one
//    optimizer step; misuse errors explain the order;
//  - hysteresis (GradScalerOptions::hysteresis has the exact rule), a floor and a cap, a bounded
//    history, and an error with a diagnostic after K consecutive skips at the floor;
//  - state_dict with every field, so a resumed run continues bit for bit.
// Differences that follow from the above (docs/mixed-precision.md): step() without unscale_
// leaves the gradients scaled (the optimizer divides by the scale inside its update, PyTorch's
// step leaves them unscaled); a non-finite loss skips every optimizer stepped with this scaler in
// that update, where PyTorch steps those whose gradients are finite.
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "optim/optimizer.h"
#include "tensor/state_dict.h"
#include "tensor/tensor.h"

namespace precis::amp {

/// The constructor checks 0 < min_scale <= init_scale <= max_scale <= 3e38 (ValueError otherwise:
/// init_scale must lie within [min_scale, max_scale]), growth_factor > 1, 0 < backoff_factor < 1,
/// growth_interval and hysteresis in [1, 2^24] (the trackers are f32).
/// init_scale, growth_factor, backoff_factor, growth_interval and enabled are torch.amp.GradScaler's
/// arguments with its defaults; the others are additions (PyTorch has no hysteresis, floor, cap,
/// skip limit or history).
struct GradScalerOptions {
  double init_scale = 65536.0;     ///< 2^16; within [min_scale, max_scale] (torch's `init_scale`)
  double growth_factor = 2.0;      ///< > 1; the scale's factor at growth (torch's `growth_factor`)
  double backoff_factor = 0.5;     ///< in (0, 1); the scale's factor at back-off (torch's `backoff_factor`)
  int64_t growth_interval = 2000;  ///< consecutive clean steps before the scale grows (torch's `growth_interval`)
  /// The back-off happens at the hysteresis-th overflow since the counter was last refilled; the
  /// counter refills (to hysteresis) after every back-off and at every growth, and a clean step
  /// alone does not refill it. So each back-off costs `hysteresis` overflows. (DeepSpeed's
  /// counter refills only at growth, so after its first back-off every overflow backs off at once
  /// until the scale grows again.) 1: back off at every overflow, as PyTorch.
  int64_t hysteresis = 1;
  double min_scale = 1.0;          ///< the floor: a back-off never goes below it
  double max_scale = 16777216.0;   ///< the cap, 2^24: a growth never goes above it
  /// Stop with a diagnostic after this many consecutive skipped steps at the floor (0: never).
  int64_t max_skips_at_floor = 20;
  /// Steps kept in history().
  int64_t history_size = 1000;
  /// false: every call is a no-op and training is exactly as without a scaler.
  bool enabled = true;
  /// Where the state lives (PyTorch's GradScaler(device)). Unset: the device of the first loss
  /// passed to scale() — a state loaded before any scale() waits on the CPU and moves there at
  /// that first scale(), so PyTorch's resume (load, then train on the GPU) works as it is. Set: a
  /// state dict loads onto it, and a loss on another device is a DeviceError.
  std::optional<Device> device;
};

enum class SkipReason { none, overflow, non_finite_loss };
const char* skip_reason_name(SkipReason r);

/// The outcome of one scaler.step(). Fields are read lazily: on a GPU the first read waits for the
/// step to finish; ignoring the result costs nothing.
class StepResult {
 public:
  /// The result of a disabled scaler's step: applied, scale 1, no norm.
  StepResult() = default;
  /// Whether the optimizer updated the parameters (reason() == SkipReason::none).
  bool applied() const;
  /// Why the step was skipped: non_finite_loss takes precedence over overflow.
  SkipReason reason() const;
  /// The scale the step ran with (the gradients carried it).
  double scale_before() const;
  /// The scale after update(); equals scale_before() until update() ran.
  double scale_after() const;
  /// The total 2-norm of the optimizer's unscaled gradients, before any clipping (non-finite when
  /// they are). An enabled scaler measures it at every step, in unscale_ or in step()'s check
  /// pass; empty only for a default-constructed (disabled scaler's) result.
  std::optional<double> grad_norm() const;
  /// The skip decision where it was made, without reading it: a 0-d f32 on the scaler's device,
  /// nonzero when the step was skipped (the found_inf the optimizer was given). What
  /// LRScheduler::step_on_device takes. Undefined for a disabled scaler's result (always applied).
  Tensor skip_flag() const;
  /// A copy of this result whose values are copied on the device as they are now, without a host
  /// wait. For the result of a step captured in a CUDA graph: its tensors are rewritten by every
  /// replay, so a snapshot after each replay keeps that replay's outcome (the scaler's own history
  /// holds the steps it ran on the host only).
  StepResult snapshot() const;

  struct Record;  // internal, shared with the scaler
  /// Internal: made by GradScaler::step, sharing the record that update() completes.
  explicit StepResult(std::shared_ptr<Record> r) : record_(std::move(r)) {}

 private:
  std::shared_ptr<Record> record_;
};

/// One entry of the bounded history.
struct HistoryEntry {
  /// The number of update() calls before the step (0-based); optimizers sharing the scaler get one
  /// entry each with the same step.
  int64_t step;
  double scale;        ///< the scale the step ran with
  bool applied;        ///< as StepResult::applied()
  SkipReason reason;   ///< as StepResult::reason()
  double grad_norm;    ///< as StepResult::grad_norm(); NaN when that is empty
};

/// Dynamic loss scaling (see the file comment for the loop and what it adds to PyTorch's). Its
/// state lives on the device of the first loss or gradient it sees; one scaler serves one device.
/// Not thread-safe: one training loop drives it.
class GradScaler {
 public:
  /// Checks the options (ValueError naming the one out of range, see GradScalerOptions). Makes no
  /// tensor yet: the state is created by the first scale(), unscale_() or step().
  explicit GradScaler(GradScalerOptions options = {});
  /// Forgets being this thread's last_scaling() scaler.
  ~GradScaler();
  /// Copies the state (the copy is not last_scaling() until it scales a loss).
  GradScaler(const GradScaler&) = default;
  /// Copies the state.
  GradScaler& operator=(const GradScaler&) = default;
  /// Moves the state (the new object is not last_scaling() until it scales a loss).
  GradScaler(GradScaler&&) = default;
  /// Moves the state.
  GradScaler& operator=(GradScaler&&) = default;

  /// loss · scale (fp32). Records whether the loss is finite; with gradient accumulation call it
  /// for each micro-batch (the flags accumulate until update()).
  Tensor scale(const Tensor& loss);

  /// Unscales the gradients of `opt`'s parameters in place in one fused pass that also finds
  /// non-finite values, counts them per parameter and computes per-parameter squared norms.
  /// Idempotent within one optimizer step; after step() and before update() it is an error.
  ///
  /// f16 gradients (low-precision model mode in f16) are the exception: rounding g / scale back to
  /// f16 would flush every value below 6e-8 to zero, undoing what the scale was for. When any
  /// gradient of `opt` is f16, unscale_ checks and measures the unscaled values without writing
  /// them; the gradients stay scaled in storage, clip_grad_norm_ below acts on them correctly,
  /// and step() has the optimizer divide by the scale in its fp32 update. (PyTorch refuses to
  /// unscale f16 gradients instead.) Clip through the scaler, not optim::clip_grad_norm_, then.
  void unscale_(optim::Optimizer& opt);

  /// clip_grad_norm_ over opt's parameters using the norms unscale_ computed (no second pass);
  /// calls unscale_ first if needed. Returns the total norm (non-finite when the gradients are;
  /// then nothing is clipped and step() will skip).
  Tensor clip_grad_norm_(optim::Optimizer& opt, double max_norm);

  /// Runs opt.step() unless the gradients or the loss were non-finite. When unscale_ was not
  /// called, the gradients are checked in a read-only pass and the optimizer unscales them in its
  /// update (one pass less).
  StepResult step(optim::Optimizer& opt);

  /// Adjusts the scale once per optimizer step (after every optimizer sharing the scaler stepped):
  /// back-off on overflow (after `hysteresis` overflows), growth after growth_interval clean
  /// steps, nothing on a non-finite loss. Never waits for the device. The floor check (a
  /// StateError with a diagnostic after max_skips_at_floor consecutive skips at the floor) reads
  /// the longest run of such skips since it last looked (kept on the device, so a run that ended
  /// in between is still seen) every min(max_skips_at_floor, 8) updates: with the state on the CPU, where
  /// reading is free, update() itself throws; on a CUDA device the check waits for the next host
  /// read of the scaler (get_scale, history, skipped_steps, state_dict), which throws instead, as
  /// a PyTorch device-side assert surfaces at the next synchronisation. precis-train reads
  /// get_scale() at each log point.
  void update();

  /// The current scale (reads the device; runs a floor check that update() left due).
  double get_scale() const;
  /// The scale where it lives, without reading it: the 0-d f32 tensor on the scaler's device that
  /// scale() multiplies by (PyTorch's scaler._scale); undefined before the first scale(). The
  /// scaler's state is updated in place — update() and load_state_dict() write into the same
  /// tensors — so that a step captured in a CUDA graph carries the scale from replay to replay.
  Tensor scale_tensor() const { return scale_; }
  /// Runs the floor check now (a host read): StateError with the diagnostic when the last
  /// max_skips_at_floor steps were all skipped with the scale at its floor. update() schedules it
  /// every few updates itself; a loop replaying a captured step, where update()'s host code does
  /// not run, calls it at its log points. A no-op when disabled or before the first step.
  void check_floor() const;
  bool is_enabled() const { return options_.enabled; }  ///< GradScalerOptions::enabled
  /// The options in force (those of the last load_state_dict, if any); aliases the scaler's copy.
  const GradScalerOptions& options() const { return options_; }

  /// The rank-local "a loss passed to scale() was non-finite since the last update()" flag: a 0-d
  /// f32 tensor, 0 or 1, on the scaler's device; undefined before the first scale() (and when
  /// disabled). step() skips and update() keeps the scale when it is set.
  Tensor loss_nonfinite() const { return loss_nonfinite_; }
  /// Replaces that flag with `flag` (0-d, nonzero meaning non-finite), before step(). Data-parallel
  /// training (dist::DistributedDataParallel) reduces the flags of every rank with the gradients and
  /// sets the reduced one here, so that every rank skips and keeps its scale alike. StateError
  /// before the first scale(); ShapeError unless one element.
  void set_loss_nonfinite(const Tensor& flag);
  /// The enabled scaler whose scale() this thread called last (null before any, and once it is
  /// destroyed): data-parallel training reduces its non-finite-loss flag when no scaler was named
  /// in DistributedDataParallelOptions, so forgetting to name it cannot desynchronise the ranks.
  static GradScaler* last_scaling();

  /// Names for messages: (name, parameter) pairs, e.g. a module's named_parameters().
  void set_parameter_names(const std::vector<std::pair<std::string, Tensor>>& named);
  /// For the last optimizer step with non-finite gradients (the newest update() round, or the
  /// steps since the last update(), in which any optimizer's gradients were non-finite; later
  /// clean steps do not clear it): (parameter name, non-finite count) over every optimizer that
  /// stepped in that round, largest count first. Empty when no step has overflowed. Reads the
  /// device.
  std::vector<std::pair<std::string, int64_t>> last_overflow() const;

  /// The last history_size steps, oldest first (reads the device).
  std::vector<HistoryEntry> history() const;
  /// Optimizer steps completed: update() calls (skipped steps included; 0 when disabled).
  int64_t steps() const { return steps_; }
  /// The skipped entries of history(): only the retained last history_size entries count, one per
  /// optimizer per step (reads the device).
  int64_t skipped_steps() const;

  /// Every field: scale, growth and hysteresis trackers, floor-skip counter, counters, options and
  /// the history. Empty when disabled.
  StateDict state_dict() const;
  /// Restores what state_dict() returned, options included (onto this scaler's device, or the CPU
  /// before its first use). StateError when disabled, for an empty dict, between step() and
  /// update(), or between unscale_(opt) and its step().
  void load_state_dict(const StateDict& dict);

 private:
  enum class Stage { ready, unscaled, stepped };
  struct OptimizerState {
    Stage stage = Stage::ready;
    Tensor found_inf;  // 0-d f32: non-finite gradients this step
    Tensor counts;     // 1-D f32 per parameter with a gradient
    Tensor sq_norms;   // 1-D f64 per parameter with a gradient
    std::vector<Tensor> params;  // those with gradients, matching counts / sq_norms
    Tensor grad_norm;  // 0-d, set by clip_grad_norm_ or step
    bool deferred = false;  // unscale_ left the gradients scaled (f16); step() passes the scale
    std::vector<uint32_t> versions;  // the gradients' versions when sq_norms were taken
  };

  void ensure_state(const Tensor& like);
  OptimizerState& state_of(optim::Optimizer& opt);
  void check_grads(optim::Optimizer& opt, OptimizerState& s, bool write);
  std::string name_of(const Tensor& p, size_t fallback_index) const;

  GradScalerOptions options_;
  Device device_ = Device::cpu();
  bool initialised_ = false;
  // A state loaded before any scale() without options_.device: on the CPU until the first
  // scale(), which moves it to the loss's device.
  bool placement_pending_ = false;
  // Device-resident state (0-d f32).
  Tensor scale_;
  Tensor growth_tracker_;
  Tensor hysteresis_tracker_;
  Tensor floor_skips_;     // consecutive skips at the floor
  mutable Tensor floor_run_;  // the longest such run since the last floor check (which reads, resets it)
  Tensor loss_nonfinite_;  // set by scale() since the last update()
  std::map<const optim::Optimizer*, OptimizerState> per_optimizer_;
  std::vector<std::shared_ptr<StepResult::Record>> pending_;  // steps since the last update()
  std::deque<std::shared_ptr<StepResult::Record>> history_;
  std::map<const TensorImpl*, std::string> names_;
  // Overflow attribution without a host read per step: each step() records its optimizer's
  // per-parameter counts; update() files the round's records as unresolved; last_overflow() (or a
  // backlog of kMaxUnresolved rounds) reads them, newest first, and keeps the newest round that
  // overflowed.
  struct OverflowRecord {
    std::vector<Tensor> params;  // those with gradients, matching counts
    Tensor counts;               // 1-D f32 non-finite counts
    Tensor found_inf;            // 0-d f32
  };
  using OverflowRound = std::vector<OverflowRecord>;  // every optimizer stepped in one round
  static bool overflowed(const OverflowRound& round);
  void resolve_overflow() const;
  void fold_unresolved();
  // Throws the floor diagnostic when a check is due and the limit is reached (reads the device).
  void check_floor_if_due() const;
  mutable bool floor_check_due_ = false;
  OverflowRound round_records_;                          // steps since the last update()
  mutable std::deque<OverflowRound> unresolved_rounds_;  // after update(), oldest first
  mutable OverflowRound last_overflow_round_;            // the newest resolved round that overflowed
  std::deque<Tensor> recent_loss_tensors_;  // for the floor diagnostic (read only then)
  int64_t steps_ = 0;
  int64_t updates_since_check_ = 0;
};

}  // namespace precis::amp
