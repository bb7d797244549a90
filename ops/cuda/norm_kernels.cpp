// Tensor unpacking and registration of the CUDA normalisation, softmax and class-index loss
// kernels (batch_norm, layer_norm, group_norm, softmax, log_softmax with their backward kernels,
// cross_entropy with its backward, nll_loss). The functional code (ops/norm.cpp, softmax.cpp,
// loss.cpp) has checked shapes and made the operands contiguous (batch_norm keeps a channels-last
// input as channels-last rows); here every operand is checked to
// be on one CUDA device with the dtypes the kernel signatures promise, and scratch is allocated.
// Device code: ops/cuda/norm.cu.
#include <string>

#include "core/cuda/cuda_context.h"
#include "ops/cuda/cuda_backend.h"
#include "ops/cuda/norm_launch.h"
#include "ops/kernels_loss.h"
#include "ops/kernels_norm.h"
#include "ops/op_table.h"
#include "tensor/factory.h"

namespace precis::cuda {

namespace {

DType acc_of(DType x) { return x == DType::f64 ? DType::f64 : DType::f32; }

// Whether t, an (N, C, S) tensor, is channels-last rows: element (n, c, s) at (n·S + s)·C + c (what
// ops/norm.cpp makes of a channels-last 4-D input).
bool channels_last_rows(const Tensor& t) {
  return t.dim() == 3 && !t.is_contiguous() && t.strides()[0] == t.size(1) * t.size(2) && t.strides()[1] == 1 &&
         t.strides()[2] == t.size(1);
}

// Every defined operand on x's CUDA device; the T operands of x's dtype, the acc ones of its acc
// dtype, all contiguous — except that with channels_last x and the T operands are channels-last
// rows instead.
void check_operands(const char* op, const Tensor& x, std::initializer_list<const Tensor*> same_dtype,
                    std::initializer_list<const Tensor*> acc_dtype, bool channels_last = false) {
  const DType acc = acc_of(x.dtype());
  const auto laid_out = [&](const Tensor& t) { return channels_last ? channels_last_rows(t) : t.is_contiguous(); };
  bool ok = x.device().is_cuda() && is_floating(x.dtype()) && laid_out(x);
  for (const Tensor* t : same_dtype)
    if (t->defined()) ok = ok && t->device() == x.device() && t->dtype() == x.dtype() && laid_out(*t);
  for (const Tensor* t : acc_dtype)
    if (t->defined()) ok = ok && t->device() == x.device() && t->dtype() == acc && t->is_contiguous();
  if (ok) return;
  std::string all = "x " + x.describe();
  for (const Tensor* t : same_dtype) all += ", " + (t->defined() ? t->describe() : std::string("(undefined)"));
  for (const Tensor* t : acc_dtype) all += ", " + (t->defined() ? t->describe() : std::string("(undefined)"));
  throw DeviceError(precis::detail::str_cat(
      op, ": the CUDA kernel needs every operand contiguous (batch_norm: or x, out, grad, dx all channels-last rows) "
          "on x's CUDA device, the data of x's floating dtype and "
          "statistics, parameters and per-row values in ",
      dtype_name(acc), "; got ", all));
}

void* ptr(const Tensor& t) { return t.defined() ? t.data_ptr() : nullptr; }

// Device scratch of n doubles, freed by the caller right after the launches (stream-ordered reuse).
Tensor scratch_doubles(int64_t n, Device device) {
  return empty({n > 0 ? n : 1}, {.dtype = DType::f64, .device = device});
}

void batch_norm_kernel(const Tensor& out, const Tensor& save_mean, const Tensor& save_rstd, const Tensor& x,
                       const Tensor& weight, const Tensor& bias, const Tensor& running_mean,
                       const Tensor& running_var, bool training, double momentum, double eps) {
  const bool cl = channels_last_rows(x);
  check_operands("batch_norm", x, {&out}, {&save_mean, &save_rstd, &weight, &bias, &running_mean, &running_var}, cl);
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
  check_operands("batch_norm_backward", x, {&dx, &grad}, {&dweight, &dbias, &weight, &save_mean, &save_rstd}, cl);
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
  check_operands("nll_loss", x, {}, {&loss_rows, &weight_rows, &weight});
  check_target("nll_loss", x, target);
  DeviceGuard guard(x.device().index);
  launch_nll_loss(x.dtype(), loss_rows.data_ptr(), weight_rows.data_ptr(), x.data_ptr(), x.stride(0), x.stride(1),
                  static_cast<const int64_t*>(target.data_ptr()), ptr(weight), x.size(0), ignore_index,
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
    register_kernel<kernels::SoftmaxKernel>(OpId::softmax, DeviceType::cuda, dt, &softmax_kernel<false>);
    register_kernel<kernels::SoftmaxKernel>(OpId::log_softmax, DeviceType::cuda, dt, &softmax_kernel<true>);
    register_kernel<kernels::SoftmaxBackwardKernel>(OpId::softmax_backward, DeviceType::cuda, dt,
                                                    &softmax_backward_kernel<false>);
    register_kernel<kernels::SoftmaxBackwardKernel>(OpId::log_softmax_backward, DeviceType::cuda, dt,
                                                    &softmax_backward_kernel<true>);
    register_kernel<kernels::CrossEntropyKernel>(OpId::cross_entropy, DeviceType::cuda, dt, &cross_entropy_kernel);
    register_kernel<kernels::CrossEntropyBackwardKernel>(OpId::cross_entropy_backward, DeviceType::cuda, dt,
                                                         &cross_entropy_backward_kernel);
    register_kernel<kernels::NllLossKernel>(OpId::nll_loss, DeviceType::cuda, dt, &nll_loss_kernel);
  }
}

}  // namespace precis::cuda
