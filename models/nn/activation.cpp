#include "models/nn/activation.h"

#include <cmath>
#include <sstream>

#include "ops/functional.h"

namespace precis::nn {

Tensor ReLU::forward(const Tensor& x) { return relu(x); }

LeakyReLU::LeakyReLU(double negative_slope) : negative_slope_(negative_slope) {
  PRECIS_CHECK(std::isfinite(negative_slope), "nn::LeakyReLU: negative_slope must be finite, got ", negative_slope);
}
Tensor LeakyReLU::forward(const Tensor& x) { return leaky_relu(x, negative_slope_); }
std::string LeakyReLU::extra_repr() const {
  std::ostringstream s;
  s << "negative_slope=" << negative_slope_;
  return s.str();
}

GELU::GELU(std::string approximate) : approximate_(std::move(approximate)) {
  PRECIS_CHECK(approximate_ == "none" || approximate_ == "tanh", "nn::GELU: approximate must be 'none' or 'tanh', got '",
               approximate_, "'");
}
Tensor GELU::forward(const Tensor& x) { return gelu(x, approximate_); }

Tensor SiLU::forward(const Tensor& x) { return silu(x); }
Tensor Sigmoid::forward(const Tensor& x) { return sigmoid(x); }
Tensor Tanh::forward(const Tensor& x) { return tanh(x); }

Dropout::Dropout(double p, Generator* generator) : p_(p), generator_(generator) {
  PRECIS_CHECK(p >= 0.0 && p <= 1.0, "nn::Dropout: p must be in [0, 1], got ", p);
}
Tensor Dropout::forward(const Tensor& x) { return dropout(x, p_, is_training(), generator_); }
std::string Dropout::extra_repr() const {
  std::ostringstream s;
  s << "p=" << p_;
  return s.str();
}

}  // namespace precis::nn
