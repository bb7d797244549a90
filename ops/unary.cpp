// Unary element-wise ops: one front-end (unary_op) for all of them; the simple ones take their
// derivative from the table ops/unary_ops.def. Kernels: ops/cpu/unary.cpp.
#include <concepts>
#include <string>

#include "ops/precision.h"
#include "autograd/record.h"
#include "ops/broadcast.h"
#include "ops/elementwise_backward.h"
#include "ops/functional.h"
#include "ops/kernels.h"
#include "tensor/factory.h"

namespace precis {

using autograd::SavedTensor;
using autograd::TensorList;

namespace {

// Which dtypes a unary op takes (ops/unary_ops.def).
enum class Domain { Floating, Numeric };
// What a unary op's derivative reads besides the incoming gradient.
enum class Saved { nothing, self, result };

// Runs the unary kernel of `op` into a new tensor of x's shape, dtype and layout (empty_elementwise).
// Floating: the op is defined on f32/f64/f16/bf16 only; Numeric: also i32/i64.
Tensor run_unary(OpId op, const Tensor& x, double param, Domain domain) {
  const char* name = op_name(op);
  PRECIS_CHECK(x.defined(), name, ": the input tensor is undefined");
  if (domain == Domain::Floating) {
    PRECIS_CHECK_DTYPE(x.is_floating_point(), name, ": expected a floating tensor, got ", x.describe(),
                       "; convert it first, e.g. ", name, "(x.to(DType::f32))");
  } else {
    PRECIS_CHECK_DTYPE(x.dtype() != DType::boolean, name, ": not defined for a bool tensor ", x.describe(),
                       "; convert it first, e.g. ", name, "(x.to(DType::f32))");
  }
  Tensor out = empty_elementwise(x.sizes(), x.dtype(), x.device(), {&x}, name);
  kernel<kernels::UnaryKernel>(op, x.device().type, x.dtype())(out, x, param);
  return out;
}

// A kernel parameter, either a value or a function computing it: gelu validates its argument
// only after the precision hook has seen the call, as every op checks its operands after it.
double param_value(double p) { return p; }
template <std::invocable F>
double param_value(const F& f) { return f(); }

// The front-end of every unary op: precision hook, checks, kernel, and, when a gradient is
// needed, a backward node returning derivative(grad, saved) with `saved` as S says (undefined for
// Saved::nothing). `name` names the op in the saved tensor's in-place error. Nothing here costs
// more than the hand-written form did: the derivative is a functor stored in the one closure that
// record() keeps, built only when a gradient is needed.
template <Saved S, typename Param, typename Derivative>
Tensor unary_op(OpId op, const char* name, const Tensor& x_in, const Param& param, Domain domain,
                const Derivative& derivative) {
  const Tensor x = apply_precision(op, x_in)[0];
  Tensor out = run_unary(op, x, param_value(param), domain);
  if (autograd::needs_grad({&x})) {
    SavedTensor saved;
    if constexpr (S == Saved::self) saved = SavedTensor(x);
    if constexpr (S == Saved::result) saved = SavedTensor(out);
    autograd::record(op, {x}, {out}, [saved = std::move(saved), name, derivative](const TensorList& g) -> TensorList {
      return {derivative(g[0], saved.unpack(name))};
    });
  }
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
  Tensor out = empty_elementwise(x.sizes(), x.dtype(), x.device(), {&grad, &x}, name);
  kernel<kernels::BinaryKernel>(op, x.device().type, x.dtype())(out, grad, x, param);
  return out;
}

}  // namespace

Tensor relu_backward(const Tensor& grad, const Tensor& x) { return run_backward(OpId::relu_backward, grad, x, 0.0); }

Tensor gelu_backward(const Tensor& grad, const Tensor& x, const std::string& approximate) {
  return run_backward(OpId::gelu_backward, grad, x, gelu_flag("gelu_backward", approximate));
}

// One public function per row of the table.
#define PRECIS_UNARY(op, domain, saved, derivative)                                                           \
  Tensor op(const Tensor& x) {                                                                                \
    return unary_op<Saved::saved>(OpId::op, #op, x, 0.0, Domain::domain,                                     \
                                  [](const Tensor& grad, [[maybe_unused]] const Tensor& saved) -> Tensor { \
                                    return derivative;                                                        \
                                  });                                                                         \
  }
#include "ops/unary_ops.def"
#undef PRECIS_UNARY

Tensor gelu(const Tensor& x, const std::string& approximate) {
  return unary_op<Saved::self>(
      OpId::gelu, "gelu", x, [&] { return gelu_flag("gelu", approximate); }, Domain::Floating,
      [approximate](const Tensor& grad, const Tensor& self) { return gelu_backward(grad, self, approximate); });
}

Tensor pow(const Tensor& x, Scalar exponent) {
  const double e = exponent.to_double();
  // d x^e = e·x^(e-1); e = 0 gives a zero gradient (not 0·x^-1, which is NaN at x = 0) and needs
  // no saved input.
  if (e == 0.0) {
    return unary_op<Saved::nothing>(OpId::pow_scalar, "pow", x, e, Domain::Floating,
                                    [](const Tensor& grad, const Tensor&) { return zeros_like(grad); });
  }
  return unary_op<Saved::self>(OpId::pow_scalar, "pow", x, e, Domain::Floating,
                               [e](const Tensor& grad, const Tensor& self) -> Tensor {
                                 if (e == 1.0) return grad;
                                 if (e == 2.0) return mul(grad, mul(self, 2.0));
                                 return mul(grad, mul(pow(self, e - 1.0), e));
                               });
}

}  // namespace precis
