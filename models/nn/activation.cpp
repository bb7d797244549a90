#include "models/nn/activation.h"

#include <cmath>
#include <iomanip>
#include <sstream>
#include <string>

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

std::string Upsample::extra_repr() const {
  // Python's repr: a float keeps its ".0", one value stands alone, several make a tuple.
  const auto number = [](double v) {
    std::ostringstream s;
    s << std::setprecision(17) << v;
    std::string t = s.str();
    for (int digits = 1; digits <= 17; ++digits) {  // the shortest text that reads back as v
      std::ostringstream r;
      r << std::setprecision(digits) << v;
      if (std::stod(r.str()) == v) {
        t = r.str();
        break;
      }
    }
    return std::isfinite(v) && t.find_first_of(".e") == std::string::npos ? t + ".0" : t;
  };
  const auto list = [](const auto& values, const auto& text) {
    if (values.size() == 1) return text(values[0]);
    std::string s = "(";
    for (size_t i = 0; i < values.size(); ++i) s += (i ? ", " : "") + text(values[i]);
    return s + ")";
  };
  static const char* const kModes[] = {"nearest", "nearest-exact", "linear", "bilinear", "trilinear"};
  std::string s = options_.scale_factor.empty()
                      ? "size=" + list(options_.size, [](int64_t v) { return std::to_string(v); })
                      : "scale_factor=" + list(options_.scale_factor, number);
  return s + ", mode='" + kModes[static_cast<int>(options_.mode)] + "'";
}

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
