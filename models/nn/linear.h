#pragma once
// nn::Linear: y = x·weightᵀ + bias (torch.nn.Linear, same parameter names and initialisation).
#include "amp/fp8_linear.h"
#include "core/rng.h"
#include "models/nn/fp8.h"
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

  /// x: (..., in_features) → (..., out_features). Lower under autocast (precis::linear); fp8 GEMMs
  /// inside an amp::Fp8Autocast region once enable_fp8 was called (x first cast to the autocast
  /// dtype when autocast is on, so the output is in it).
  Tensor forward(const Tensor& x) override;
  /// PyTorch's default: kaiming_uniform_(weight, a = √5) (i.e. U(±1/√in)), bias U(±1/√in).
  void reset_parameters(Generator* gen = nullptr);
  std::string type_name() const override { return "Linear"; }
  std::string extra_repr() const override;

  /// Runs the layer's GEMMs in fp8 inside an amp::Fp8Autocast region from now on (amp::fp8_linear),
  /// with its delayed-scaling state as the child module "fp8" (models/nn/fp8.h: fresh histories,
  /// on the weight's device). StateError when already enabled. Outside a region the layer is
  /// the ordinary linear.
  void enable_fp8(amp::Fp8LinearOptions options = {});
  /// Whether enable_fp8 was called.
  bool fp8_enabled() const { return static_cast<bool>(fp8_); }
  /// Whether forward runs in fp8 now: enabled, inside an enabled amp::Fp8Autocast region. Code
  /// that fuses the layer with what follows (linear_gelu) checks it and calls forward instead.
  bool runs_fp8() const { return fp8_enabled() && amp::is_fp8_autocast_enabled(); }
  /// The fp8 state module (StateError unless fp8_enabled()).
  Fp8LinearScaling& fp8_scaling() const;

  int64_t in_features() const { return in_features_; }    ///< Size of the input's last dim.
  int64_t out_features() const { return out_features_; }  ///< Size of the output's last dim.

  Tensor weight;  ///< "weight"
  Tensor bias;    ///< "bias"; undefined with bias = false

 private:
  int64_t in_features_;
  int64_t out_features_;
  Child<Fp8LinearScaling> fp8_;  // set by enable_fp8
};

}  // namespace precis::nn
