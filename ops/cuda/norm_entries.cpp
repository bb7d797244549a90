// The op-table entries of the CUDA normalisation kernels (batch_norm, layer_norm, group_norm and
// their backward kernels): operand checks (row_operands.h), scratch, and the launches of
// ops/cuda/norm.cu; registered for f32, f64, f16 and bf16.
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
using rows::XLayout;

void batch_norm_kernel(const Tensor& out, const Tensor& save_mean, const Tensor& save_rstd, const Tensor& x,
                       const Tensor& weight, const Tensor& bias, const Tensor& running_mean,
                       const Tensor& running_var, bool training, double momentum, double eps) {
  const bool cl = channels_last_rows(x);
  const XLayout layout = cl ? XLayout::channels_last : XLayout::contiguous;
  check_operands("batch_norm", x, {&out}, {&save_mean, &save_rstd, &weight, &bias, &running_mean, &running_var},
                 layout);
  const int64_t N = x.size(0), C = x.size(1), S = x.size(2);
  DeviceGuard guard(x.device().index);
  const Tensor scratch = scratch_doubles(training ? batch_norm_scratch_doubles(C, N, S) : 1, x.device());
  launch_batch_norm(x.dtype(), out.data_ptr(), save_mean.data_ptr(), save_rstd.data_ptr(), x.data_ptr(), ptr(weight),
                    ptr(bias), ptr(running_mean), ptr(running_var), N, C, S, training, momentum, eps,
                    static_cast<double*>(scratch.data_ptr()), device_stream(x.device().index), cl);
}

void batch_norm_backward_kernel(const Tensor& dx, const Tensor& dweight, const Tensor& dbias, const Tensor& grad,
                                const Tensor& x, const Tensor& weight, const Tensor& save_mean,
                                const Tensor& save_rstd, bool training) {
  const bool cl = channels_last_rows(x);
  const XLayout layout = cl ? XLayout::channels_last : XLayout::contiguous;
  check_operands("batch_norm_backward", x, {&dx, &grad}, {&dweight, &dbias, &weight, &save_mean, &save_rstd}, layout);
  const int64_t N = x.size(0), C = x.size(1), S = x.size(2);
  DeviceGuard guard(x.device().index);
  const Tensor scratch = scratch_doubles(batch_norm_scratch_doubles(C, N, S), x.device());
  launch_batch_norm_backward(x.dtype(), ptr(dx), ptr(dweight), ptr(dbias), grad.data_ptr(), x.data_ptr(), ptr(weight),
                             save_mean.data_ptr(), save_rstd.data_ptr(), N, C, S, training,
                             static_cast<double*>(scratch.data_ptr()), device_stream(x.device().index), cl);
}

void layer_norm_kernel(const Tensor& out, const Tensor& mean, const Tensor& rstd, const Tensor& x,
                       const Tensor& weight, const Tensor& bias, double eps) {
  check_operands("layer_norm", x, {&out}, {&mean, &rstd, &weight, &bias});
  DeviceGuard guard(x.device().index);
  launch_layer_norm(x.dtype(), out.data_ptr(), mean.data_ptr(), rstd.data_ptr(), x.data_ptr(), ptr(weight), ptr(bias),
                    x.size(0), x.size(1), eps, device_stream(x.device().index));
}

void layer_norm_backward_kernel(const Tensor& dx, const Tensor& dweight, const Tensor& dbias, const Tensor& grad,
                                const Tensor& x, const Tensor& weight, const Tensor& mean, const Tensor& rstd) {
  check_operands("layer_norm_backward", x, {&dx, &grad}, {&dweight, &dbias, &weight, &mean, &rstd});
  const int64_t M = x.size(0), D = x.size(1);
  DeviceGuard guard(x.device().index);
  const bool params = dweight.defined() || dbias.defined();
  const Tensor scratch = scratch_doubles(params ? layer_norm_backward_scratch_doubles(M, D) : 1, x.device());
  launch_layer_norm_backward(x.dtype(), ptr(dx), ptr(dweight), ptr(dbias), grad.data_ptr(), x.data_ptr(), ptr(weight),
                             mean.data_ptr(), rstd.data_ptr(), M, D, static_cast<double*>(scratch.data_ptr()),
                             device_stream(x.device().index));
}

void group_norm_kernel(const Tensor& out, const Tensor& mean, const Tensor& rstd, const Tensor& x,
                       const Tensor& weight, const Tensor& bias, int64_t G, double eps) {
  check_operands("group_norm", x, {&out}, {&mean, &rstd, &weight, &bias});
  DeviceGuard guard(x.device().index);
  launch_group_norm(x.dtype(), out.data_ptr(), mean.data_ptr(), rstd.data_ptr(), x.data_ptr(), ptr(weight), ptr(bias),
                    x.size(0), x.size(1), x.size(2), G, eps, device_stream(x.device().index));
}

void group_norm_backward_kernel(const Tensor& dx, const Tensor& dweight, const Tensor& dbias, const Tensor& grad,
                                const Tensor& x, const Tensor& weight, const Tensor& mean, const Tensor& rstd,
                                int64_t G) {
  check_operands("group_norm_backward", x, {&dx, &grad}, {&dweight, &dbias, &weight, &mean, &rstd});
  const int64_t N = x.size(0), C = x.size(1), S = x.size(2);
  DeviceGuard guard(x.device().index);
  const Tensor scratch = scratch_doubles(group_norm_backward_scratch_doubles(N, C, G), x.device());
  launch_group_norm_backward(x.dtype(), ptr(dx), ptr(dweight), ptr(dbias), grad.data_ptr(), x.data_ptr(), ptr(weight),
                             mean.data_ptr(), rstd.data_ptr(), N, C, S, G, static_cast<double*>(scratch.data_ptr()),
                             device_stream(x.device().index));
}

}  // namespace

void register_norm_kernels() {
  for (DType dt : {DType::f32, DType::f64, DType::f16, DType::bf16}) {
    register_kernel<kernels::BatchNormKernel>(OpId::batch_norm, DeviceType::cuda, dt, &batch_norm_kernel);
    register_kernel<kernels::BatchNormBackwardKernel>(OpId::batch_norm_backward, DeviceType::cuda, dt,
                                                      &batch_norm_backward_kernel);
    register_kernel<kernels::LayerNormKernel>(OpId::layer_norm, DeviceType::cuda, dt, &layer_norm_kernel);
    register_kernel<kernels::LayerNormBackwardKernel>(OpId::layer_norm_backward, DeviceType::cuda, dt,
                                                      &layer_norm_backward_kernel);
    register_kernel<kernels::GroupNormKernel>(OpId::group_norm, DeviceType::cuda, dt, &group_norm_kernel);
    register_kernel<kernels::GroupNormBackwardKernel>(OpId::group_norm_backward, DeviceType::cuda, dt,
                                                      &group_norm_backward_kernel);
  }
}

}  // namespace precis::cuda
