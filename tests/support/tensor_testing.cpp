#include "tests/support/tensor_testing.h"

#include <cmath>
#include <sstream>

namespace precis::testing {

Tolerance tolerance(DType dtype) {
  switch (dtype) {
    case DType::f64: return {1e-12, 1e-12};
    case DType::f32: return {1e-5, 1e-6};  // a few ulps of fp32 after fp32 accumulation
    case DType::bf16: return {1.6e-2, 1e-3};  // 8-bit mantissa: 2^-7 relative, plus accumulation
    case DType::f16: return {2e-3, 1e-4};     // 11-bit mantissa: 2^-10 relative, plus accumulation
    default: return {0.0, 0.0};              // integers and bool compare exactly
  }
}

Tensor randn_input(const Shape& sizes, bool requires_grad, uint64_t seed, DType dtype) {
  Generator g(seed * 7919 + 17);
  Tensor t = randn(sizes, {.dtype = dtype}, &g);
  if (requires_grad) t.requires_grad_(true);
  return t;
}

Tensor uniform_input(const Shape& sizes, double lo, double hi, bool requires_grad, uint64_t seed, DType dtype) {
  Generator g(seed * 7919 + 29);
  Tensor u = rand(sizes, {.dtype = DType::f64}, &g);
  std::vector<double> v = u.to_vector<double>();
  for (double& x : v) x = lo + (hi - lo) * x;
  Tensor t = from_vector<double>(v, sizes, {.dtype = dtype});
  if (requires_grad) t.requires_grad_(true);
  return t;
}

Tensor non_contiguous(const Tensor& t) {
  if (t.dim() < 2) {
    // A stride-2 view over a buffer twice as long.
    Tensor wide = zeros({std::max<int64_t>(t.numel(), 1) * 2}, {.dtype = t.dtype()});
    Tensor view = wide.slice(0, 0, t.numel() * 2, 2).view(t.sizes());
    view.copy_(t.detach());
    Tensor out = view;
    if (t.requires_grad()) out.requires_grad_(true);
    return out;
  }
  Tensor moved = t.detach().transpose(0, t.dim() - 1).contiguous().transpose(0, t.dim() - 1);
  if (t.requires_grad()) moved.requires_grad_(true);
  return moved;
}

std::string allclose_report(const Tensor& actual, const Tensor& expected, Tolerance tol) {
  std::ostringstream os;
  if (actual.sizes() != expected.sizes()) {
    os << "shape mismatch: actual " << actual.describe() << ", expected " << expected.describe();
    return os.str();
  }
  const std::vector<double> a = actual.to_vector<double>(), b = expected.to_vector<double>();
  double worst = 0;
  size_t worst_i = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i]) || std::isnan(b[i])) {
      if (std::isnan(a[i]) != std::isnan(b[i])) {
        os << "NaN mismatch at flat index " << i << ": actual " << a[i] << ", expected " << b[i];
        return os.str();
      }
      continue;
    }
    if (std::isinf(a[i]) || std::isinf(b[i])) {
      if (a[i] != b[i]) {
        os << "inf mismatch at flat index " << i << ": actual " << a[i] << ", expected " << b[i];
        return os.str();
      }
      continue;
    }
    const double err = std::fabs(a[i] - b[i]) / (tol.atol + tol.rtol * std::fabs(b[i]));
    if (err > worst) {
      worst = err;
      worst_i = i;
    }
  }
  if (worst > 1.0) {
    os.precision(17);
    os << "worst element at flat index " << worst_i << ": actual " << a[worst_i] << ", expected " << b[worst_i]
       << " (error " << worst << "x the tolerance rtol=" << tol.rtol << " atol=" << tol.atol << ")";
  }
  return os.str();
}

}  // namespace precis::testing
