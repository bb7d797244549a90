#pragma once
// Parameter initialisers, as torch.nn.init. Each fills `t` in place (under no-grad, keeping the
// handle, its dtype and device) and returns it. Random ones draw from `gen` (the default generator
// when null), so a model built after manual_seed(s), or with its own Generator, is reproducible.
// Values are drawn in f32 (f64 for f64 tensors) on the CPU and copied in.
#include <string>

#include "core/rng.h"
#include "tensor/tensor.h"

namespace precis::nn::init {

/// fan_in = size(1)·receptive field, fan_out = size(0)·receptive field, where the receptive field
/// is the product of the dims after the first two (a Linear weight (out, in) has fan_in = in).
/// ValueError for tensors with fewer than 2 dims.
struct Fans {
  int64_t fan_in;   ///< size(1)·receptive field: the inputs feeding each output unit
  int64_t fan_out;  ///< size(0)·receptive field: the outputs each input unit feeds
};
Fans calculate_fans(const Tensor& t);

/// The recommended gain for a nonlinearity (torch.nn.init.calculate_gain): "linear", "conv2d",
/// "sigmoid" → 1, "tanh" → 5/3, "relu" → √2, "leaky_relu" → √(2 / (1 + param²)), "selu" → 3/4.
double calculate_gain(const std::string& nonlinearity, double param = 0.01);

Tensor& uniform_(Tensor& t, double a = 0.0, double b = 1.0, Generator* gen = nullptr);
Tensor& normal_(Tensor& t, double mean = 0.0, double std = 1.0, Generator* gen = nullptr);
/// Normal(mean, std) restricted to [a, b] (absolute bounds, as PyTorch), drawn by inverting the
/// normal CDF on a uniform sample of [Φ(a'), Φ(b')] (no rejection loop).
Tensor& trunc_normal_(Tensor& t, double mean = 0.0, double std = 1.0, double a = -2.0, double b = 2.0,
                      Generator* gen = nullptr);
Tensor& constant_(Tensor& t, double value);
Tensor& zeros_(Tensor& t);
Tensor& ones_(Tensor& t);

enum class FanMode { fan_in, fan_out };

/// U(−bound, bound) with bound = gain·√(3 / fan), gain = calculate_gain(nonlinearity, a).
Tensor& kaiming_uniform_(Tensor& t, double a = 0.0, FanMode mode = FanMode::fan_in,
                         const std::string& nonlinearity = "leaky_relu", Generator* gen = nullptr);
/// N(0, std²) with std = gain / √fan.
Tensor& kaiming_normal_(Tensor& t, double a = 0.0, FanMode mode = FanMode::fan_in,
                        const std::string& nonlinearity = "leaky_relu", Generator* gen = nullptr);
/// U(−a, a) with a = gain·√(6 / (fan_in + fan_out)).
Tensor& xavier_uniform_(Tensor& t, double gain = 1.0, Generator* gen = nullptr);
/// N(0, std²) with std = gain·√(2 / (fan_in + fan_out)).
Tensor& xavier_normal_(Tensor& t, double gain = 1.0, Generator* gen = nullptr);

}  // namespace precis::nn::init
