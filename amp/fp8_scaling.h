#pragma once
// Per-tensor scaling for fp8 (docs/fp8.md): the two ways Transformer Engine (TE) picks the factor
// a tensor is multiplied by before its saturating cast to fp8, so that its largest magnitude
// (amax) lands near the format's largest value.
//
//   x_fp8 = saturate_fp8(x · scale)      scale_inv = 1 / scale      x ≈ x_fp8 · scale_inv
//
// scaled_matmul (ops/functional.h) takes the scale_invs of its operands.
//
// DelayedScaling (TE's DelayedScaling recipe): the scale used in step t comes from the amaxes of
// earlier steps, kept in a history, so a tensor is cast in one pass without first reading it for
// its amax. CurrentScaling (TE's Float8CurrentScaling): the scale comes from the tensor's own
// amax, one extra read per cast.
//
// The formulas are TE's, bit for bit in fp32, and the tests check them against a re-implementation
// of TE's code on recorded amax sequences (tests/golden/gen_fp8_fixtures.py names the files and
// commits followed). This is host-side math on floats; amp/fp8_recipe.h keeps the same state in
// device tensors (DelayedScalingState, equal bit for bit), and the recipe that applies it per
// GEMM inside autocast is not written yet (docs/fp8.md).
#include <cstdint>
#include <vector>

#include "core/float8.h"

namespace precis::amp {

/// How DelayedScaling turns its amax history into the amax of the scale (TE's amax_compute_algo).
enum class AmaxCompute : uint8_t {
  max,          ///< the largest amax in the history window ("max", TE's default)
  most_recent,  ///< the amax of the step just ended ("most_recent")
};

/// DelayedScaling's parameters, TE's names and defaults; fill only what you change:
/// {.format = Fp8Format::e5m2, .margin = 1}.
struct DelayedScalingOptions {
  Fp8Format format = Fp8Format::e4m3;       ///< the cast's format: its largest value is the target
  float margin = 0.0f;                      ///< scale = (fp8_max / amax) / 2^margin; finite
  int64_t amax_history_len = 1024;          ///< steps in the history window, >= 1
  AmaxCompute amax_compute = AmaxCompute::max;  ///< how the window gives the amax
};

/// ValueError unless amax_history_len >= 1 and the margin is finite (what every DelayedScaling
/// constructor checks).
void check_delayed_scaling_options(const DelayedScalingOptions& options);

/// A scale and its inverse (what scaled_matmul takes).
struct Fp8Scale {
  float scale = 1.0f;      ///< the factor applied before the cast
  float scale_inv = 1.0f;  ///< 1 / scale in fp32, applied after the GEMM
};

/// One step of TE's delayed-scaling update (transformer_engine/common/recipe/delayed_scaling.cu,
/// kernel_bulk), a pure function. `history` (length >= 1) holds, as TE lays it out, in slot 0 the
/// amax recorded in the step that just ended and in slots 1.. the earlier steps (slot 1 the
/// oldest, the last slot the newest):
///  - if slot 0 is 0 (nothing recorded), the history is left as it is and the scale is kept;
///  - otherwise the history is rolled one slot (slot i takes slot i + 1, the last slot takes the
///    new amax) and slot 0 is cleared for the next step; the amax used is, for AmaxCompute::max,
///    the largest value of the history as it was before the roll (the new amax and every earlier
///    slot, the one rolled out in this update included; a NaN is ignored, as fmaxf does), for
///    most_recent the new amax;
///  - scale = (fp8_max · 2^-margin) / amax when that amax is finite and positive, else the previous
///    scale (an inf or NaN amax keeps it); a scale that overflows fp32 (a tiny amax) becomes
///    FLT_MAX; scale_inv = 1 / scale.
/// Throws ValueError for an empty history or a non-finite margin.
Fp8Scale delayed_scaling_update(std::vector<float>& history, Fp8Scale previous, const DelayedScalingOptions& options);

/// The per-tensor state of TE's DelayedScaling recipe: the amax history and the current scale.
///
///   amp::DelayedScaling s({.format = Fp8Format::e4m3});
///   // per micro-batch: cast with s.scale(), then record the tensor's amax
///   s.record(amax);
///   // once per optimizer step
///   s.update();
class DelayedScaling {
 public:
  /// A history of options.amax_history_len zeros and scale 1 (TE's initial state). Throws
  /// ValueError for amax_history_len < 1 or a non-finite margin.
  explicit DelayedScaling(DelayedScalingOptions options = {});

  /// Folds one amax into the current step's slot: the larger of the two, a NaN sticking (the step
  /// saw a NaN). Several calls per step (micro-batches; ranks, before the max all-reduce) combine
  /// as the max, which is what TE's amax reduction computes.
  void record(float amax);
  /// Ends the step: delayed_scaling_update on the history; returns the new scale.
  Fp8Scale update();

  /// The scale for casts in the current step.
  float scale() const { return scale_.scale; }
  /// 1 / scale(), for scaled_matmul.
  float scale_inv() const { return scale_.scale_inv; }
  /// The history, slot 0 the current step's (amax_history_len values).
  const std::vector<float>& amax_history() const { return history_; }
  /// The options it was made with.
  const DelayedScalingOptions& options() const { return options_; }

 private:
  DelayedScalingOptions options_;
  std::vector<float> history_;
  Fp8Scale scale_;
};

/// CurrentScaling's parameters (TE's Float8CurrentScaling; defaults are TE's).
struct CurrentScalingOptions {
  Fp8Format format = Fp8Format::e4m3;  ///< the cast's format
  float amax_epsilon = 0.0f;           ///< an amax below it counts as it (a floor); >= 0
  bool power_2_scale = false;          ///< round the scale down to a power of 2 (exact scale_inv)
};

/// TE's current scaling (transformer_engine/common/recipe/recipe_common.cuh,
/// compute_scale_from_amax, for an fp32 input): amax is floored at amax_epsilon; an amax that is
/// 0, inf or NaN gives scale 1; otherwise scale = fp8_max / amax in fp32, FLT_MAX when that
/// overflows, rounded down to a power of 2 when power_2_scale. scale_inv = 1 / scale.
Fp8Scale current_scaling(float amax, const CurrentScalingOptions& options = {});

}  // namespace precis::amp
