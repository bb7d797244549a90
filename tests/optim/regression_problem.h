#pragma once
// The fixed linear-regression problem of tests/golden/gen_optim_fixtures.py: X (32, 6), Y (32, 3),
// parameters W (6, 3) and b (3,), loss mean((X W + b − Y)²). Gradients are formed in f64 from the
// parameters' values and rounded to the gradient dtype, as the generator does, so tests exercise
// the optimizer alone.
#include <string>
#include <vector>

#include "tensor/factory.h"
#include "tensor/safetensors.h"
#include "tensor/tensor.h"
#include "tests/support/paths.h"

namespace precis::testing {

inline std::string golden_path(const std::string& name) {
  return golden_dir() + "/" + name;
}

struct Regression {
  std::vector<double> X, Y;  // row-major (32, 6) and (32, 3)
  static constexpr int kN = 32, kIn = 6, kOut = 3;

  explicit Regression(const SafetensorsFile& f)
      : X(f.get("X").to_vector<double>()), Y(f.get("Y").to_vector<double>()) {}

  /// Sets W.grad and b.grad (dtype grad_dtype, default: the parameters') to the loss gradient at
  /// the current W and b, multiplied by `scale` (exactly, in f64, before rounding).
  void set_grads(const Tensor& W, const Tensor& b, double scale = 1.0, DType grad_dtype = DType::f32,
                 bool same_as_param = true) const {
    const std::vector<double> w = W.detach().to(DType::f64).to_vector<double>();
    const std::vector<double> bb = b.detach().to(DType::f64).to_vector<double>();
    std::vector<double> gw(kIn * kOut, 0.0), gb(kOut, 0.0);
    const double c = 2.0 / (kN * kOut);
    for (int n = 0; n < kN; ++n) {
      for (int o = 0; o < kOut; ++o) {
        double r = bb[o] - Y[n * kOut + o];
        for (int i = 0; i < kIn; ++i) r += X[n * kIn + i] * w[i * kOut + o];
        for (int i = 0; i < kIn; ++i) gw[i * kOut + o] += c * X[n * kIn + i] * r;
        gb[o] += c * r;
      }
    }
    for (auto& v : gw) v *= scale;
    for (auto& v : gb) v *= scale;
    const DType gw_dtype = same_as_param ? W.dtype() : grad_dtype;
    const DType gb_dtype = same_as_param ? b.dtype() : grad_dtype;
    // Round once from f64 to the gradient dtype.
    W.set_grad(from_vector<double>(gw, {kIn, kOut}).to(gw_dtype));
    b.set_grad(from_vector<double>(gb, {kOut}).to(gb_dtype));
  }
};

}  // namespace precis::testing
