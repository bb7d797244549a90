#pragma once
// The device side of the fp8 recipe (docs/fp8.md): the scaled cast a recipe casts every GEMM
// operand with, and DelayedScaling's state kept in tensors on the tensors' device, so that a
// training step on a GPU casts, records amaxes and updates scales without reading anything back
// (and can be captured in a CUDA graph: every tensor is updated in place).
//
//   amp::DelayedScalingState s({.format = Fp8Format::e4m3}, device);
//   amp::Fp8Cast c = amp::fp8_scaled_cast(x, s.scale(), Fp8Format::e4m3);   // c.data: f8_e4m3
//   ... scaled_matmul(c.data, ..., s.scale_inv(), ...) ...
//   s.record(c.amax);    // per micro-batch
//   s.update();          // once per optimizer step
//
// Both follow amp/fp8_scaling.h's host rules bit for bit (the tests compare them): the same fp32
// products and divisions, the same handling of zero, inf and NaN amaxes.
#include <string>

#include "amp/fp8_scaling.h"
#include "core/device.h"
#include "tensor/state_dict.h"
#include "tensor/tensor.h"

namespace precis::amp {

/// What fp8_scaled_cast returns.
struct Fp8Cast {
  Tensor data;  ///< x's shape, contiguous, f8_e4m3 or f8_e5m2
  Tensor amax;  ///< max |x| before scaling: an f32 0-d tensor on x's device (NaN when x holds a NaN, 0 when empty)
};

/// The recipe's cast: data = saturate_fp8(float(x) · scale) — x·scale formed in fp32, rounded to
/// nearest even, a finite overflow and ±inf saturating to ±max in both formats, NaN kept (CUDA's
/// cvt.rn.satfinite, Transformer Engine's cast) — and amax = max |x|, the value TE records while
/// casting, both in one pass (the op scaled_fp8_cast). x: f32, bf16 or f16 (DTypeError
/// otherwise); scale: one f32 value on x's device (DTypeError / DeviceError otherwise), read by
/// the kernel, so no host read. Not
/// differentiable. While an amp::Audit is open the cast is recorded under `operand` (amax, scale,
/// the saturated and flushed counts: Audit::fp8_records), which reads the device.
Fp8Cast fp8_scaled_cast(const Tensor& x, const Tensor& scale, Fp8Format format,
                        const std::string& operand = "fp8_scaled_cast");

/// DelayedScaling (amp/fp8_scaling.h) with its amax history and scale in tensors on a device,
/// updated by ops there, in place. Equal to the host class bit for bit after every record and
/// update. A copy shares the tensors (as a Tensor copy does): both see every update.
class DelayedScalingState {
 public:
  /// A history of options.amax_history_len zeros and scale 1 on `device` (TE's initial state).
  /// ValueError as DelayedScaling for bad options.
  explicit DelayedScalingState(DelayedScalingOptions options = {}, Device device = Device::cpu());
  /// A state over existing tensors, used in place (a module's buffers: nn::enable_fp8): history
  /// 1-D f32 of amax_history_len values, scale and scale_inv one f32 value each, on one device
  /// (ShapeError / DTypeError / DeviceError otherwise).
  DelayedScalingState(DelayedScalingOptions options, Tensor history, Tensor scale, Tensor scale_inv);

  /// Folds an amax (one f32 value on the state's device, e.g. Fp8Cast::amax) into the current
  /// step's slot: the larger of the two, a NaN sticking. DTypeError / DeviceError otherwise.
  void record(const Tensor& amax);
  /// Ends the step: delayed_scaling_update of the history and scale, on the device.
  void update();

  /// The scale for casts in the current step: a 0-d f32 tensor, the live one (updated in place).
  const Tensor& scale() const { return scale_; }
  /// 1 / scale(), for scaled_matmul: the live 0-d f32 tensor.
  const Tensor& scale_inv() const { return scale_inv_; }
  /// The history, slot 0 the current step's: the live 1-D f32 tensor of amax_history_len values.
  const Tensor& amax_history() const { return history_; }
  /// The options it was made with.
  const DelayedScalingOptions& options() const { return options_; }

  /// "amax_history" (1-D f32), "scale" and "scale_inv" (0-d f32): copies on the CPU.
  StateDict state_dict() const;
  /// Restores what state_dict() returned into the live tensors (ShapeError when the history
  /// length differs, ValueError for a missing entry).
  void load_state_dict(const StateDict& dict);

 private:
  DelayedScalingOptions options_;
  Tensor history_, scale_, scale_inv_;
};

}  // namespace precis::amp
