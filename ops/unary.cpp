// Unary element-wise ops: forward (checks, kernel call) and backward (public ops on the saved
// input or output). Kernels: ops/cpu/unary.cpp.
#include "ops/precision.h"
#include "autograd/record.h"
#include "ops/elementwise_backward.h"
#include "ops/functional.h"
#include "ops/kernels.h"
#include "tensor/factory.h"

namespace precis {

using autograd::SavedTensor;
using autograd::TensorList;

namespace {

// Runs the unary kernel of `op` into a new contiguous tensor of x's shape and dtype.
// floating_only: the op is defined on f32/f64/f16/bf16 only (else also i32/i64).
Tensor run_unary(OpId op, const Tensor& x, double param, bool floating_only) {
  const char* name = op_name(op);
  PRECIS_CHECK(x.defined(), name, ": the input tensor is undefined");
  if (floating_only) {
    PRECIS_CHECK_DTYPE(x.is_floating_point(), name, ": expected a floating tensor, got ", x.describe(),
                       "; convert it first, e.g. ", name, "(x.to(DType::f32))");
  } else {
    PRECIS_CHECK_DTYPE(x.dtype() != DType::boolean, name, ": not defined for a bool tensor ", x.describe(),
                       "; convert it first, e.g. ", name, "(x.to(DType::f32))");
  }
  Tensor out = empty(x.sizes(), {.dtype = x.dtype(), .device = x.device()});
  kernel<kernels::UnaryKernel>(op, x.device().type, x.dtype())(out, x, param);
  return out;
}

double gelu_flag(const char* op, const std::string& approximate) {
  PRECIS_CHECK(approximate == "none" || approximate == "tanh", op, ": approximate must be \"none\" or \"tanh\", got \"",
               approximate, "\"");
  return approximate == "tanh" ? 1.0 : 0.0;
}

// A backward helper kernel (a = grad, b = x) of the same shape and dtype.
Tensor run_backward(OpId op, const Tensor& grad, const Tensor& x, double param) {
  const char* name = op_name(op);
  PRECIS_CHECK_SHAPE(grad.sizes() == x.sizes() && grad.dtype() == x.dtype() && grad.device() == x.device(), name,
                     ": grad ", grad.describe(), " and input ", x.describe(), " must have the same shape, dtype and device");
  PRECIS_CHECK_DTYPE(x.is_floating_point(), name, ": expected floating tensors, got ", x.describe());
  Tensor out = empty(x.sizes(), {.dtype = x.dtype(), .device = x.device()});
  kernel<kernels::BinaryKernel>(op, x.device().type, x.dtype())(out, grad, x, param);
  return out;
}

}  // namespace

Tensor relu_backward(const Tensor& grad, const Tensor& x) { return run_backward(OpId::relu_backward, grad, x, 0.0); }

Tensor gelu_backward(const Tensor& grad, const Tensor& x, const std::string& approximate) {
  return run_backward(OpId::gelu_backward, grad, x, gelu_flag("gelu_backward", approximate));
}

Tensor neg(const Tensor& x_in) {
  const Tensor x = apply_precision(OpId::neg, x_in)[0];
  Tensor out = run_unary(OpId::neg, x, 0.0, false);
  if (autograd::needs_grad({&x}))
    autograd::record(OpId::neg, {x}, {out}, [](const TensorList& g) -> TensorList { return {neg(g[0])}; });
  return out;
}

Tensor abs(const Tensor& x_in) {
  const Tensor x = apply_precision(OpId::abs, x_in)[0];
  Tensor out = run_unary(OpId::abs, x, 0.0, false);
  if (autograd::needs_grad({&x})) {
    // g·sign(x), with sign(0) = 0 (as PyTorch).
    autograd::record(OpId::abs, {x}, {out}, [sx = SavedTensor(x)](const TensorList& g) -> TensorList {
      const Tensor x = sx.unpack("abs");
      return {where(lt(x, 0), neg(g[0]), where(gt(x, 0), g[0], 0))};
    });
  }
  return out;
}

Tensor exp(const Tensor& x_in) {
  const Tensor x = apply_precision(OpId::exp, x_in)[0];
  Tensor out = run_unary(OpId::exp, x, 0.0, true);
  if (autograd::needs_grad({&x})) {
    autograd::record(OpId::exp, {x}, {out}, [sy = SavedTensor(out)](const TensorList& g) -> TensorList {
      return {mul(g[0], sy.unpack("exp"))};
    });
  }
  return out;
}

Tensor log(const Tensor& x_in) {
  const Tensor x = apply_precision(OpId::log, x_in)[0];
  Tensor out = run_unary(OpId::log, x, 0.0, true);
  if (autograd::needs_grad({&x})) {
    autograd::record(OpId::log, {x}, {out}, [sx = SavedTensor(x)](const TensorList& g) -> TensorList {
      return {div(g[0], sx.unpack("log"))};
    });
  }
  return out;
}

Tensor sqrt(const Tensor& x_in) {
  const Tensor x = apply_precision(OpId::sqrt, x_in)[0];
  Tensor out = run_unary(OpId::sqrt, x, 0.0, true);
  if (autograd::needs_grad({&x})) {
    // d√x = 1 / (2√x)
    autograd::record(OpId::sqrt, {x}, {out}, [sy = SavedTensor(out)](const TensorList& g) -> TensorList {
      return {div(g[0], mul(sy.unpack("sqrt"), 2.0))};
    });
  }
  return out;
}

Tensor rsqrt(const Tensor& x_in) {
  const Tensor x = apply_precision(OpId::rsqrt, x_in)[0];
  Tensor out = run_unary(OpId::rsqrt, x, 0.0, true);
  if (autograd::needs_grad({&x})) {
    // d x^(-1/2) = -½ x^(-3/2) = -½ y³
    autograd::record(OpId::rsqrt, {x}, {out}, [sy = SavedTensor(out)](const TensorList& g) -> TensorList {
      return {mul(g[0], mul(pow(sy.unpack("rsqrt"), 3), -0.5))};
    });
  }
  return out;
}

Tensor tanh(const Tensor& x_in) {
  const Tensor x = apply_precision(OpId::tanh, x_in)[0];
  Tensor out = run_unary(OpId::tanh, x, 0.0, true);
  if (autograd::needs_grad({&x})) {
    autograd::record(OpId::tanh, {x}, {out}, [sy = SavedTensor(out)](const TensorList& g) -> TensorList {
      const Tensor y = sy.unpack("tanh");
      return {mul(g[0], 1.0 - mul(y, y))};
    });
  }
  return out;
}

Tensor sigmoid(const Tensor& x_in) {
  const Tensor x = apply_precision(OpId::sigmoid, x_in)[0];
  Tensor out = run_unary(OpId::sigmoid, x, 0.0, true);
  if (autograd::needs_grad({&x})) {
    autograd::record(OpId::sigmoid, {x}, {out}, [sy = SavedTensor(out)](const TensorList& g) -> TensorList {
      const Tensor y = sy.unpack("sigmoid");
      return {mul(mul(g[0], y), 1.0 - y)};
    });
  }
  return out;
}

Tensor relu(const Tensor& x_in) {
  const Tensor x = apply_precision(OpId::relu, x_in)[0];
  Tensor out = run_unary(OpId::relu, x, 0.0, false);
  if (autograd::needs_grad({&x})) {
    autograd::record(OpId::relu, {x}, {out}, [sx = SavedTensor(x)](const TensorList& g) -> TensorList {
      return {relu_backward(g[0], sx.unpack("relu"))};
    });
  }
  return out;
}

Tensor gelu(const Tensor& x_in, const std::string& approximate) {
  const Tensor x = apply_precision(OpId::gelu, x_in)[0];
  const double flag = gelu_flag("gelu", approximate);
  Tensor out = run_unary(OpId::gelu, x, flag, true);
  if (autograd::needs_grad({&x})) {
    autograd::record(OpId::gelu, {x}, {out}, [sx = SavedTensor(x), approximate](const TensorList& g) -> TensorList {
      return {gelu_backward(g[0], sx.unpack("gelu"), approximate)};
    });
  }
  return out;
}

Tensor pow(const Tensor& x_in, Scalar exponent) {
  const Tensor x = apply_precision(OpId::pow_scalar, x_in)[0];
  const double e = exponent.to_double();
  Tensor out = run_unary(OpId::pow_scalar, x, e, true);
  if (autograd::needs_grad({&x})) {
    // d x^e = e·x^(e-1); e = 0 gives a zero gradient (not 0·x^-1, which is NaN at x = 0).
    autograd::record(OpId::pow_scalar, {x}, {out}, [sx = SavedTensor(x), e](const TensorList& g) -> TensorList {
      if (e == 0.0) return {zeros_like(g[0])};
      const Tensor x = sx.unpack("pow");
      if (e == 1.0) return {g[0]};
      if (e == 2.0) return {mul(g[0], mul(x, 2.0))};
      return {mul(g[0], mul(pow(x, e - 1.0), e))};
    });
  }
  return out;
}

}  // namespace precis
