// The op-table entries of the CUDA softmax and log_softmax kernels, forward and backward: operand
// checks (row_operands.h) and the launches of ops/cuda/softmax.cu.
#include "core/cuda/cuda_context.h"
#include "ops/cuda/cuda_backend.h"
#include "ops/cuda/norm_launch.h"
#include "ops/cuda/row_operands.h"
#include "ops/contracts/kernels_norm.h"
#include "ops/op_table.h"

namespace precis::cuda {

namespace {

using rows::acc_of;
using rows::channels_last_rows;
using rows::check_operands;
using rows::ptr;
using rows::scratch_doubles;

template <bool kLog>
void softmax_kernel(const Tensor& y, const Tensor& x, int64_t dim) {
  check_operands(kLog ? "log_softmax" : "softmax", x, {&y, &x}, {});
  const kernels::DimSplit l = kernels::split_at_dim(x, dim);
  DeviceGuard guard(x.device().index);
  launch_softmax(x.dtype(), kLog, y.data_ptr(), x.data_ptr(), l.outer, l.dim, l.inner, device_stream(x.device().index));
}

template <bool kLog>
void softmax_backward_kernel(const Tensor& dx, const Tensor& grad, const Tensor& y, int64_t dim) {
  check_operands(kLog ? "log_softmax_backward" : "softmax_backward", y, {&dx, &grad}, {});
  const kernels::DimSplit l = kernels::split_at_dim(y, dim);
  DeviceGuard guard(y.device().index);
  launch_softmax_backward(y.dtype(), kLog, dx.data_ptr(), grad.data_ptr(), y.data_ptr(), l.outer, l.dim, l.inner,
                          device_stream(y.device().index));
}

}  // namespace

void register_softmax_kernels() {
  for (DType dt : {DType::f32, DType::f64, DType::f16, DType::bf16}) {
    register_kernel<kernels::SoftmaxKernel>(OpId::softmax, DeviceType::cuda, dt, &softmax_kernel<false>);
    register_kernel<kernels::SoftmaxKernel>(OpId::log_softmax, DeviceType::cuda, dt, &softmax_kernel<true>);
    register_kernel<kernels::SoftmaxBackwardKernel>(OpId::softmax_backward, DeviceType::cuda, dt,
                                                    &softmax_backward_kernel<false>);
    register_kernel<kernels::SoftmaxBackwardKernel>(OpId::log_softmax_backward, DeviceType::cuda, dt,
                                                    &softmax_backward_kernel<true>);
  }
}

}  // namespace precis::cuda
