// The op-table entries of the CUDA class-index loss kernels (cross_entropy and its backward,
// nll_loss): operand and target checks, scratch, and the launches of ops/cuda/loss.cu.
#include "core/cuda/cuda_context.h"
#include "ops/cuda/cuda_backend.h"
#include "ops/cuda/norm_launch.h"
#include "ops/cuda/row_operands.h"
#include "ops/contracts/kernels_loss.h"
#include "ops/op_table.h"

namespace precis::cuda {

namespace {

using rows::acc_of;
using rows::channels_last_rows;
using rows::check_operands;
using rows::ptr;
using rows::scratch_doubles;
using rows::XLayout;

void check_target(const char* op, const Tensor& x, const Tensor& target) {
  PRECIS_CHECK_DTYPE(target.dtype() == DType::i64 && target.device() == x.device() && target.is_contiguous(), op,
                     ": the CUDA kernel needs a contiguous i64 target on x's device; got target ", target.describe(),
                     ", x ", x.describe());
}

void cross_entropy_kernel(const Tensor& loss_rows, const Tensor& weight_rows, const Tensor& row_stats, const Tensor& x,
                          const Tensor& target, const Tensor& weight, int64_t ignore_index, double label_smoothing) {
  check_operands("cross_entropy", x, {}, {&loss_rows, &weight_rows, &row_stats, &weight});
  check_target("cross_entropy", x, target);
  DeviceGuard guard(x.device().index);
  const Tensor scratch = scratch_doubles(1, x.device());
  launch_cross_entropy(x.dtype(), loss_rows.data_ptr(), weight_rows.data_ptr(), row_stats.data_ptr(), x.data_ptr(),
                       static_cast<const int64_t*>(target.data_ptr()), ptr(weight), x.size(0), x.size(1), ignore_index,
                       label_smoothing, static_cast<double*>(scratch.data_ptr()), device_stream(x.device().index));
}

void cross_entropy_backward_kernel(const Tensor& grad_x, const Tensor& x, const Tensor& row_stats, const Tensor& target,
                                   const Tensor& weight, const Tensor& grad_rows, int64_t ignore_index,
                                   double label_smoothing) {
  check_operands("cross_entropy_backward", x, {&grad_x}, {&row_stats, &weight});
  check_target("cross_entropy_backward", x, target);
  PRECIS_CHECK_DTYPE(grad_rows.device() == x.device() && grad_rows.dtype() == acc_of(x.dtype()) && grad_rows.dim() == 1,
                     "cross_entropy_backward: the CUDA kernel needs grad_rows (M) in the acc dtype on x's device; got ",
                     grad_rows.describe(), ", x ", x.describe());
  DeviceGuard guard(x.device().index);
  const Tensor scratch = scratch_doubles(1, x.device());
  launch_cross_entropy_backward(x.dtype(), grad_x.data_ptr(), x.data_ptr(), row_stats.data_ptr(),
                                static_cast<const int64_t*>(target.data_ptr()), ptr(weight), grad_rows.data_ptr(),
                                grad_rows.stride(0), x.size(0), x.size(1), ignore_index, label_smoothing,
                                static_cast<double*>(scratch.data_ptr()), device_stream(x.device().index));
}

void nll_loss_kernel(const Tensor& loss_rows, const Tensor& weight_rows, const Tensor& x, const Tensor& target,
                     const Tensor& weight, int64_t ignore_index) {
  check_operands("nll_loss", x, {}, {&loss_rows, &weight_rows, &weight}, XLayout::any_strides);
  check_target("nll_loss", x, target);
  DeviceGuard guard(x.device().index);
  launch_nll_loss(x.dtype(), loss_rows.data_ptr(), weight_rows.data_ptr(), x.data_ptr(), x.stride(0), x.stride(1),
                  static_cast<const int64_t*>(target.data_ptr()), ptr(weight), x.size(0), x.size(1), ignore_index,
                  device_stream(x.device().index));
}

}  // namespace

void register_loss_kernels() {
  for (DType dt : {DType::f32, DType::f64, DType::f16, DType::bf16}) {
    register_kernel<kernels::CrossEntropyKernel>(OpId::cross_entropy, DeviceType::cuda, dt, &cross_entropy_kernel);
    register_kernel<kernels::CrossEntropyBackwardKernel>(OpId::cross_entropy_backward, DeviceType::cuda, dt,
                                                         &cross_entropy_backward_kernel);
    register_kernel<kernels::NllLossKernel>(OpId::nll_loss, DeviceType::cuda, dt, &nll_loss_kernel);
  }
}

}  // namespace precis::cuda
