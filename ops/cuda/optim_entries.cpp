// Tensor unpacking and registration of the optimizer and gradient-clipping kernels on CUDA
// devices (sgd_step, adam_step, grad_norms, clip_grad_norm, clip_grad_value;
// ops/contracts/kernels_optim.h). The arguments are checked by the same code as on the CPU
// (ops/math/optim_args.h); the device code is in optim.cu and clip.cu.
#include <vector>

#include "core/cuda/cuda_context.h"
#include "ops/cuda/cuda_backend.h"
#include "ops/contracts/kernels_optim.h"
#include "ops/op_table.h"
#include "ops/math/optim_args.h"
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
                const Tensor& found_inf, const Tensor& scheduled) {
  if (params.empty()) return;
  const Device dev = device_of("sgd_step", params.front().param);
  const DType dtype = params.front().param.dtype();
  const kernels::StepInputs sc = kernels::step_inputs("sgd_step", grad_scale, found_inf, scheduled, dev);
  const std::vector<kernels::SgdTensor> raw = kernels::sgd_tensors("sgd_step", params, h, dev, dtype);
  DeviceGuard guard(dev.index);
  per_grad_dtype(params, raw, [&](DType grad_dtype, const std::vector<kernels::SgdTensor>& ts) {
    launch_sgd_step(dtype, grad_dtype, ts.data(), static_cast<int>(ts.size()), h, sc, device_stream(dev.index));
  });
}

void adam_kernel(const std::vector<kernels::AdamParam>& params, const kernels::AdamHyper& h, const Tensor& grad_scale,
                 const Tensor& found_inf, const Tensor& scheduled) {
  if (params.empty()) return;
  const Device dev = device_of("adam_step", params.front().param);
  const DType dtype = params.front().param.dtype();
  const kernels::StepInputs sc = kernels::step_inputs("adam_step", grad_scale, found_inf, scheduled, dev);
  const std::vector<kernels::AdamTensor> raw = kernels::adam_tensors("adam_step", params, h, dev, dtype);
  DeviceGuard guard(dev.index);
  per_grad_dtype(params, raw, [&](DType grad_dtype, const std::vector<kernels::AdamTensor>& ts) {
    launch_adam_step(dtype, grad_dtype, ts.data(), static_cast<int>(ts.size()), h, sc, device_stream(dev.index));
  });
}

std::vector<GradBuffer> grad_buffers(const std::vector<Tensor>& grads) {
  std::vector<GradBuffer> out;
  out.reserve(grads.size());
  for (const Tensor& g : grads) out.push_back({g.data_ptr(), g.numel(), g.dtype()});
  return out;
}

// grads: contiguous floating tensors on one CUDA device; out: (n,) f64 there.
void grad_norms_kernel(const std::vector<Tensor>& grads, double norm_type, const Tensor& out) {
  const Device dev = device_of("grad_norms", out);
  kernels::check_grad_list("grad_norms", grads, dev);
  kernels::check_vector_arg("grad_norms", "out", out, static_cast<int64_t>(grads.size()), true, dev);
  if (grads.empty()) return;
  const std::vector<GradBuffer> args = grad_buffers(grads);
  DeviceGuard guard(dev.index);
  const size_t bytes = grad_norms_scratch_bytes(args.data(), static_cast<int>(args.size()));
  // Freed on return: the stream-ordered allocator reuses it only for work queued after the pass.
  Tensor scratch = empty({static_cast<int64_t>((bytes + 7) / 8)}, {.dtype = DType::i64, .device = dev});
  launch_grad_norms(args.data(), static_cast<int>(args.size()), kernels::norm_kind(norm_type), norm_type,
                    out.data_ptr<double>(), scratch.data_ptr(), device_stream(dev.index));
}

// grads as grad_norms_kernel; power_sums: (n,) f32/f64; total_out: 0-d f32 or f64; all on one device.
void clip_grad_norm_kernel(const std::vector<Tensor>& grads, const Tensor& power_sums, double norm_type,
                           double max_norm, const Tensor& total_out) {
  const Device dev = device_of("clip_grad_norm", total_out);
  kernels::check_grad_list("clip_grad_norm", grads, dev);
  kernels::check_vector_arg("clip_grad_norm", "power_sums", power_sums, static_cast<int64_t>(grads.size()), false,
                            dev);
  kernels::check_total_out("clip_grad_norm", total_out, dev, /*allow_f64=*/true);
  const std::vector<GradBuffer> args = grad_buffers(grads);
  DeviceGuard guard(dev.index);
  Tensor coef = empty({4}, {.dtype = DType::f64, .device = dev});
  launch_clip_grad_norm(args.data(), static_cast<int>(args.size()), power_sums.data_ptr(),
                        power_sums.dtype() == DType::f64, kernels::norm_kind(norm_type), norm_type, max_norm,
                        total_out.data_ptr(), total_out.dtype() == DType::f64, coef.data_ptr<double>(),
                        device_stream(dev.index));
}

void clip_grad_value_kernel(const std::vector<Tensor>& grads, double clip_value) {
  if (grads.empty()) return;
  const Device dev = device_of("clip_grad_value", grads.front());
  kernels::check_grad_list("clip_grad_value", grads, dev);
  const std::vector<GradBuffer> args = grad_buffers(grads);
  DeviceGuard guard(dev.index);
  launch_clip_grad_value(args.data(), static_cast<int>(args.size()), clip_value, device_stream(dev.index));
}

}  // namespace

void register_optim_kernels() {
  // The step kernels are looked up by the parameters' dtype: one host function serves all four
  // (the dtype is dispatched inside, per launch). The gradient-list kernels dispatch each
  // gradient's dtype inside and are registered under every floating dtype, as on the CPU.
  for (DType dt : {DType::f32, DType::f64, DType::f16, DType::bf16}) {
    register_kernel<kernels::SgdStepKernel>(OpId::sgd_step, DeviceType::cuda, dt, &sgd_kernel);
    register_kernel<kernels::AdamStepKernel>(OpId::adam_step, DeviceType::cuda, dt, &adam_kernel);
    register_kernel<kernels::GradNormKernel>(OpId::grad_norms, DeviceType::cuda, dt, &grad_norms_kernel);
    register_kernel<kernels::ClipGradNormKernel>(OpId::clip_grad_norm, DeviceType::cuda, dt, &clip_grad_norm_kernel);
    register_kernel<kernels::ClipGradValueKernel>(OpId::clip_grad_value, DeviceType::cuda, dt, &clip_grad_value_kernel);
  }
}

}  // namespace precis::cuda
