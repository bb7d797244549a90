// Bad-input cases (tests/support/op_cases.h) for the element-wise ops: unary, binary, comparisons,
// selection, and the backward rows of the unary family.
#include <limits>

#include "autograd/grad_mode.h"
#include "ops/functional.h"
#include "tests/support/op_cases.h"
#include "tests/support/tensor_testing.h"

namespace precis::testing {
namespace {

Tensor f32(const Shape& s) { return ones(s); }
Tensor i64(const Shape& s) { return zeros(s, {.dtype = DType::i64}); }
Tensor b8(const Shape& s) { return zeros(s, {.dtype = DType::boolean}); }
Tensor f8(const Shape& s) { return zeros(s).to(DType::f8_e4m3); }

// Backward through fn's node a second time, after the first freed its saved tensors.
void backward_twice(Tensor (*fn)(const Tensor&)) {
  Tensor x = randn_input({3, 4}, true, 1, DType::f32);
  Tensor y = fn(x);
  y.backward(ones_like(y));
  y.backward(ones_like(y));
}

// Backward after the input fn saved was modified in place.
void backward_after_inplace(Tensor (*fn)(const Tensor&)) {
  Tensor x = randn_input({3, 4}, true, 1, DType::f32);
  Tensor y = fn(x);
  {
    NoGradGuard no_grad;
    x.fill_(0.5);
  }
  y.backward(ones_like(y));
}

// Backward after the output fn saved (the derivative tables' `result`) was modified in place.
void backward_after_output_inplace(Tensor (*fn)(const Tensor&)) {
  Tensor x = randn_input({3, 4}, true, 1, DType::f32);
  Tensor y = fn(x);
  {
    NoGradGuard no_grad;
    y.fill_(0.5);
  }
  y.backward(ones_like(y));
}

Tensor exp_fn(const Tensor& x) { return exp(x); }
Tensor mul_self(const Tensor& x) { return mul(x, x); }
Tensor div_self(const Tensor& x) { return div(x, x); }
Tensor gelu_none(const Tensor& x) { return gelu(x); }
Tensor gelu_tanh(const Tensor& x) { return gelu(x, "tanh"); }
Tensor relu_fn(const Tensor& x) { return relu(x); }

const bool kUnary = register_error_cases({
    PRECIS_BAD_INPUT(neg, DTypeError, "a bool tensor", neg(b8({2})), "neg", "bool"),
    PRECIS_BAD_INPUT(neg, ValueError, "an undefined tensor", neg(Tensor()), "neg", "undefined"),
    PRECIS_BAD_INPUT(abs, DTypeError, "a bool tensor", abs(b8({2})), "abs", "bool"),
    PRECIS_BAD_INPUT(abs, ValueError, "an undefined tensor", abs(Tensor()), "abs", "undefined"),
    PRECIS_BAD_INPUT(exp, DTypeError, "an fp8 tensor (storage only)", exp(f8({2})), "exp", "f8_e4m3"),
    PRECIS_BAD_INPUT(exp, ValueError, "an undefined tensor", exp(Tensor()), "exp", "undefined"),
    PRECIS_BAD_INPUT(log, DTypeError, "an fp8 tensor (storage only)", log(f8({2})), "log", "f8_e4m3"),
    PRECIS_BAD_INPUT(log, ValueError, "an undefined tensor", log(Tensor()), "log", "undefined"),
    PRECIS_BAD_INPUT(sqrt, DTypeError, "an fp8 tensor (storage only)", sqrt(f8({2})), "sqrt", "f8_e4m3"),
    PRECIS_BAD_INPUT(sqrt, ValueError, "an undefined tensor", sqrt(Tensor()), "sqrt", "undefined"),
    PRECIS_BAD_INPUT(rsqrt, DTypeError, "an fp8 tensor (storage only)", rsqrt(f8({2})), "rsqrt", "f8_e4m3"),
    PRECIS_BAD_INPUT(rsqrt, ValueError, "an undefined tensor", rsqrt(Tensor()), "rsqrt", "undefined"),
    PRECIS_BAD_INPUT(tanh, DTypeError, "an fp8 tensor (storage only)", tanh(f8({2})), "tanh", "f8_e4m3"),
    PRECIS_BAD_INPUT(tanh, ValueError, "an undefined tensor", tanh(Tensor()), "tanh", "undefined"),
    PRECIS_BAD_INPUT(sigmoid, DTypeError, "an fp8 tensor (storage only)", sigmoid(f8({2})), "sigmoid", "f8_e4m3"),
    PRECIS_BAD_INPUT(sigmoid, ValueError, "an undefined tensor", sigmoid(Tensor()), "sigmoid", "undefined"),
    PRECIS_BAD_INPUT(silu, DTypeError, "an integer tensor", silu(i64({2})), "silu", "i64", "floating"),
    PRECIS_BAD_INPUT(silu, ValueError, "an undefined tensor", silu(Tensor()), "silu", "undefined"),
    PRECIS_BAD_INPUT(relu, DTypeError, "a bool tensor", relu(b8({2})), "relu", "bool"),
    PRECIS_BAD_INPUT(leaky_relu, DTypeError, "an integer tensor", leaky_relu(i64({2})), "leaky_relu", "i64",
                     "floating"),
    PRECIS_BAD_INPUT(leaky_relu, ValueError, "a NaN slope",
                     leaky_relu(f32({2}), std::numeric_limits<double>::quiet_NaN()), "leaky_relu", "finite"),
    PRECIS_BAD_INPUT(relu, ValueError, "an undefined tensor", relu(Tensor()), "relu", "undefined"),
    PRECIS_BAD_INPUT(gelu, ValueError, "an unknown approximation", gelu(f32({2}), "fast"), "gelu", "\"fast\""),
    PRECIS_BAD_INPUT(gelu, DTypeError, "an integer tensor", gelu(i64({2})), "gelu", "i64"),
    PRECIS_BAD_INPUT(pow_scalar, DTypeError, "a bool tensor", pow(b8({2}), 2.0), "pow", "bool"),
    PRECIS_BAD_INPUT(pow_scalar, ValueError, "an undefined tensor", pow(Tensor(), 2.0), "pow", "undefined"),
    PRECIS_BAD_INPUT(erf, DTypeError, "an fp8 tensor (storage only)", erf(f8({2})), "erf", "f8_e4m3"),
    PRECIS_BAD_INPUT(erf, ValueError, "an undefined tensor", erf(Tensor()), "erf", "undefined"),
});

const bool kUnaryBackward = register_error_cases({
    PRECIS_BAD_INPUT(relu_backward, StateError, "backward a second time", backward_twice(relu_fn),
                     "relu_backward", "second time"),
    // relu keeps its output (ops/unary_ops.def), so changing that output breaks its backward.
    PRECIS_BAD_INPUT(relu_backward, StateError, "the saved output modified in place",
                     backward_after_output_inplace(relu_fn), "relu", "modified by an in-place operation"),
    PRECIS_BAD_INPUT(gelu_backward, StateError, "backward a second time", backward_twice(gelu_tanh),
                     "gelu_backward", "second time"),
    PRECIS_BAD_INPUT(gelu_backward, StateError, "the saved input modified in place", backward_after_inplace(gelu_none),
                     "gelu", "modified by an in-place operation"),
});

// The derivative tables (ops/unary_ops.def, ops/binary_ops.def) keep what each row names, checked
// for in-place changes and named after the op.
const bool kSaved = register_error_cases({
    PRECIS_BAD_INPUT(exp, StateError, "the saved output modified in place", backward_after_output_inplace(exp_fn),
                     "exp", "modified by an in-place operation"),
    PRECIS_BAD_INPUT(mul, StateError, "a saved operand modified in place", backward_after_inplace(mul_self),
                     "mul", "modified by an in-place operation"),
    PRECIS_BAD_INPUT(div, StateError, "a saved operand modified in place", backward_after_inplace(div_self),
                     "div", "modified by an in-place operation"),
});

const bool kBinary = register_error_cases({
    PRECIS_BAD_INPUT(add, ShapeError, "shapes that do not broadcast", add(f32({2, 3}), f32({4})), "add", "[2, 3]",
                     "[4]"),
    PRECIS_BAD_INPUT(add, ValueError, "an undefined operand", add(f32({2}), Tensor()), "add", "undefined"),
    PRECIS_BAD_INPUT(add, ValueError, "an alpha the integer dtype cannot hold", add(i64({2}), i64({2}), 1e19), "add",
                     "alpha 1e+19", "[2] i64 cpu", "without overflow"),
    PRECIS_BAD_INPUT(sub, ValueError, "an alpha the integer dtype cannot hold", sub(i64({2}), i64({2}), -1e300), "sub",
                     "alpha -1e+300", "[2] i64 cpu"),
    PRECIS_BAD_INPUT(sub, ShapeError, "shapes that do not broadcast", sub(f32({3}), f32({2})), "sub", "[3]", "[2]"),
    PRECIS_BAD_INPUT(sub, NotImplementedError, "bool operands (no bool subtraction)", sub(b8({2}), b8({2})), "sub",
                     "bool"),
    PRECIS_BAD_INPUT(mul, ShapeError, "shapes that do not broadcast", mul(f32({2, 3}), f32({3, 2})), "mul"),
    PRECIS_BAD_INPUT(mul, ValueError, "an undefined operand", mul(Tensor(), f32({2})), "mul", "undefined"),
    PRECIS_BAD_INPUT(div, ShapeError, "shapes that do not broadcast", div(f32({5}), f32({2})), "div"),
    PRECIS_BAD_INPUT(div, ValueError, "an undefined operand", div(f32({2}), Tensor()), "div", "undefined"),
    PRECIS_BAD_INPUT(maximum, ShapeError, "shapes that do not broadcast", maximum(f32({2}), f32({3})), "maximum"),
    PRECIS_BAD_INPUT(maximum, ValueError, "an undefined operand", maximum(Tensor(), f32({2})), "maximum",
                     "undefined"),
    PRECIS_BAD_INPUT(minimum, ShapeError, "shapes that do not broadcast", minimum(f32({2}), f32({3})), "minimum"),
    PRECIS_BAD_INPUT(minimum, ValueError, "an undefined operand", minimum(f32({2}), Tensor()), "minimum",
                     "undefined"),
    PRECIS_BAD_INPUT(eq, ShapeError, "shapes that do not broadcast", eq(f32({2}), f32({3})), "eq"),
    PRECIS_BAD_INPUT(eq, ValueError, "an undefined operand", eq(Tensor(), f32({2})), "eq", "undefined"),
    PRECIS_BAD_INPUT(ne, ShapeError, "shapes that do not broadcast", ne(f32({2}), f32({3})), "ne"),
    PRECIS_BAD_INPUT(ne, ValueError, "an undefined operand", ne(f32({2}), Tensor()), "ne", "undefined"),
    PRECIS_BAD_INPUT(lt, ShapeError, "shapes that do not broadcast", lt(f32({2}), f32({3})), "lt"),
    PRECIS_BAD_INPUT(lt, ValueError, "an undefined operand", lt(Tensor(), f32({2})), "lt", "undefined"),
    PRECIS_BAD_INPUT(le, ShapeError, "shapes that do not broadcast", le(f32({2}), f32({3})), "le"),
    PRECIS_BAD_INPUT(le, ValueError, "an undefined operand", le(f32({2}), Tensor()), "le", "undefined"),
    PRECIS_BAD_INPUT(gt, ShapeError, "shapes that do not broadcast", gt(f32({2}), f32({3})), "gt"),
    PRECIS_BAD_INPUT(gt, ValueError, "an undefined operand", gt(Tensor(), f32({2})), "gt", "undefined"),
    PRECIS_BAD_INPUT(ge, ShapeError, "shapes that do not broadcast", ge(f32({2}), f32({3})), "ge"),
    PRECIS_BAD_INPUT(ge, ValueError, "an undefined operand", ge(f32({2}), Tensor()), "ge", "undefined"),
    PRECIS_BAD_INPUT(where, DTypeError, "a condition that is not bool", where(f32({2}), f32({2}), f32({2})), "where",
                     "bool"),
    PRECIS_BAD_INPUT(where, ShapeError, "shapes that do not broadcast", where(b8({2}), f32({3}), f32({2})), "where"),
    PRECIS_BAD_INPUT(masked_fill, ValueError, "a value the integer dtype cannot hold",
                     masked_fill(i64({2}), b8({2}), std::numeric_limits<double>::infinity()), "masked_fill", "inf",
                     "x [2] i64 cpu", "without overflow"),
    PRECIS_BAD_INPUT(masked_fill, DTypeError, "a mask that is not bool", masked_fill(f32({2}), f32({2}), 0.0),
                     "masked_fill", "bool"),
    PRECIS_BAD_INPUT(masked_fill, ShapeError, "a mask that does not broadcast", masked_fill(f32({2}), b8({3}), 0.0),
                     "masked_fill"),
});

}  // namespace
}  // namespace precis::testing
