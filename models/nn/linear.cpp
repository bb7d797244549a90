#include "models/nn/linear.h"

#include <cmath>

#include "amp/autocast.h"
#include "models/nn/init.h"
#include "ops/functional.h"
#include "tensor/factory.h"

namespace precis::nn {

Linear::Linear(int64_t in_features, int64_t out_features, Options options)
    : in_features_(in_features), out_features_(out_features) {
  PRECIS_CHECK(in_features > 0 && out_features > 0, "nn::Linear: in_features and out_features must be positive, got ",
               in_features, " and ", out_features);
  weight = empty({out_features, in_features});
  if (options.bias) bias = empty({out_features});
  reset_parameters(options.generator);
  register_parameter("weight", weight);
  register_parameter("bias", bias);
}

void Linear::reset_parameters(Generator* gen) {
  init::kaiming_uniform_(weight, std::sqrt(5.0), init::FanMode::fan_in, "leaky_relu", gen);
  if (bias.defined()) {
    const double bound = 1.0 / std::sqrt(static_cast<double>(in_features_));
    init::uniform_(bias, -bound, bound, gen);
  }
}

Tensor Linear::forward(const Tensor& x) {
  PRECIS_CHECK_SHAPE(x.dim() >= 1 && x.size(-1) == in_features_, "nn::Linear(", in_features_, ", ", out_features_,
                     "): input ", x.describe(), " must end with in_features = ", in_features_);
  if (runs_fp8()) {
    const DeviceType dev = x.device().type;
    const Tensor in = amp::is_autocast_enabled(dev) ? x.to(amp::autocast_dtype(dev)) : x;
    amp::Fp8LinearState state = fp8_->state();  // over the layer's buffers
    return amp::fp8_linear(in, weight, bias, state);
  }
  return linear(x, weight, bias);
}

void Linear::enable_fp8(amp::Fp8LinearOptions options) {
  PRECIS_CHECK_T(StateError, !fp8_, "nn::Linear(", in_features_, ", ", out_features_,
                 ").enable_fp8: fp8 is enabled already");
  fp8_ = add("fp8", Fp8LinearScaling(options));
  fp8_->to(weight.device());
}

Fp8LinearScaling& Linear::fp8_scaling() const {
  PRECIS_CHECK_T(StateError, static_cast<bool>(fp8_), "nn::Linear(", in_features_, ", ", out_features_,
                 ").fp8_scaling: fp8 is not enabled (enable_fp8)");
  return *fp8_;
}

std::string Linear::extra_repr() const {
  return "in_features=" + std::to_string(in_features_) + ", out_features=" + std::to_string(out_features_) +
         ", bias=" + (bias.defined() ? "true" : "false");
}

}  // namespace precis::nn
