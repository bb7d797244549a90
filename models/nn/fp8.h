#pragma once
// FP8 linear layers (docs/fp8.md): a model's nn::Linear layers converted to run their GEMMs in fp8
// inside an amp::Fp8Autocast region, each with delayed-scaling state of its own kept as module
// buffers (so checkpoints hold it and Module::to moves it), as torchao's convert_to_float8_training
// and Transformer Engine's fp8_autocast do.
//
//   nn::enable_fp8(model, {.amax_history_len = 16});   // before the optimizer and any load
//   for (...) {
//     { amp::Autocast ac(DType::bf16); amp::Fp8Autocast fp8; loss = loss_fn(model.forward(x)); }
//     loss.backward(); opt.step(); opt.zero_grad();
//     nn::update_fp8(model);                              // once per optimizer step
//   }
#include <functional>
#include <memory>
#include <string>

#include "amp/fp8_linear.h"
#include "models/nn/module.h"

namespace precis::nn {

class Linear;

/// The delayed-scaling state of one fp8 linear layer as module buffers: "input_", "weight_" and
/// "grad_output_" each followed by "amax_history", "scale" and "scale_inv" (f32, kept f32 in a
/// low-precision model). nn::Linear::enable_fp8 adds it as the layer's child "fp8".
class Fp8LinearScaling : public Module {
 public:
  /// Fresh histories and scales 1 (on the CPU; the module moves with its parent).
  explicit Fp8LinearScaling(amp::Fp8LinearOptions options = {});
  /// A state over this module's buffers (it shares them: updates land here) and its weight cache
  /// (the weight's cast of the current step; a copy of the module shares it, keyed by the weight).
  amp::Fp8LinearState state() const;
  /// The options it was made with.
  const amp::Fp8LinearOptions& options() const { return options_; }
  std::string type_name() const override { return "Fp8LinearScaling"; }
  bool keep_fp32_params() const override { return true; }

 private:
  amp::Fp8LinearOptions options_;
  std::shared_ptr<amp::Fp8WeightCache> weight_cache_ = std::make_shared<amp::Fp8WeightCache>();
  Tensor input_history, input_scale, input_scale_inv;
  Tensor weight_history, weight_scale, weight_scale_inv;
  Tensor grad_history, grad_scale, grad_scale_inv;
};

/// Converts every nn::Linear of `model` for which `filter(name, layer)` is true (all when empty) to
/// fp8 (Linear::enable_fp8 with `options`). Returns how many it converted. Call it before building
/// the optimizer and before loading a checkpoint that holds fp8 state.
int enable_fp8(Module& model, amp::Fp8LinearOptions options = {},
               const std::function<bool(const std::string&, const Linear&)>& filter = {});
/// Ends the step of every fp8 linear layer of `model` (amp::Fp8LinearState::update): the scales the
/// next step casts with, from this step's amaxes. Once per optimizer step, after backward.
void update_fp8(Module& model);

}  // namespace precis::nn
