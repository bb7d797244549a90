#include "models/nn/fp8.h"

#include "models/nn/linear.h"
#include "tensor/factory.h"

namespace precis::nn {

namespace {

// The three buffers of one operand's state, registered under `prefix`.
void add_operand(Module& m, const std::string& prefix, int64_t history_len, Tensor& history, Tensor& scale,
                 Tensor& scale_inv) {
  history = zeros({history_len});
  scale = ones({});
  scale_inv = ones({});
  m.register_buffer(prefix + "amax_history", history);
  m.register_buffer(prefix + "scale", scale);
  m.register_buffer(prefix + "scale_inv", scale_inv);
}

amp::DelayedScalingOptions operand_options(Fp8Format format, const amp::Fp8LinearOptions& o) {
  return {.format = format, .margin = o.margin, .amax_history_len = o.amax_history_len, .amax_compute = o.amax_compute};
}

}  // namespace

Fp8LinearScaling::Fp8LinearScaling(amp::Fp8LinearOptions options) : options_(options) {
  amp::check_delayed_scaling_options({.margin = options.margin, .amax_history_len = options.amax_history_len});
  add_operand(*this, "input_", options.amax_history_len, input_history, input_scale, input_scale_inv);
  add_operand(*this, "weight_", options.amax_history_len, weight_history, weight_scale, weight_scale_inv);
  add_operand(*this, "grad_output_", options.amax_history_len, grad_history, grad_scale, grad_scale_inv);
}

amp::Fp8LinearState Fp8LinearScaling::state() const {
  return amp::Fp8LinearState(
      amp::DelayedScalingState(operand_options(Fp8Format::e4m3, options_), input_history, input_scale, input_scale_inv),
      amp::DelayedScalingState(operand_options(Fp8Format::e4m3, options_), weight_history, weight_scale,
                               weight_scale_inv),
      amp::DelayedScalingState(operand_options(Fp8Format::e5m2, options_), grad_history, grad_scale, grad_scale_inv),
      weight_cache_);
}

int enable_fp8(Module& model, amp::Fp8LinearOptions options,
               const std::function<bool(const std::string&, const Linear&)>& filter) {
  int converted = 0;
  for (const auto& [name, m] : model.named_modules()) {
    auto* linear = dynamic_cast<Linear*>(m);
    if (linear == nullptr || linear->fp8_enabled() || (filter && !filter(name, *linear))) continue;
    linear->enable_fp8(options);
    ++converted;
  }
  return converted;
}

void update_fp8(Module& model) {
  for (const auto& [name, m] : model.named_modules())
    if (auto* linear = dynamic_cast<Linear*>(m); linear != nullptr && linear->fp8_enabled())
      linear->fp8_scaling().state().update();
}

}  // namespace precis::nn
