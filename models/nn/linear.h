#pragma once
// nn::Linear: y = x·weightᵀ + bias (torch.nn.Linear, same parameter names and initialisation).
#include "core/rng.h"
#include "models/nn/module.h"

namespace precis::nn {

/// Options of nn::Linear, with torch.nn.Linear's defaults.
struct LinearOptions {
  bool bias = true;  ///< Whether the layer has a learnable bias, like torch.nn.Linear's `bias`.
  Generator* generator = nullptr;  ///< for reset_parameters (the default generator when null)
};

/// torch.nn.Linear: an affine map of the last dim, y = x·weightᵀ + bias.
class Linear : public Module {
 public:
  using Options = LinearOptions;  ///< The options struct, as `nn::Linear::Options{.bias = false}`.
  /// weight: (out_features, in_features), bias: (out_features); f32 on the CPU (use to()).
  Linear(int64_t in_features, int64_t out_features, Options options = {});

  /// x: (..., in_features) → (..., out_features). Lower under autocast (precis::linear).
  Tensor forward(const Tensor& x) override;
  /// PyTorch's default: kaiming_uniform_(weight, a = √5) (i.e. U(±1/√in)), bias U(±1/√in).
  void reset_parameters(Generator* gen = nullptr);
  std::string type_name() const override { return "Linear"; }
  std::string extra_repr() const override;

  int64_t in_features() const { return in_features_; }    ///< Size of the input's last dim.
  int64_t out_features() const { return out_features_; }  ///< Size of the output's last dim.

  Tensor weight;  ///< "weight"
  Tensor bias;    ///< "bias"; undefined with bias = false

 private:
  int64_t in_features_;
  int64_t out_features_;
};

}  // namespace precis::nn
