#include "models/nn/activation.h"

#include <charconv>
#include <cmath>
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
  // Python's repr of a float: the shortest digits that read back as it, positional with ".0" for
  // decimal exponents -4 to 15, else as 1e+16; one value stands alone, several make a tuple.
  const auto number = [](double v) {
    if (!std::isfinite(v)) return std::string(std::isnan(v) ? "nan" : v > 0 ? "inf" : "-inf");
    char buf[400];  // fixed notation of up to 1e16
    const std::string sci(buf, std::to_chars(buf, buf + sizeof buf, v, std::chars_format::scientific).ptr);
    const int exponent = std::stoi(sci.substr(sci.find('e') + 1));
    if (exponent < -4 || exponent >= 16) return sci;
    const std::string fixed(buf, std::to_chars(buf, buf + sizeof buf, v, std::chars_format::fixed).ptr);
    return fixed.find('.') == std::string::npos ? fixed + ".0" : fixed;
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
