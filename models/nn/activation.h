#pragma once
// Layers without parameters: ReLU, LeakyReLU, GELU, SiLU, Sigmoid, Tanh, Dropout, Identity, Flatten,
// Upsample (torch.nn names).
#include <string>

#include "core/rng.h"
#include "models/nn/module.h"
#include "ops/functional.h"

namespace precis::nn {

/// torch.nn.ReLU: max(x, 0) elementwise, any shape and floating dtype (the gradient at 0 is 0).
class ReLU : public Module {
 public:
  Tensor forward(const Tensor& x) override;  ///< Passthrough.
  std::string type_name() const override { return "ReLU"; }
};

/// torch.nn.LeakyReLU: x where x > 0, negative_slope·x elsewhere (precis::leaky_relu).
class LeakyReLU : public Module {
 public:
  /// PyTorch's default slope; any finite value (ValueError otherwise).
  explicit LeakyReLU(double negative_slope = 0.01);
  Tensor forward(const Tensor& x) override;  ///< Passthrough.
  std::string type_name() const override { return "LeakyReLU"; }
  std::string extra_repr() const override;
  double negative_slope() const { return negative_slope_; }  ///< The slope given.

 private:
  double negative_slope_;
};

/// torch.nn.GELU: x·Φ(x) elementwise, exact or with the tanh approximation.
class GELU : public Module {
 public:
  /// approximate: "none" (exact erf form, BERT's) or "tanh"; anything else is a precis::Error.
  explicit GELU(std::string approximate = "none");
  Tensor forward(const Tensor& x) override;  ///< Passthrough.
  std::string type_name() const override { return "GELU"; }
  std::string extra_repr() const override { return "approximate='" + approximate_ + "'"; }

 private:
  std::string approximate_;
};

/// torch.nn.SiLU (swish): x·sigmoid(x) elementwise, any shape and floating dtype.
class SiLU : public Module {
 public:
  Tensor forward(const Tensor& x) override;  ///< Passthrough.
  std::string type_name() const override { return "SiLU"; }
};

/// torch.nn.Sigmoid: 1/(1 + e^−x) elementwise, any shape and floating dtype.
class Sigmoid : public Module {
 public:
  Tensor forward(const Tensor& x) override;  ///< Passthrough.
  std::string type_name() const override { return "Sigmoid"; }
};

/// torch.nn.Tanh: tanh elementwise, any shape and floating dtype.
class Tanh : public Module {
 public:
  Tensor forward(const Tensor& x) override;  ///< Passthrough.
  std::string type_name() const override { return "Tanh"; }
};

/// Zeroes elements with probability p and scales the rest by 1/(1 − p) in training mode; the
/// identity in eval mode. The mask comes from `generator` (the default generator when null).
class Dropout : public Module {
 public:
  /// p in [0, 1] (precis::Error otherwise). A non-null generator is kept by pointer and must
  /// outlive the layer.
  explicit Dropout(double p = 0.5, Generator* generator = nullptr);
  Tensor forward(const Tensor& x) override;  ///< Passthrough.
  std::string type_name() const override { return "Dropout"; }
  std::string extra_repr() const override;
  double p() const { return p_; }  ///< The drop probability.
  /// The generator the mask is drawn from (nullptr: the default one), for a caller that fuses the
  /// dropout into another op (dropout_add) and must draw the same mask.
  Generator* generator() const { return generator_; }

 private:
  double p_;
  Generator* generator_;
};

/// torch.nn.Identity: returns its input; a placeholder where a layer is optional, such as a
/// downsample path.
class Identity : public Module {
 public:
  Tensor forward(const Tensor& x) override { return x; }  ///< x itself (the same tensor, no copy).
  std::string type_name() const override { return "Identity"; }
};

/// Flattens dims start_dim..end_dim into one (default: all but the batch dim).
class Flatten : public Module {
 public:
  /// Dims counted as Tensor::flatten counts them (negative from the end), checked in forward().
  explicit Flatten(int64_t start_dim = 1, int64_t end_dim = -1) : start_dim_(start_dim), end_dim_(end_dim) {}
  /// (N, C, H, W) → (N, C·H·W) with the defaults; a view of x when possible (Tensor::flatten).
  Tensor forward(const Tensor& x) override { return x.flatten(start_dim_, end_dim_); }
  std::string type_name() const override { return "Flatten"; }
  std::string extra_repr() const override {
    return "start_dim=" + std::to_string(start_dim_) + ", end_dim=" + std::to_string(end_dim_);
  }

 private:
  int64_t start_dim_;
  int64_t end_dim_;
};

/// torch.nn.Upsample: precis::interpolate with fixed options, e.g. a U-Net's
/// Upsample({.scale_factor = {2}, .mode = InterpolateMode::bilinear}).
class Upsample : public Module {
 public:
  /// Checked against each input in forward(), as PyTorch's (size or scale_factor, not both).
  explicit Upsample(InterpolateOptions options) : options_(std::move(options)) {}
  Tensor forward(const Tensor& x) override { return interpolate(x, options_); }  ///< Passthrough.
  std::string type_name() const override { return "Upsample"; }
  /// PyTorch's: "scale_factor=2.0, mode='bilinear'" or "size=(4, 5), mode='nearest'".
  std::string extra_repr() const override;
  const InterpolateOptions& options() const { return options_; }  ///< The options given.

 private:
  InterpolateOptions options_;
};

}  // namespace precis::nn
