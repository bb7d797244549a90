#pragma once
// nn::Linear: y = x·weightᵀ + bias (torch.nn.Linear, same parameter names and initialisation).
#include "core/rng.h"
#include "models/nn/module.h"

namespace precis::nn {

struct LinearOptions {
  bool bias = true;
  Generator* generator = nullptr;  ///< for reset_parameters (the default generator when null)
};

class Linear : public Module {
 public:
  using Options = LinearOptions;
  /// weight: (out_features, in_features), bias: (out_features); f32 on the CPU (use to()).
  Linear(int64_t in_features, int64_t out_features, Options options = {});

  /// x: (..., in_features) → (..., out_features). Lower under autocast (precis::linear).
  Tensor forward(const Tensor& x) override;
  /// PyTorch's default: kaiming_uniform_(weight, a = √5) (i.e. U(±1/√in)), bias U(±1/√in).
  void reset_parameters(Generator* gen = nullptr);
  std::string type_name() const override { return "Linear"; }
  std::string extra_repr() const override;

  int64_t in_features() const { return in_features_; }
  int64_t out_features() const { return out_features_; }

  Tensor weight;  ///< "weight"
  Tensor bias;    ///< "bias"; undefined with bias = false

 private:
  int64_t in_features_;
  int64_t out_features_;
};

}  // namespace precis::nn
