// The fp8 recipe's device-side cast and DelayedScaling state, written with ops that run where the
// tensors are (amp/fp8_recipe.h); each step mirrors the host rule in amp/fp8_scaling.cpp.
#include "amp/fp8_recipe.h"

#include <cmath>
#include <limits>
#include <utility>

#include "amp/audit.h"
#include "autograd/grad_mode.h"
#include "core/error.h"
#include "ops/functional.h"
#include "tensor/factory.h"

namespace precis::amp {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

DType fp8_dtype(Fp8Format format) { return format == Fp8Format::e4m3 ? DType::f8_e4m3 : DType::f8_e5m2; }

// Checks that `t` holds one f32 value on `device`.
void check_scalar(const char* who, const char* what, const Tensor& t, Device device) {
  PRECIS_CHECK(t.defined(), who, ": ", what, " is undefined");
  PRECIS_CHECK_DTYPE(t.dtype() == DType::f32 && t.numel() == 1, who, ": ", what, " must be one f32 value, got ",
                     t.describe());
  PRECIS_CHECK_DEVICE(t.device() == device, who, ": ", what, " ", t.describe(), " is not on ", device.str());
}

// NaN → 0 (a NaN compares unequal to itself): what fmaxf does with a NaN operand.
Tensor nan_to_zero(const Tensor& t) { return where(eq(t, t), t, 0.0); }

}  // namespace

Fp8Cast fp8_scaled_cast(const Tensor& x, const Tensor& scale, Fp8Format format, const std::string& operand) {
  PRECIS_CHECK(x.defined(), "fp8_scaled_cast: the input is undefined");
  PRECIS_CHECK_DTYPE(x.dtype() == DType::f32 || x.dtype() == DType::bf16 || x.dtype() == DType::f16,
                     "fp8_scaled_cast: the input must be f32, bf16 or f16, got ", x.describe());
  check_scalar("fp8_scaled_cast", "scale", scale, x.device());
  // One pass (the op's kernel): the saturating cast of x·scale and max |x|.
  ScaledFp8Cast cast = scaled_fp8_cast(x.detach(), scale, fp8_dtype(format));
  Fp8Cast out{std::move(cast.data), std::move(cast.amax)};
  if (Audit* audit = open_audit()) audit->observe_fp8(operand, x, scale, out.data, fp8_max(format));
  return out;
}

DelayedScalingState::DelayedScalingState(DelayedScalingOptions options, Device device) : options_(options) {
  check_delayed_scaling_options(options);
  history_ = zeros({options.amax_history_len}, {.device = device});
  scale_ = ones({}, {.device = device});
  scale_inv_ = ones({}, {.device = device});
}

DelayedScalingState::DelayedScalingState(DelayedScalingOptions options, Tensor history, Tensor scale,
                                         Tensor scale_inv)
    : options_(options), history_(std::move(history)), scale_(std::move(scale)), scale_inv_(std::move(scale_inv)) {
  check_delayed_scaling_options(options);  // no host history: this runs at every fp8 layer's forward
  const char* who = "DelayedScalingState";
  PRECIS_CHECK(history_.defined(), who, ": the amax history is undefined");
  PRECIS_CHECK_SHAPE(history_.dim() == 1 && history_.numel() == options.amax_history_len, who, ": the amax history ",
                     history_.describe(), " must hold amax_history_len = ", options.amax_history_len, " values");
  PRECIS_CHECK_DTYPE(history_.dtype() == DType::f32, who, ": the amax history must be f32, got ", history_.describe());
  check_scalar(who, "scale", scale_, history_.device());
  check_scalar(who, "scale_inv", scale_inv_, history_.device());
}

void DelayedScalingState::record(const Tensor& amax) {
  check_scalar("DelayedScalingState::record", "amax", amax, history_.device());
  NoGradGuard no_grad;
  // maximum propagates a NaN from either side: the host rule's sticky NaN.
  Tensor slot = history_.narrow(0, 0, 1);
  slot.copy_(maximum(slot, amax.reshape({1})));
}

void DelayedScalingState::update() {
  NoGradGuard no_grad;
  const int64_t length = history_.numel();
  const Device device = history_.device();
  const Tensor last = history_.narrow(0, 0, 1);
  const Tensor rolled_in = ne(last, 0.0);  // a NaN is != 0 too: rolled in, then ignored by the max
  // The roll: slot 0 cleared, slot i the old slot i + 1, the last slot the new amax.
  const Tensor zero = zeros({1}, {.device = device});
  const Tensor rolled = length == 1 ? zero : cat({zero, history_.narrow(0, 2, length - 2), last});
  // The window's amax, for max: fmaxf over the old history (slot 0 is the new amax), from 0.
  Tensor amax = options_.amax_compute == AmaxCompute::max
                    ? where(rolled_in, maximum(max(nan_to_zero(history_)), 0.0).reshape({1}), 0.0)
                    : last.clone();
  history_.copy_(where(rolled_in, rolled, history_));
  // scale = (fp8_max · 2^-margin) / amax for a finite positive amax, else the previous scale; a
  // quotient that overflows fp32 becomes FLT_MAX. The constant is formed in fp32 as on the host.
  const float scaled_max = fp8_max(options_.format) * std::pow(2.0f, -options_.margin);
  amax = amax.reshape({});
  const Tensor usable = gt(where(lt(abs(amax), kInf), amax, 0.0), 0.0);
  Tensor scale = where(usable, div(full({}, static_cast<double>(scaled_max), {.device = device}), amax), scale_);
  scale = where(ne(scale, kInf), scale, static_cast<double>(std::numeric_limits<float>::max()));
  scale_.copy_(scale);
  scale_inv_.copy_(div(ones({}, {.device = device}), scale_));
}

StateDict DelayedScalingState::state_dict() const {
  auto cpu = [](const Tensor& t) { return t.to(Device::cpu()).clone(); };
  return {{"amax_history", cpu(history_)}, {"scale", cpu(scale_)}, {"scale_inv", cpu(scale_inv_)}};
}

void DelayedScalingState::load_state_dict(const StateDict& dict) {
  const char* owner = "DelayedScalingState::load_state_dict";
  const Tensor history = state_tensor(dict, "amax_history", owner);
  PRECIS_CHECK_SHAPE(history.dim() == 1 && history.numel() == history_.numel(), owner, ": the saved amax history ",
                     history.describe(), " does not have this state's ", history_.numel(),
                     " values (amax_history_len)");
  NoGradGuard no_grad;
  history_.copy_(history.to(DType::f32).to(history_.device()));
  scale_.copy_(state_tensor(dict, "scale", owner).to(DType::f32).reshape({}).to(scale_.device()));
  scale_inv_.copy_(state_tensor(dict, "scale_inv", owner).to(DType::f32).reshape({}).to(scale_inv_.device()));
}

}  // namespace precis::amp
