#pragma once
// nn::BatchNorm2d, nn::LayerNorm and nn::GroupNorm (torch.nn names, buffers and defaults). All three
// keep fp32 parameters in a low-precision model (keep_fp32_params): their statistics are fp32 anyway,
// and a weight near 1 stored in bf16 (8 significant bits) would round small updates away.
#include "models/nn/module.h"

namespace precis::nn {

/// Options of nn::BatchNorm2d, with torch.nn.BatchNorm2d's defaults (momentum is a number; the
/// cumulative average of PyTorch's momentum=None is not offered).
struct BatchNormOptions {
  double eps = 1e-5;  ///< added to the variance before its square root
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
  using Options = BatchNormOptions;  ///< The options struct.
  /// num_features: C, the channels of the input (positive). Parameters and buffers are f32 on the
  /// CPU; weight ones, bias zeros, running mean 0, running variance 1.
  explicit BatchNorm2d(int64_t num_features, Options options = {});

  Tensor forward(const Tensor& x) override;
  /// Running statistics to (0, 1) and the count to 0.
  void reset_running_stats();
  /// reset_running_stats, and weight to ones and bias to zeros.
  void reset_parameters();
  bool keep_fp32_params() const override { return true; }
  std::string type_name() const override { return "BatchNorm2d"; }
  std::vector<std::string> optional_state() const override { return {"num_batches_tracked"}; }
  std::string extra_repr() const override;

  int64_t num_features() const { return num_features_; }  ///< C, as given at construction.
  const Options& options() const { return options_; }     ///< As given; a reference into this layer.

  Tensor weight;               ///< (C) "weight"; undefined when !affine
  Tensor bias;                 ///< (C) "bias"
  Tensor running_mean;         ///< (C) buffer "running_mean"; undefined when !track_running_stats
  Tensor running_var;          ///< (C) buffer "running_var"
  Tensor num_batches_tracked;  ///< 0-d i64 buffer "num_batches_tracked"

 protected:
  /// The normalisation of a checked input (BatchNorm1d checks other ranks).
  Tensor normalize(const Tensor& x);

 private:
  int64_t num_features_;
  Options options_;
};

/// torch.nn.BatchNorm1d: nn::BatchNorm2d's statistics over (N) of an (N, C) input or (N, L) of an
/// (N, C, L) one (sequences, the features of an MLP); the same parameters, buffers and names.
class BatchNorm1d : public BatchNorm2d {
 public:
  /// num_features: C (positive); as nn::BatchNorm2d.
  explicit BatchNorm1d(int64_t num_features, Options options = {});
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "BatchNorm1d"; }
};

/// Options of nn::LayerNorm, with torch.nn.LayerNorm's defaults.
struct LayerNormOptions {
  double eps = 1e-5;  ///< added to the variance before its square root
  bool elementwise_affine = true;  ///< "weight" (ones) and, with bias, "bias" (zeros)
  bool bias = true;  ///< with elementwise_affine, a learnable "bias"; false: weight only
};

/// Layer normalisation over the trailing dims `normalized_shape`. FP32 under autocast; fp32
/// parameters in a low-precision model (the output keeps the input's dtype).
class LayerNorm : public Module {
 public:
  using Options = LayerNormOptions;  ///< The options struct.
  /// Normalises over the last normalized_shape.size() dims of the input, which must equal
  /// normalized_shape (non-empty). Parameters are f32 on the CPU.
  explicit LayerNorm(Shape normalized_shape, Options options = {});
  /// Normalises over the last dim, of size normalized_dim (as torch.nn.LayerNorm(int)).
  explicit LayerNorm(int64_t normalized_dim, Options options = {}) : LayerNorm(Shape{normalized_dim}, options) {}

  Tensor forward(const Tensor& x) override;
  /// weight to ones and bias to zeros (those that exist).
  void reset_parameters();
  bool keep_fp32_params() const override { return true; }
  std::string type_name() const override { return "LayerNorm"; }
  std::string extra_repr() const override;

  /// The trailing dims normalised over, as given; a reference into this layer.
  const Shape& normalized_shape() const { return normalized_shape_; }

  Tensor weight;  ///< normalized_shape, "weight"
  Tensor bias;    ///< normalized_shape, "bias"

 private:
  Shape normalized_shape_;
  Options options_;
};

/// Options of nn::GroupNorm, with torch.nn.GroupNorm's defaults.
struct GroupNormOptions {
  double eps = 1e-5;  ///< added to the variance before its square root
  bool affine = true;  ///< per-channel "weight" (ones) and "bias" (zeros)
};

/// torch.nn.GroupNorm: the C channels of an (N, C, ...) input are split into num_groups groups of
/// C / num_groups channels, each normalised per sample over its channels and spatial positions;
/// then a per-channel affine transform. Batch-independent (the same in train and eval). FP32 under
/// autocast; fp32 parameters in a low-precision model (the output keeps the input's dtype).
class GroupNorm : public Module {
 public:
  using Options = GroupNormOptions;  ///< The options struct.
  /// num_channels must be divisible by num_groups.
  GroupNorm(int64_t num_groups, int64_t num_channels, Options options = {});

  Tensor forward(const Tensor& x) override;
  /// weight to ones and bias to zeros (when affine).
  void reset_parameters();
  bool keep_fp32_params() const override { return true; }
  std::string type_name() const override { return "GroupNorm"; }
  std::string extra_repr() const override;

  int64_t num_groups() const { return num_groups_; }      ///< Groups the channels are split into.
  int64_t num_channels() const { return num_channels_; }  ///< C, the channels of the input.

  Tensor weight;  ///< (C) "weight"; undefined when !affine
  Tensor bias;    ///< (C) "bias"

 private:
  int64_t num_groups_;
  int64_t num_channels_;
  Options options_;
};

}  // namespace precis::nn
