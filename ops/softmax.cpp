// softmax and log_softmax, declared for the op front-end (ops/frontend.h): checks, the kernel
// call, and a backward that runs the fused softmax_backward / log_softmax_backward kernels on the
// saved output. Kernels: ops/cpu/softmax.cpp (row routines in ops/cpu/softmax_rows.h).
#include <optional>

#include "ops/frontend.h"
#include "ops/functional.h"
#include "ops/contracts/kernels_norm.h"
#include "ops/op_table.h"
#include "tensor/factory.h"

namespace precis {

using autograd::SavedTensor;
using autograd::TensorList;

using detail::Domain;
using detail::OpContext;

namespace {

// The fused backward: dx from the upstream gradient and the forward output y (same shape).
Tensor softmax_family_backward(OpId op, const Tensor& grad, const Tensor& y, int64_t dim) {
  const Tensor g = (grad.dtype() == y.dtype() ? grad : grad.to(y.dtype())).contiguous();
  Tensor dx = empty(y.sizes(), {.dtype = y.dtype(), .device = y.device()});
  kernel<kernels::SoftmaxBackwardKernel>(op, y.device().type, y.dtype())(dx, g, y, dim);
  return dx;
}

// softmax / log_softmax. Its own dtype check (Domain::any): dtype= may make an integer input
// floating, and the message suggests it.
template <OpId Id>
struct SoftmaxFamily {
  static constexpr OpId id = Id;
  static constexpr OpId backward_id = Id == OpId::softmax ? OpId::softmax_backward : OpId::log_softmax_backward;
  static constexpr Domain domain = Domain::any;
  struct Saved {
    SavedTensor y;
    int64_t dim = 0;
    std::optional<DType> input_dtype;  // set when dtype= cast the input: the gradient goes back to it
  };
  static Tensor forward(OpContext<Saved>& ctx, const std::array<Tensor, 1>& in, int64_t dim,
                        std::optional<DType> dtype) {
    const char* name = op_name(id);
    const Tensor& input = in[0];
    if (dtype) {
      PRECIS_CHECK_DTYPE(is_floating(*dtype), name, ": dtype must be a floating dtype, got ", dtype_name(*dtype),
                         " for an input ", input.describe());
    }
    // As PyTorch: with dtype given, the input is cast first and the op runs there. The cast is
    // differentiable: this node's backward casts the gradient back to the input's dtype (the
    // cast's backward), so the cast itself records no node.
    const bool cast_first = dtype && *dtype != input.dtype();
    const Tensor x = cast_first ? cast(input.detach(), *dtype) : input.detach();
    PRECIS_CHECK_DTYPE(x.is_floating_point(), name, ": expected a floating tensor, got ", x.describe(),
                       "; convert it first, e.g. ", name, "(x.to(DType::f32), dim) or pass dtype = DType::f32");
    const int64_t d = detail::wrap_dim(dim, x.dim(), name, x);
    // A 0-d tensor is a row of one element.
    const Tensor xc = x.dim() == 0 ? x.reshape({1}) : x.contiguous();
    Tensor out = empty(xc.sizes(), {.dtype = x.dtype(), .device = x.device()});
    kernel<kernels::SoftmaxKernel>(id, x.device().type, x.dtype())(out, xc, d);
    Tensor result = x.dim() == 0 ? out.reshape({}) : out;
    if (ctx.grad)
      ctx.saved = {SavedTensor(result), d, cast_first ? std::optional<DType>(input.dtype()) : std::nullopt};
    return result;
  }
  static TensorList backward(const Saved& s, const TensorList& g) {
    const Tensor y = s.y.unpack(op_name(id));
    const Tensor dx = y.dim() == 0
                          ? softmax_family_backward(backward_id, g[0].reshape({1}), y.reshape({1}), 0).reshape({})
                          : softmax_family_backward(backward_id, g[0], y.contiguous(), s.dim);
    return {s.input_dtype ? dx.to(*s.input_dtype) : dx};
  }
};

}  // namespace

Tensor softmax(const Tensor& x, int64_t dim, std::optional<DType> dtype) {
  return detail::call<SoftmaxFamily<OpId::softmax>>({x}, dim, dtype);
}

Tensor log_softmax(const Tensor& x, int64_t dim, std::optional<DType> dtype) {
  return detail::call<SoftmaxFamily<OpId::log_softmax>>({x}, dim, dtype);
}

}  // namespace precis
