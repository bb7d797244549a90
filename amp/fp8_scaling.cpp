// TE's scaling formulas in fp32 (amp/fp8_scaling.h says which TE files they follow).
#include "amp/fp8_scaling.h"

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

#include "core/error.h"

namespace precis::amp {

namespace {

constexpr float kFltMax = std::numeric_limits<float>::max();

}  // namespace

void check_delayed_scaling_options(const DelayedScalingOptions& o) {
  PRECIS_CHECK(o.amax_history_len >= 1, "DelayedScaling: amax_history_len must be >= 1, got ", o.amax_history_len,
               " (TE's default is 1024; 1 scales from the last step alone)");
  PRECIS_CHECK(std::isfinite(o.margin), "DelayedScaling: margin must be finite, got ", o.margin);
}

Fp8Scale delayed_scaling_update(std::vector<float>& history, Fp8Scale previous, const DelayedScalingOptions& options) {
  check_delayed_scaling_options(options);
  PRECIS_CHECK(!history.empty(), "delayed_scaling_update: the amax history is empty; it holds amax_history_len >= 1 "
               "values, slot 0 the step's amax");
  const size_t length = history.size();
  const float last = history[0];
  float amax = 0.0f;
  if (last != 0.0f) {  // a NaN is != 0 too: it is rolled in, and ignored by the max below
    // Roll: slot i takes slot i + 1, the last slot the new amax; the window's max is taken over
    // exactly those values. Slot 0 is cleared for the next step's record.
    for (size_t i = 0; i < length; ++i) {
      const float a = i + 1 < length ? history[i + 1] : last;
      amax = std::fmax(amax, a);
      history[i] = i > 0 ? a : 0.0f;
    }
  }
  if (options.amax_compute == AmaxCompute::most_recent) amax = last;
  const float scaled_max = fp8_max(options.format) * std::pow(2.0f, -options.margin);
  float scale = std::isfinite(amax) && amax > 0.0f ? scaled_max / amax : previous.scale;
  if (std::isinf(scale)) scale = kFltMax;
  return {scale, 1.0f / scale};
}

DelayedScaling::DelayedScaling(DelayedScalingOptions options) : options_(options) {
  check_delayed_scaling_options(options_);
  history_.assign(static_cast<size_t>(options_.amax_history_len), 0.0f);
}

void DelayedScaling::record(float amax) {
  float& slot = history_[0];
  slot = std::isnan(amax) || std::isnan(slot) ? std::numeric_limits<float>::quiet_NaN() : std::fmax(slot, amax);
}

Fp8Scale DelayedScaling::update() {
  scale_ = delayed_scaling_update(history_, scale_, options_);
  return scale_;
}

Fp8Scale current_scaling(float amax, const CurrentScalingOptions& options) {
  PRECIS_CHECK(options.amax_epsilon >= 0.0f, "current_scaling: amax_epsilon must be >= 0, got ", options.amax_epsilon);
  if (amax < options.amax_epsilon) amax = options.amax_epsilon;  // a NaN compares false: kept
  float scale = 1.0f;
  if (!(std::isinf(amax) || amax == 0.0f || std::isnan(amax))) {
    scale = fp8_max(options.format) / amax;
    if (std::isinf(scale)) scale = kFltMax;
    if (options.power_2_scale) scale = std::bit_cast<float>(std::bit_cast<uint32_t>(scale) & 0xff800000u);
  }
  return {scale, 1.0f / scale};
}

}  // namespace precis::amp
