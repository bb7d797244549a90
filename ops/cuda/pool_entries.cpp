// Tensor unpacking and registration of the CUDA pooling kernels (max, average, adaptive average
// and their backward passes; device code in pool.cu). ops/pool.cpp hands over contiguous
// (N, C, H, W) tensors of one floating dtype.
#include "core/cuda/cuda_context.h"
#include "ops/cuda/cuda_backend.h"
#include "ops/cuda/index_pool_kernels.h"
#include "ops/contracts/kernels_conv.h"
#include "ops/op_table.h"

namespace precis::cuda {

namespace {

using kernels::Pool2dParams;
using kernels::PoolGeometry;

// x: the (N, C, H, W) input side, y: the (N, C, Ho, Wo) output side; both contiguous, x's dtype,
// on one CUDA device (indices: i64 of y's shape, when defined). p: the window (the adaptive pools,
// whose windows follow from the sizes, pass none).
PoolGeometry geometry(const char* op, const Tensor& x, const Tensor& y, const Tensor* indices,
                      const Pool2dParams& p = {}) {
  const bool same_device = x.device() == y.device() && x.device().is_cuda() &&
                           (indices == nullptr || !indices->defined() || indices->device() == x.device());
  PRECIS_CHECK_DEVICE(same_device, op, ": every operand must be on one CUDA device; got ", x.describe(), ", ",
                      y.describe(), indices != nullptr && indices->defined() ? ", indices " + indices->describe() : "");
  PRECIS_CHECK_DTYPE(x.dtype() == y.dtype() && is_floating(x.dtype()), op,
                     ": the CUDA kernel expects one floating dtype; got ", x.describe(), ", ", y.describe());
  PRECIS_INTERNAL_ASSERT(x.dim() == 4 && y.dim() == 4 && x.is_contiguous() && y.is_contiguous() &&
                             x.size(0) == y.size(0) && x.size(1) == y.size(1),
                         op, ": expects contiguous (N, C, H, W) tensors; got ", x.describe(), ", ", y.describe());
  if (indices != nullptr && indices->defined())
    PRECIS_INTERNAL_ASSERT(indices->dtype() == DType::i64 && indices->is_contiguous() && indices->sizes() == y.sizes(),
                           op, ": indices ", indices->describe(), " do not match ", y.describe());
  return kernels::pool_geometry(x.size(2), x.size(3), y.size(2), y.size(3), p);
}

void launch(PoolOp op, const Tensor& out, int64_t* out_indices, const Tensor& in, const int64_t* in_indices,
            const PoolGeometry& g) {
  const int index = out.device().index;
  DeviceGuard guard(index);
  launch_pool2d(op, out.dtype(), out.data_ptr(), out_indices, in.data_ptr(), in_indices, out.size(0) * out.size(1), g,
                device_stream(index));
}

void max_pool2d_kernel(const Tensor& out, const Tensor& indices, const Tensor& x, const Pool2dParams& p) {
  const PoolGeometry g = geometry("max_pool2d", x, out, &indices, p);
  launch(PoolOp::max, out, indices.defined() ? static_cast<int64_t*>(indices.data_ptr()) : nullptr, x, nullptr, g);
}

void max_pool2d_backward_kernel(const Tensor& grad_x, const Tensor& grad_out, const Tensor& indices,
                                const Pool2dParams& p) {
  PRECIS_INTERNAL_ASSERT(indices.defined(), "max_pool2d_backward: needs the forward's indices");
  // Each input element gathers from the outputs whose windows cover it: that needs the window.
  const PoolGeometry g = geometry("max_pool2d_backward", grad_x, grad_out, &indices, p);
  launch(PoolOp::max_backward, grad_x, nullptr, grad_out, static_cast<const int64_t*>(indices.data_ptr()), g);
}

void avg_pool2d_kernel(const Tensor& out, const Tensor& x, const Pool2dParams& p) {
  launch(PoolOp::avg, out, nullptr, x, nullptr, geometry("avg_pool2d", x, out, nullptr, p));
}

void avg_pool2d_backward_kernel(const Tensor& grad_x, const Tensor& grad_out, const Pool2dParams& p) {
  launch(PoolOp::avg_backward, grad_x, nullptr, grad_out, nullptr,
         geometry("avg_pool2d_backward", grad_x, grad_out, nullptr, p));
}

void adaptive_avg_pool2d_kernel(const Tensor& out, const Tensor& x) {
  launch(PoolOp::adaptive_avg, out, nullptr, x, nullptr, geometry("adaptive_avg_pool2d", x, out, nullptr));
}

void adaptive_avg_pool2d_backward_kernel(const Tensor& grad_x, const Tensor& grad_out) {
  launch(PoolOp::adaptive_avg_backward, grad_x, nullptr, grad_out, nullptr,
         geometry("adaptive_avg_pool2d_backward", grad_x, grad_out, nullptr));
}

}  // namespace

void register_pool_kernels() {
  for (DType dt : {DType::f32, DType::f64, DType::f16, DType::bf16}) {
    register_kernel<kernels::MaxPool2dKernel>(OpId::max_pool2d, DeviceType::cuda, dt, &max_pool2d_kernel);
    register_kernel<kernels::MaxPool2dBackwardKernel>(OpId::max_pool2d_backward, DeviceType::cuda, dt,
                                                      &max_pool2d_backward_kernel);
    register_kernel<kernels::AvgPool2dKernel>(OpId::avg_pool2d, DeviceType::cuda, dt, &avg_pool2d_kernel);
    register_kernel<kernels::AvgPool2dBackwardKernel>(OpId::avg_pool2d_backward, DeviceType::cuda, dt,
                                                      &avg_pool2d_backward_kernel);
    register_kernel<kernels::AdaptiveAvgPool2dKernel>(OpId::adaptive_avg_pool2d, DeviceType::cuda, dt,
                                                      &adaptive_avg_pool2d_kernel);
    register_kernel<kernels::AdaptiveAvgPool2dBackwardKernel>(OpId::adaptive_avg_pool2d_backward, DeviceType::cuda,
                                                              dt, &adaptive_avg_pool2d_backward_kernel);
  }
}

}  // namespace precis::cuda
