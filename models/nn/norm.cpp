#include "models/nn/norm.h"

#include <sstream>

#include "autograd/grad_mode.h"
#include "models/nn/init.h"
#include "ops/functional.h"
#include "ops/recompute.h"
#include "tensor/factory.h"

namespace precis::nn {

BatchNorm2d::BatchNorm2d(int64_t num_features, Options options) : num_features_(num_features), options_(options) {
  PRECIS_CHECK(num_features > 0, "nn::BatchNorm2d / BatchNorm1d: num_features must be positive, got ", num_features);
  if (options.affine) {
    weight = ones({num_features});
    bias = zeros({num_features});
  }
  if (options.track_running_stats) {
    running_mean = zeros({num_features});
    running_var = ones({num_features});
    num_batches_tracked = zeros({}, {.dtype = DType::i64});
  }
  register_parameter("weight", weight);
  register_parameter("bias", bias);
  register_buffer("running_mean", running_mean);
  register_buffer("running_var", running_var);
  register_buffer("num_batches_tracked", num_batches_tracked);
}

void BatchNorm2d::reset_running_stats() {
  if (!running_mean.defined()) return;
  NoGradGuard no_grad;
  running_mean.zero_();
  running_var.fill_(1.0);
  num_batches_tracked.zero_();
}

void BatchNorm2d::reset_parameters() {
  reset_running_stats();
  if (weight.defined()) {
    init::ones_(weight);
    init::zeros_(bias);
  }
}

Tensor BatchNorm2d::forward(const Tensor& x) {
  PRECIS_CHECK_SHAPE(x.dim() == 4 && x.size(1) == num_features_, "nn::BatchNorm2d(", num_features_, "): input ",
                     x.describe(), " must be (N, ", num_features_, ", H, W)");
  return normalize(x);
}

BatchNorm1d::BatchNorm1d(int64_t num_features, Options options) : BatchNorm2d(num_features, options) {}

Tensor BatchNorm1d::forward(const Tensor& x) {
  PRECIS_CHECK_SHAPE((x.dim() == 2 || x.dim() == 3) && x.size(1) == num_features(), "nn::BatchNorm1d(",
                     num_features(), "): input ", x.describe(), " must be (N, ", num_features(), ") or (N, ",
                     num_features(), ", L)");
  return normalize(x);
}

Tensor BatchNorm2d::normalize(const Tensor& x) {
  const bool training = is_training();
  // A checkpoint's recomputation (ops/recompute.h) runs this forward again: count the batch once.
  if (training && num_batches_tracked.defined() && !is_recomputing()) {
    NoGradGuard no_grad;
    num_batches_tracked.copy_(num_batches_tracked + 1);
  }
  // As torch: batch statistics in training or without running statistics; the running statistics
  // are passed (and so updated in training) only when they are tracked.
  const bool use_batch_stats = training || !running_mean.defined();
  return batch_norm(x, running_mean, running_var, weight, bias, use_batch_stats, options_.momentum, options_.eps);
}

std::string BatchNorm2d::extra_repr() const {
  std::ostringstream s;
  s << num_features_ << ", eps=" << options_.eps << ", momentum=" << options_.momentum
    << ", affine=" << (options_.affine ? "true" : "false")
    << ", track_running_stats=" << (options_.track_running_stats ? "true" : "false");
  return s.str();
}

LayerNorm::LayerNorm(Shape normalized_shape, Options options)
    : normalized_shape_(std::move(normalized_shape)), options_(options) {
  PRECIS_CHECK(!normalized_shape_.empty(), "nn::LayerNorm: normalized_shape must not be empty");
  if (options.elementwise_affine) {
    weight = ones(normalized_shape_);
    if (options.bias) bias = zeros(normalized_shape_);
  }
  register_parameter("weight", weight);
  register_parameter("bias", bias);
}

void LayerNorm::reset_parameters() {
  if (weight.defined()) init::ones_(weight);
  if (bias.defined()) init::zeros_(bias);
}

Tensor LayerNorm::forward(const Tensor& x) { return layer_norm(x, normalized_shape_, weight, bias, options_.eps); }

std::string LayerNorm::extra_repr() const {
  std::ostringstream s;
  s << shape_str(normalized_shape_) << ", eps=" << options_.eps
    << ", elementwise_affine=" << (options_.elementwise_affine ? "true" : "false");
  return s.str();
}

GroupNorm::GroupNorm(int64_t num_groups, int64_t num_channels, Options options)
    : num_groups_(num_groups), num_channels_(num_channels), options_(options) {
  PRECIS_CHECK(num_groups > 0 && num_channels > 0 && num_channels % num_groups == 0, "nn::GroupNorm: num_channels (",
               num_channels, ") must be a positive multiple of num_groups (", num_groups, ")");
  if (options.affine) {
    weight = ones({num_channels});
    bias = zeros({num_channels});
  }
  register_parameter("weight", weight);
  register_parameter("bias", bias);
}

void GroupNorm::reset_parameters() {
  if (weight.defined()) init::ones_(weight);
  if (bias.defined()) init::zeros_(bias);
}

Tensor GroupNorm::forward(const Tensor& x) {
  PRECIS_CHECK_SHAPE(x.dim() >= 2 && x.size(1) == num_channels_, "nn::GroupNorm(", num_groups_, ", ", num_channels_,
                     "): input ", x.describe(), " must be (N, ", num_channels_, ", ...)");
  return group_norm(x, num_groups_, weight, bias, options_.eps);
}

std::string GroupNorm::extra_repr() const {
  std::ostringstream s;
  s << num_groups_ << ", " << num_channels_ << ", eps=" << options_.eps
    << ", affine=" << (options_.affine ? "true" : "false");
  return s.str();
}

}  // namespace precis::nn
