// Tensor unpacking and registration of the optimizer kernels on CUDA devices (sgd_step,
// adam_step; ops/kernels_optim.h). The arguments are checked by the same code as on the CPU
// (ops/optim_args.h); the device code is in optim.cu.
#include <vector>

#include "core/cuda/cuda_context.h"
#include "ops/cuda/cuda_backend.h"
#include "ops/kernels_optim.h"
#include "ops/op_table.h"
#include "ops/optim_args.h"
#include "tensor/factory.h"

namespace precis::cuda {

namespace {

/// The CUDA device of a call: that of `first` (the first parameter or gradient).
Device device_of(const char* op, const Tensor& first) {
  PRECIS_CHECK(first.defined(), op, ": the first tensor is undefined");
  PRECIS_CHECK_DEVICE(first.device().is_cuda(), op, ": ", first.describe(), " is not a CUDA tensor");
  return first.device();
}

/// Launches `launch(grad_dtype, tensors, count)` once per gradient dtype present among `params`
/// (the parameters' own dtype, and f32 for f16/bf16 parameters with f32 gradients).
template <typename Param, typename Raw, typename Launch>
void per_grad_dtype(const std::vector<Param>& params, const std::vector<Raw>& raw, Launch&& launch) {
  std::vector<Raw> same, f32;
  for (size_t i = 0; i < params.size(); ++i)
    (params[i].grad.dtype() == params[i].param.dtype() ? same : f32).push_back(raw[i]);
  if (!same.empty()) launch(params.front().param.dtype(), same);
  if (!f32.empty()) launch(DType::f32, f32);
}

void sgd_kernel(const std::vector<kernels::SgdParam>& params, const kernels::SgdHyper& h, const Tensor& grad_scale,
                const Tensor& found_inf) {
  if (params.empty()) return;
  const Device dev = device_of("sgd_step", params.front().param);
  const DType dtype = params.front().param.dtype();
  const kernels::ScalerArgs sc = kernels::scaler_args("sgd_step", grad_scale, found_inf, dev);
  const std::vector<kernels::SgdTensor> raw = kernels::sgd_tensors("sgd_step", params, h, dev, dtype);
  DeviceGuard guard(dev.index);
  per_grad_dtype(params, raw, [&](DType grad_dtype, const std::vector<kernels::SgdTensor>& ts) {
    launch_sgd_step(dtype, grad_dtype, ts.data(), static_cast<int>(ts.size()), h, sc, device_stream(dev.index));
  });
}

void adam_kernel(const std::vector<kernels::AdamParam>& params, const kernels::AdamHyper& h, const Tensor& grad_scale,
                 const Tensor& found_inf) {
  if (params.empty()) return;
  const Device dev = device_of("adam_step", params.front().param);
  const DType dtype = params.front().param.dtype();
  const kernels::ScalerArgs sc = kernels::scaler_args("adam_step", grad_scale, found_inf, dev);
  const std::vector<kernels::AdamTensor> raw = kernels::adam_tensors("adam_step", params, h, dev, dtype);
  DeviceGuard guard(dev.index);
  per_grad_dtype(params, raw, [&](DType grad_dtype, const std::vector<kernels::AdamTensor>& ts) {
    launch_adam_step(dtype, grad_dtype, ts.data(), static_cast<int>(ts.size()), h, sc, device_stream(dev.index));
  });
}

}  // namespace

void register_optim_kernels() {
  // The step kernels are looked up by the parameters' dtype: one host function serves all four
  // (the dtype is dispatched inside, per launch).
  for (DType dt : {DType::f32, DType::f64, DType::f16, DType::bf16}) {
    register_kernel<kernels::SgdStepKernel>(OpId::sgd_step, DeviceType::cuda, dt, &sgd_kernel);
    register_kernel<kernels::AdamStepKernel>(OpId::adam_step, DeviceType::cuda, dt, &adam_kernel);
  }
}

}  // namespace precis::cuda
