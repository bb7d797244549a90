#pragma once
// nn::BatchNorm2d, nn::LayerNorm and nn::GroupNorm (torch.nn names, buffers and defaults). All three
// keep fp32 parameters in a low-precision model (keep_fp32_params): their statistics are fp32 anyway,
// and a weight near 1 stored in bf16 (8 significant bits) would round small updates away.
#include "models/nn/module.h"

namespace precis::nn {

struct BatchNormOptions {
  double eps = 1e-5;
  double momentum = 0.1;          ///< running = (1 − momentum)·running + momentum·batch statistic
  bool affine = true;             ///< learnable weight ("weight", ones) and bias ("bias", zeros)
  bool track_running_stats = true;  ///< buffers running_mean, running_var, num_batches_tracked
};

/// Batch normalisation over (N, H, W) per channel of an (N, C, H, W) input. Training mode uses
/// the batch statistics and updates the running ones (and counts num_batches_tracked); eval mode
/// uses the running statistics (batch statistics when track_running_stats is false). Parameters
/// and running statistics stay fp32 in a low-precision model (keep_fp32_params); the output has
/// the input's dtype. Passthrough under autocast: the kernel computes in fp32 whatever the input's
/// dtype, and a bf16/f16 input gives a bf16/f16 output (no cast of the activation).
class BatchNorm2d : public Module {
 public:
  using Options = BatchNormOptions;
  explicit BatchNorm2d(int64_t num_features, Options options = {});

  Tensor forward(const Tensor& x) override;
  /// Running statistics to (0, 1) and the count to 0.
  void reset_running_stats();
  /// reset_running_stats, and weight to ones and bias to zeros.
  void reset_parameters();
  bool keep_fp32_params() const override { return true; }
  std::string type_name() const override { return "BatchNorm2d"; }
  std::string extra_repr() const override;

  int64_t num_features() const { return num_features_; }
  const Options& options() const { return options_; }

  Tensor weight;               ///< (C) "weight"; undefined when !affine
  Tensor bias;                 ///< (C) "bias"
  Tensor running_mean;         ///< (C) buffer "running_mean"; undefined when !track_running_stats
  Tensor running_var;          ///< (C) buffer "running_var"
  Tensor num_batches_tracked;  ///< 0-d i64 buffer "num_batches_tracked"

 private:
  int64_t num_features_;
  Options options_;
};

struct LayerNormOptions {
  double eps = 1e-5;
  bool elementwise_affine = true;  ///< "weight" (ones) and, with bias, "bias" (zeros)
  bool bias = true;
};

/// Layer normalisation over the trailing dims `normalized_shape`. FP32 under autocast; fp32
/// parameters in a low-precision model (the output keeps the input's dtype).
class LayerNorm : public Module {
 public:
  using Options = LayerNormOptions;
  explicit LayerNorm(Shape normalized_shape, Options options = {});
  explicit LayerNorm(int64_t normalized_dim, Options options = {}) : LayerNorm(Shape{normalized_dim}, options) {}

  Tensor forward(const Tensor& x) override;
  void reset_parameters();
  bool keep_fp32_params() const override { return true; }
  std::string type_name() const override { return "LayerNorm"; }
  std::string extra_repr() const override;

  const Shape& normalized_shape() const { return normalized_shape_; }

  Tensor weight;  ///< normalized_shape, "weight"
  Tensor bias;    ///< normalized_shape, "bias"

 private:
  Shape normalized_shape_;
  Options options_;
};

struct GroupNormOptions {
  double eps = 1e-5;
  bool affine = true;  ///< per-channel "weight" (ones) and "bias" (zeros)
};

/// torch.nn.GroupNorm: the C channels of an (N, C, ...) input are split into num_groups groups of
/// C / num_groups channels, each normalised per sample over its channels and spatial positions;
/// then a per-channel affine transform. Batch-independent (the same in train and eval). FP32 under
/// autocast; fp32 parameters in a low-precision model (the output keeps the input's dtype).
class GroupNorm : public Module {
 public:
  using Options = GroupNormOptions;
  /// num_channels must be divisible by num_groups.
  GroupNorm(int64_t num_groups, int64_t num_channels, Options options = {});

  Tensor forward(const Tensor& x) override;
  void reset_parameters();
  bool keep_fp32_params() const override { return true; }
  std::string type_name() const override { return "GroupNorm"; }
  std::string extra_repr() const override;

  int64_t num_groups() const { return num_groups_; }
  int64_t num_channels() const { return num_channels_; }

  Tensor weight;  ///< (C) "weight"; undefined when !affine
  Tensor bias;    ///< (C) "bias"

 private:
  int64_t num_groups_;
  int64_t num_channels_;
  Options options_;
};

}  // namespace precis::nn
