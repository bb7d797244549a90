#include "models/nn/init.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "autograd/grad_mode.h"
#include "tensor/factory.h"

namespace precis::nn::init {

namespace {

DType draw_dtype(const Tensor& t) { return t.dtype() == DType::f64 ? DType::f64 : DType::f32; }

void check_floating(const Tensor& t, const char* fn) {
  PRECIS_CHECK(t.defined(), "nn::init::", fn, ": undefined tensor");
  PRECIS_CHECK_DTYPE(t.is_floating_point(), "nn::init::", fn, ": needs a floating tensor, got ", t.describe());
}

// Writes `values` (any dtype, CPU) into t in place.
Tensor& assign(Tensor& t, const Tensor& values) {
  NoGradGuard no_grad;
  Tensor alias = t.detach();
  alias.copy_(values);
  return t;
}

// Inverse error function on the host: a rational start refined by Newton steps on erf.
double erfinv(double y) {
  if (y <= -1.0) return -INFINITY;
  if (y >= 1.0) return INFINITY;
  const double w = -std::log((1.0 - y) * (1.0 + y));
  double x = w < 5.0 ? y * (1.2533 + 0.1938 * w) : y * std::sqrt(w) * 0.9;  // rough, Newton fixes it
  x = std::copysign(std::min(std::abs(x), 6.0), y);
  for (int i = 0; i < 40; ++i) {
    const double err = std::erf(x) - y;
    const double step = err / (2.0 / std::sqrt(M_PI) * std::exp(-x * x));
    x -= step;
    if (std::abs(step) < 1e-15 * std::max(1.0, std::abs(x))) break;
  }
  return x;
}

}  // namespace

Fans calculate_fans(const Tensor& t) {
  PRECIS_CHECK(t.defined() && t.dim() >= 2, "nn::init: fan in and fan out need a tensor with at least 2 dims, got ",
               t.defined() ? t.describe() : std::string("undefined"));
  int64_t receptive = 1;
  for (int64_t d = 2; d < t.dim(); ++d) receptive *= t.size(d);
  return {t.size(1) * receptive, t.size(0) * receptive};
}

double calculate_gain(const std::string& nonlinearity, double param) {
  if (nonlinearity == "linear" || nonlinearity == "conv1d" || nonlinearity == "conv2d" ||
      nonlinearity == "conv3d" || nonlinearity == "sigmoid")
    return 1.0;
  if (nonlinearity == "tanh") return 5.0 / 3.0;
  if (nonlinearity == "relu") return std::sqrt(2.0);
  if (nonlinearity == "leaky_relu") return std::sqrt(2.0 / (1.0 + param * param));
  if (nonlinearity == "selu") return 3.0 / 4.0;
  PRECIS_CHECK(false, "nn::init::calculate_gain: unknown nonlinearity '", nonlinearity,
               "' (linear, conv2d, sigmoid, tanh, relu, leaky_relu, selu)");
  return 0.0;
}

Tensor& uniform_(Tensor& t, double a, double b, Generator* gen) {
  check_floating(t, "uniform_");
  Tensor u = rand(t.sizes(), {.dtype = draw_dtype(t)}, gen);
  return assign(t, u * (b - a) + a);
}

Tensor& normal_(Tensor& t, double mean, double std, Generator* gen) {
  check_floating(t, "normal_");
  Tensor n = randn(t.sizes(), {.dtype = draw_dtype(t)}, gen);
  return assign(t, n * std + mean);
}

Tensor& trunc_normal_(Tensor& t, double mean, double std, double a, double b, Generator* gen) {
  check_floating(t, "trunc_normal_");
  PRECIS_CHECK(std > 0 && a < b, "nn::init::trunc_normal_: needs std > 0 and a < b, got std ", std, ", [", a, ", ", b,
               "]");
  auto cdf = [](double x) { return 0.5 * (1.0 + std::erf(x / std::sqrt(2.0))); };
  const double lo = cdf((a - mean) / std), hi = cdf((b - mean) / std);
  std::vector<double> u = rand(t.sizes(), {.dtype = DType::f64}, gen).to_vector<double>();
  for (double& v : u) {
    const double p = lo + v * (hi - lo);
    v = std::clamp(mean + std * std::sqrt(2.0) * erfinv(2.0 * p - 1.0), a, b);
  }
  return assign(t, from_vector<double>(u, t.sizes()));
}

Tensor& constant_(Tensor& t, double value) {
  check_floating(t, "constant_");
  NoGradGuard no_grad;
  Tensor alias = t.detach();
  alias.fill_(value);
  return t;
}
Tensor& zeros_(Tensor& t) { return constant_(t, 0.0); }
Tensor& ones_(Tensor& t) { return constant_(t, 1.0); }

Tensor& kaiming_uniform_(Tensor& t, double a, FanMode mode, const std::string& nonlinearity, Generator* gen) {
  check_floating(t, "kaiming_uniform_");
  const Fans f = calculate_fans(t);
  const double fan = static_cast<double>(mode == FanMode::fan_in ? f.fan_in : f.fan_out);
  const double bound = calculate_gain(nonlinearity, a) * std::sqrt(3.0 / fan);
  return uniform_(t, -bound, bound, gen);
}

Tensor& kaiming_normal_(Tensor& t, double a, FanMode mode, const std::string& nonlinearity, Generator* gen) {
  check_floating(t, "kaiming_normal_");
  const Fans f = calculate_fans(t);
  const double fan = static_cast<double>(mode == FanMode::fan_in ? f.fan_in : f.fan_out);
  return normal_(t, 0.0, calculate_gain(nonlinearity, a) / std::sqrt(fan), gen);
}

Tensor& xavier_uniform_(Tensor& t, double gain, Generator* gen) {
  check_floating(t, "xavier_uniform_");
  const Fans f = calculate_fans(t);
  const double bound = gain * std::sqrt(6.0 / static_cast<double>(f.fan_in + f.fan_out));
  return uniform_(t, -bound, bound, gen);
}

Tensor& xavier_normal_(Tensor& t, double gain, Generator* gen) {
  check_floating(t, "xavier_normal_");
  const Fans f = calculate_fans(t);
  return normal_(t, 0.0, gain * std::sqrt(2.0 / static_cast<double>(f.fan_in + f.fan_out)), gen);
}

}  // namespace precis::nn::init
