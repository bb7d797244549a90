#pragma once
// nn::BatchNorm2d and nn::LayerNorm (torch.nn names, buffers and defaults).
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
/// the input's dtype. FP32 under autocast.
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

/// Layer normalisation over the trailing dims `normalized_shape`. FP32 under autocast.
class LayerNorm : public Module {
 public:
  using Options = LayerNormOptions;
  explicit LayerNorm(Shape normalized_shape, Options options = {});
  explicit LayerNorm(int64_t normalized_dim, Options options = {}) : LayerNorm(Shape{normalized_dim}, options) {}

  Tensor forward(const Tensor& x) override;
  void reset_parameters();
  std::string type_name() const override { return "LayerNorm"; }
  std::string extra_repr() const override;

  const Shape& normalized_shape() const { return normalized_shape_; }

  Tensor weight;  ///< normalized_shape, "weight"
  Tensor bias;    ///< normalized_shape, "bias"

 private:
  Shape normalized_shape_;
  Options options_;
};

}  // namespace precis::nn
