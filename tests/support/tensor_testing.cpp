#include "tests/support/tensor_testing.h"

#include <array>
#include <cmath>
#include <cstring>
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

// Widening of the f16/bf16 tolerance, the one place it may live: a test never scales a
// tolerance itself. Each factor says why.
namespace {

// An input gradient computed in f16/bf16 is rounded more often than a forward result: every
// backward node stores its gradient in the low dtype, saved forward values are rounded outputs
// (tanh' = 1 − y², softmax from a rounded log-probability), and broadcast reductions sum rounded
// products whose cancellation makes the result small relative to its terms. Measured worst case
// over the registered cases: 3.3× the output tolerance (f16 permute·sum, a 24-term sum).
constexpr double kLowpGradientFactor = 4.0;

struct LowpMultiplier {
  OpId op;
  double factor;
};
// Ops whose f16/bf16 results carry more roundings than the table assumes, on top of the above:
// {OpId::x, factor}, // reason. Empty today: with fp32 accumulation every op, including the
// reductions over 4096 elements and attention over 1024 keys in tests/ops/lowp_test.cpp, meets
// the table (outputs) and the gradient factor (gradients).
constexpr std::array<LowpMultiplier, 0> kLowpMultipliers{};

}  // namespace

Tolerance tolerance(DType dtype, OpId op, Compared what) {
  Tolerance t = tolerance(dtype);
  if (dtype != DType::f16 && dtype != DType::bf16) return t;
  double factor = what == Compared::gradient ? kLowpGradientFactor : 1.0;
  for (const LowpMultiplier& m : kLowpMultipliers)
    if (m.op == op) factor *= m.factor;
  t.rtol *= factor;
  t.atol *= factor;
  return t;
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

std::string same_bits_report(const Tensor& actual, const Tensor& expected) {
  std::ostringstream os;
  if (actual.sizes() != expected.sizes() || actual.dtype() != expected.dtype()) {
    os << "actual " << actual.describe() << " and expected " << expected.describe() << " differ in shape or dtype";
    return os.str();
  }
  const Tensor a = actual.detach().to(Device::cpu()).contiguous(), b = expected.detach().to(Device::cpu()).contiguous();
  const size_t width = a.element_size();
  const auto* pa = static_cast<const unsigned char*>(a.data_ptr());
  const auto* pb = static_cast<const unsigned char*>(b.data_ptr());
  int64_t first = -1, count = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    if (std::memcmp(pa + i * width, pb + i * width, width) == 0) continue;
    if (first < 0) first = i;
    ++count;
  }
  if (count == 0) return "";
  os << count << " of " << a.numel() << " elements of " << actual.describe() << " differ; the first at flat index "
     << first << ": " << a.to(DType::f64).view({-1}).select(0, first).item<double>() << " vs "
     << b.to(DType::f64).view({-1}).select(0, first).item<double>();
  return os.str();
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
