#pragma once
// A linear layer's three GEMMs in fp8 with delayed scaling (docs/fp8.md), Transformer Engine's
// HYBRID format: the forward GEMM E4M3 input × E4M3 weight, the input gradient E5M2 output
// gradient × E4M3 weight, the weight gradient E5M2 output gradient × E4M3 input. Each operand is
// cast with its DelayedScalingState's current scale and records its amax there; the scales change
// only in update(), once per optimizer step.
//
//   amp::Fp8LinearState state(device);
//   Tensor y = amp::fp8_linear(x, linear.weight, linear.bias, state);   // differentiable
//   loss.backward();          // the E5M2 output gradient records its amax too
//   opt.step();
//   state.update();           // the next step's scales
#include <cstdint>
#include <memory>

#include "amp/fp8_recipe.h"
#include "tensor/state_dict.h"
#include "tensor/tensor.h"

namespace precis::amp {

/// RAII guard, Transformer Engine's fp8_autocast: while one is open (and enabled) on this thread,
/// the linear layers a model converted with nn::enable_fp8 (models/nn/fp8.h) run through
/// fp8_linear; other ops follow the ordinary autocast policy. Nestable; Fp8Autocast(false) turns
/// fp8 off inside an enabled region (e.g. for an evaluation in bf16).
class Fp8Autocast {
 public:
  /// Enables (or with false disables) fp8 linear layers until destroyed, restoring the previous state.
  explicit Fp8Autocast(bool enabled = true);
  ~Fp8Autocast();
  Fp8Autocast(const Fp8Autocast&) = delete;
  Fp8Autocast& operator=(const Fp8Autocast&) = delete;

 private:
  bool previous_;
};

/// Whether an enabled Fp8Autocast region is open on this thread.
bool is_fp8_autocast_enabled();

/// The delayed-scaling options of the three operands; the formats are fixed (E4M3, E4M3, E5M2).
struct Fp8LinearOptions {
  int64_t amax_history_len = 1024;              ///< TE's default
  AmaxCompute amax_compute = AmaxCompute::max;  ///< TE's default
  float margin = 0.0f;                          ///< TE's default
};

/// The weight's fp8 cast kept across the micro-batches of one optimizer step, as Transformer
/// Engine casts a weight once per step: fp8_linear reuses it while the weight is the same tensor
/// at the same version (an optimizer step bumps it) and no update() has moved the scales since.
struct Fp8WeightCache {
  Tensor data;                    ///< the E4M3 weight
  Tensor scale_inv;               ///< the scale-inverse it was cast with
  const void* weight = nullptr;   ///< the weight's TensorImpl (identity only)
  uint32_t version = 0;           ///< the weight's version when cast
  /// Whether the cast is valid for `w` now.
  bool valid_for(const Tensor& w) const { return data.defined() && weight == w.impl() && version == w.version(); }
  /// Forgets the cast (update() calls it: the weight's scale may have moved).
  void clear() { *this = Fp8WeightCache(); }
};

/// One linear layer's fp8 state: the DelayedScalingState of its input, its weight (E4M3) and its
/// output gradient (E5M2), on the layer's device, and the weight's cast of the current step. A
/// copy shares the tensors and the cache.
class Fp8LinearState {
 public:
  /// Fresh histories (zeros) and scales 1 on `device`, and an empty weight cache.
  explicit Fp8LinearState(Device device = Device::cpu(), Fp8LinearOptions options = {});
  /// A state over existing per-operand states (e.g. over a module's buffers) and a weight cache
  /// (null: the weight is cast at every call).
  Fp8LinearState(DelayedScalingState input, DelayedScalingState weight, DelayedScalingState grad_output,
                 std::shared_ptr<Fp8WeightCache> weight_cache = nullptr);

  /// Ends the step for all three (DelayedScalingState::update) and clears the weight cache: call
  /// it once per optimizer step, after backward.
  void update();

  DelayedScalingState input;        ///< the forward GEMM's activation operand, E4M3
  DelayedScalingState weight;       ///< the weight, E4M3
  DelayedScalingState grad_output;  ///< the output gradient, E5M2
  std::shared_ptr<Fp8WeightCache> weight_cache;  ///< the weight's cast of this step; null: none kept

  /// "input.*", "weight.*", "grad_output.*": each state's state_dict.
  StateDict state_dict() const;
  /// Restores what state_dict() returned.
  void load_state_dict(const StateDict& dict);
};

/// y = x · weightᵀ + bias with the GEMMs in fp8 (see the file comment). x: (..., K) f32, bf16 or
/// f16; weight: (N, K) f32 or bf16; bias: (N) or undefined; all on one device, the state's. y:
/// (..., N) in x's dtype (the GEMM writes bf16 for bf16 inputs, f32 otherwise; the bias is added
/// in that dtype). Gradients: x's in x's dtype, the weight's and the bias's in their dtypes; the
/// bias gradient is the sum of the unquantized output gradient. The weight is cast once per step
/// (state.weight_cache; its amax recorded then). The casts record their amaxes
/// into `state`'s tensors (the forward's input and weight, the backward's output gradient; the
/// backward keeps a copy of the state, which shares them). Products are exact and sums fp32
/// (scaled_matmul; on CUDA the forward GEMM uses fast accumulation, as Transformer Engine's).
/// Errors: ShapeError, DTypeError, DeviceError naming the operands.
Tensor fp8_linear(const Tensor& x, const Tensor& weight, const Tensor& bias, Fp8LinearState& state);

}  // namespace precis::amp
