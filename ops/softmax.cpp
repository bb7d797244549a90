// softmax and log_softmax: checks, the kernel call, and a backward that runs the fused
// softmax_backward / log_softmax_backward kernels on the saved output. Kernels:
// ops/cpu/softmax.cpp (row routines in ops/cpu/softmax_rows.h).
#include "ops/precision.h"
#include "autograd/record.h"
#include "ops/functional.h"
#include "ops/kernels_norm.h"
#include "ops/op_table.h"
#include "tensor/factory.h"

namespace precis {

using autograd::SavedTensor;
using autograd::TensorList;

namespace {

// The fused backward: dx from the upstream gradient and the forward output y (same shape).
Tensor softmax_family_backward(OpId op, const Tensor& grad, const Tensor& y, int64_t dim) {
  const Tensor g = (grad.dtype() == y.dtype() ? grad : grad.to(y.dtype())).contiguous();
  Tensor dx = empty(y.sizes(), {.dtype = y.dtype(), .device = y.device()});
  kernel<kernels::SoftmaxBackwardKernel>(op, y.device().type, y.dtype())(dx, g, y, dim);
  return dx;
}

Tensor softmax_family(OpId op, OpId backward_op, const Tensor& input_in, int64_t dim, std::optional<DType> dtype) {
  const char* name = op_name(op);
  const Tensor input = apply_precision(op, input_in)[0];
  PRECIS_CHECK(input.defined(), name, ": the input tensor is undefined");
  if (dtype) {
    PRECIS_CHECK_DTYPE(is_floating(*dtype), name, ": dtype must be a floating dtype, got ", dtype_name(*dtype),
                       " for an input ", input.describe());
  }
  // As PyTorch: with dtype given, the input is cast first (differentiably) and the op runs there.
  const Tensor x = dtype && *dtype != input.dtype() ? cast(input, *dtype) : input;
  PRECIS_CHECK_DTYPE(x.is_floating_point(), name, ": expected a floating tensor, got ", x.describe(),
                     "; convert it first, e.g. ", name, "(x.to(DType::f32), dim) or pass dtype = DType::f32");
  const int64_t d = detail::wrap_dim(dim, x.dim(), name, x);
  // A 0-d tensor is a row of one element.
  const Tensor xc = x.dim() == 0 ? x.detach().reshape({1}) : x.detach().contiguous();
  Tensor out = empty(xc.sizes(), {.dtype = x.dtype(), .device = x.device()});
  kernel<kernels::SoftmaxKernel>(op, x.device().type, x.dtype())(out, xc, d);
  Tensor result = x.dim() == 0 ? out.reshape({}) : out;
  if (autograd::needs_grad({&x})) {
    autograd::record(op, {x}, {result},
                     [sy = SavedTensor(result), backward_op, d, name](const TensorList& g) -> TensorList {
                       const Tensor y = sy.unpack(name);
                       if (y.dim() == 0)
                         return {softmax_family_backward(backward_op, g[0].reshape({1}), y.reshape({1}), 0).reshape({})};
                       return {softmax_family_backward(backward_op, g[0], y.contiguous(), d)};
                     });
  }
  return result;
}

}  // namespace

Tensor softmax(const Tensor& x, int64_t dim, std::optional<DType> dtype) {
  return softmax_family(OpId::softmax, OpId::softmax_backward, x, dim, dtype);
}

Tensor log_softmax(const Tensor& x, int64_t dim, std::optional<DType> dtype) {
  return softmax_family(OpId::log_softmax, OpId::log_softmax_backward, x, dim, dtype);
}

}  // namespace precis
