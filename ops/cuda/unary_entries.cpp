// Tensor unpacking and registration of the CUDA unary kernels (neg ... erf) and of the relu/gelu
// backward kernels. The device code is in unary.cu.
#include "core/cuda/cuda_context.h"
#include "ops/cuda/cuda_backend.h"
#include "ops/contracts/kernels.h"
#include "ops/op_table.h"

namespace precis::cuda {

namespace {

constexpr OpId kUnaryOpIds[kNumUnaryOps] = {OpId::neg,  OpId::abs,     OpId::exp,  OpId::log,
                                             OpId::sqrt, OpId::rsqrt,   OpId::tanh, OpId::sigmoid,
                                             OpId::relu, OpId::gelu,    OpId::pow_scalar, OpId::erf,
                                             OpId::silu};

// out = f(x); x: out's shape, any strides, same dtype; out contiguous.
template <UnaryOp Op>
void unary_kernel(const Tensor& out, const Tensor& x, double param) {
  const char* name = op_name(kUnaryOpIds[static_cast<int>(Op)]);
  PRECIS_CHECK_DTYPE(out.dtype() == x.dtype(), name, ": CUDA kernel expects out of x's dtype; got out ",
                     out.describe(), ", x ", x.describe());
  ElementwiseLaunch l = make_elementwise_launch(name, {&out, &x});
  if (l.numel == 0) return;
  DeviceGuard guard(out.device().index);
  launch_unary(Op, x.dtype(), out.data_ptr(), x.data_ptr(), param, l);
}

// out = grad · f'(x) (the BinaryKernel signature: a = grad, b = x, alpha = gelu's flag).
template <ActivationBackward Op>
void backward_kernel(const Tensor& out, const Tensor& grad, const Tensor& x, double param) {
  const char* name = Op == ActivationBackward::relu ? "relu_backward" : "gelu_backward";
  PRECIS_CHECK_DTYPE(out.dtype() == x.dtype() && grad.dtype() == x.dtype(), name,
                     ": CUDA kernel expects out, grad and x of one dtype; got out ", out.describe(), ", grad ",
                     grad.describe(), ", x ", x.describe());
  ElementwiseLaunch l = make_elementwise_launch(name, {&out, &grad, &x});
  if (l.numel == 0) return;
  DeviceGuard guard(out.device().index);
  launch_activation_backward(Op, x.dtype(), out.data_ptr(), grad.data_ptr(), x.data_ptr(), param, l);
}

template <UnaryOp Op>
void register_unary() {
  for (int i = 0; i < kNumDTypes; ++i) {
    const DType dt = static_cast<DType>(i);
    if (unary_supported(Op, dt))
      register_kernel<kernels::UnaryKernel>(kUnaryOpIds[static_cast<int>(Op)], DeviceType::cuda, dt, &unary_kernel<Op>);
  }
}

}  // namespace

void register_unary_kernels() {
  register_unary<UnaryOp::neg>();
  register_unary<UnaryOp::abs>();
  register_unary<UnaryOp::exp>();
  register_unary<UnaryOp::log>();
  register_unary<UnaryOp::sqrt>();
  register_unary<UnaryOp::rsqrt>();
  register_unary<UnaryOp::tanh>();
  register_unary<UnaryOp::sigmoid>();
  register_unary<UnaryOp::relu>();
  register_unary<UnaryOp::gelu>();
  register_unary<UnaryOp::pow>();
  register_unary<UnaryOp::erf>();
  register_unary<UnaryOp::silu>();
  for (DType dt : {DType::f32, DType::f64, DType::f16, DType::bf16}) {
    register_kernel<kernels::BinaryKernel>(OpId::relu_backward, DeviceType::cuda, dt,
                                           &backward_kernel<ActivationBackward::relu>);
    register_kernel<kernels::BinaryKernel>(OpId::gelu_backward, DeviceType::cuda, dt,
                                           &backward_kernel<ActivationBackward::gelu>);
  }
}

}  // namespace precis::cuda
