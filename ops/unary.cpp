// Unary element-wise ops: one declaration template (Unary) for all of them, run by the op
// front-end (ops/frontend.h); the simple ones take their derivative from the table
// ops/unary_ops.def. Kernels: ops/cpu/unary.cpp.
#include <cmath>
#include <concepts>
#include <string>

#include "ops/frontend.h"
#include "ops/detail/broadcast.h"
#include "ops/detail/elementwise_backward.h"
#include "ops/functional.h"
#include "ops/contracts/kernels.h"
#include "tensor/factory.h"

namespace precis {

using autograd::SavedTensor;
using autograd::TensorList;

using detail::Domain;
using detail::OpContext;

namespace {

// What a unary op's derivative reads besides the incoming gradient.
enum class Keep { nothing, self, result };

// A kernel parameter, either a value or a function computing it: gelu validates its argument
// only after the precision hook has seen the call, as every op checks its operands after it.
double param_value(double p) { return p; }
template <std::invocable F>
double param_value(const F& f) { return f(); }

// The declaration of every unary op (ops/frontend.h): the kernel of `Id` into a new tensor of
// x's shape, dtype and layout (empty_elementwise), and the derivative D::of(grad, kept, param)
// with `kept` the input, the output or nothing as K says. `name` names the op in errors (pow's
// row is pow_scalar).
template <OpId Id, Domain D, Keep K, typename Derivative>
struct Unary {
  static constexpr OpId id = Id;
  static constexpr Domain domain = D;
  struct Saved {
    SavedTensor kept;
    double param = 0.0;
    const char* name = nullptr;
  };
  template <typename Param>
  static Tensor forward(OpContext<Saved>& ctx, const std::array<Tensor, 1>& in, const char* name, const Param& p) {
    const Tensor& x = in[0];
    const double param = param_value(p);
    Tensor out = empty_elementwise(x.sizes(), x.dtype(), x.device(), {&x}, name);
    kernel<kernels::UnaryKernel>(Id, x.device().type, x.dtype())(out, x, param);
    if (ctx.grad) {
      if constexpr (K == Keep::self) ctx.saved.kept = SavedTensor(x);
      if constexpr (K == Keep::result) ctx.saved.kept = SavedTensor(out);
      ctx.saved.param = param;
      ctx.saved.name = name;
    }
    return out;
  }
  static TensorList backward(const Saved& s, const TensorList& g) {
    return {Derivative::of(g[0], s.kept.unpack(s.name), s.param)};
  }
};

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

// The table's domain column: `promoting` ops have floating kernels and take an integer or bool
// tensor converted to f32 (an integer tensor never requires grad, so nothing is lost). fp8 is
// storage, not promoted: the front-end refuses it.
namespace {
enum class RowDomain { floating, numeric, promoting };
constexpr Domain kernel_domain(RowDomain d) { return d == RowDomain::numeric ? Domain::numeric : Domain::floating; }
bool integer_or_bool(const Tensor& x) { return x.defined() && (is_integral(x.dtype()) || x.dtype() == DType::boolean); }
Tensor promoted_input(RowDomain d, const Tensor& x) {
  return d == RowDomain::promoting && integer_or_bool(x) ? x.to(DType::f32) : x;
}
}  // namespace

// One declaration and one public function per row of the table. The row's `saved` column names
// the derivative's second parameter (self or result), so the formula reads it by that name.
#define PRECIS_UNARY(op, domain, saved, derivative)                                                           \
  namespace {                                                                                                 \
  struct op##_derivative {                                                                                    \
    static Tensor of(const Tensor& grad, [[maybe_unused]] const Tensor& saved, double) { return derivative; } \
  };                                                                                                          \
  }                                                                                                           \
  Tensor op(const Tensor& x) {                                                                                \
    return detail::call<Unary<OpId::op, kernel_domain(RowDomain::domain), Keep::saved, op##_derivative>>(      \
        {promoted_input(RowDomain::domain, x)}, #op, 0.0);                                                    \
  }
#include "ops/unary_ops.def"
#undef PRECIS_UNARY

namespace {
struct GeluDerivative {
  static Tensor of(const Tensor& grad, const Tensor& self, double tanh_flag) {
    return gelu_backward(grad, self, tanh_flag != 0.0 ? "tanh" : "none");
  }
};
struct ZeroDerivative {
  static Tensor of(const Tensor& grad, const Tensor&, double) { return zeros_like(grad); }
};
// d x^e = e·x^(e-1)
struct PowDerivative {
  static Tensor of(const Tensor& grad, const Tensor& self, double e) {
    if (e == 1.0) return grad;
    if (e == 2.0) return mul(grad, mul(self, 2.0));
    return mul(grad, mul(pow(self, e - 1.0), e));
  }
};
// pow's row in the table is pow_scalar; users call it pow.
template <Keep K, typename Derivative>
struct Pow : Unary<OpId::pow_scalar, Domain::floating, K, Derivative> {
  static constexpr const char* name = "pow";
};
// x > 0 ? x : negative_slope·x, of public ops (which record their own nodes): NaN takes the
// slope branch and stays NaN; the gradient at 0 is the slope, as PyTorch's.
struct LeakyRelu {
  static constexpr OpId id = OpId::leaky_relu;
  static constexpr Domain domain = Domain::floating;
  static Tensor forward(OpContext<detail::NoSaved>&, const std::array<Tensor, 1>& in, double negative_slope) {
    PRECIS_CHECK(std::isfinite(negative_slope), "leaky_relu: negative_slope must be finite, got ", negative_slope);
    const Tensor& x = in[0];
    return where(gt(x, 0.0), x, mul(x, negative_slope));
  }
};
}  // namespace

Tensor leaky_relu(const Tensor& x, double negative_slope) { return detail::call<LeakyRelu>({x}, negative_slope); }

Tensor gelu(const Tensor& x, const std::string& approximate) {
  return detail::call<Unary<OpId::gelu, Domain::floating, Keep::self, GeluDerivative>>(
      {x}, "gelu", [&] { return gelu_flag("gelu", approximate); });
}

Tensor pow(const Tensor& x, Scalar exponent) {
  const double e = exponent.to_double();
  // An integer tensor to a fractional power is f32, as PyTorch's; to an integral power PyTorch
  // computes in the integer type, which precis has no kernel for (the front-end's DTypeError).
  if (integer_or_bool(x) && e != std::trunc(e)) return pow(x.to(DType::f32), exponent);
  // e = 0 gives a zero gradient (not 0·x^-1, which is NaN at x = 0) and needs no saved input.
  if (e == 0.0) return detail::call<Pow<Keep::nothing, ZeroDerivative>>({x}, "pow", e);
  return detail::call<Pow<Keep::self, PowDerivative>>({x}, "pow", e);
}

}  // namespace precis
