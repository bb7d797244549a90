#pragma once
// Checking and unpacking of the optimizer and clipping kernels' Tensor arguments
// (ops/contracts/kernels_optim.h) into the raw structs of ops/math/optim_math.h, shared by the CPU and CUDA
// kernels so that both accept and reject exactly the same calls, with the same messages.
#include <vector>

#include "ops/contracts/kernels_optim.h"

namespace precis::kernels {

/// The SGD buffers of `params`, checked: every tensor on `device`, contiguous, with the
/// parameter's element count and the dtypes SgdParam states; every parameter of dtype
/// `param_dtype`; the optional tensors present exactly when required (momentum buffer and step
/// when hyper.momentum != 0, master for f16/bf16 parameters). Throws ValueError / DTypeError /
/// DeviceError / ShapeError naming the op, the parameter's position and the tensor.
std::vector<SgdTensor> sgd_tensors(const char* op, const std::vector<SgdParam>& params, const SgdHyper& hyper,
                                   Device device, DType param_dtype);
/// The Adam buffers of `params`, checked as sgd_tensors (max_exp_avg_sq present iff amsgrad).
std::vector<AdamTensor> adam_tensors(const char* op, const std::vector<AdamParam>& params, const AdamHyper& hyper,
                                     Device device, DType param_dtype);

/// The device-resident step inputs: grad_scale and found_inf each undefined or one f32 value on
/// `device`; scheduled undefined or a contiguous 1-D f64 tensor of 2 values there.
StepInputs step_inputs(const char* op, const Tensor& grad_scale, const Tensor& found_inf, const Tensor& scheduled,
                       Device device);

/// Checks a gradient list: defined, floating, contiguous, all on `device`.
void check_grad_list(const char* op, const std::vector<Tensor>& grads, Device device);
/// Checks a 1-D f32/f64 (f64 only when `f64_only`) contiguous tensor of n entries on `device`,
/// or with n < 0 a single value.
void check_vector_arg(const char* op, const char* what, const Tensor& t, int64_t n, bool f64_only, Device device);

/// Checks the total-norm output of clip_grad_norm: one f32 value on `device` (or f64 where
/// allow_f64: clip_grad_norm's total of f64 gradients).
void check_total_out(const char* op, const Tensor& t, Device device, bool allow_f64 = false);

}  // namespace precis::kernels
