#pragma once
// Kernels of the optimizers and of gradient clipping (optim/), shared by every backend. Each
// works on a list of tensors on one device in one call, so a backend can cover many parameters
// with one launch (CUDA: multi-tensor apply) and the host never waits for the device: step
// counters, found_inf, the grad scale and the total norm are read where they live.
//
// The element math is ops/math/optim_math.h, the same functions on every backend.
#include <vector>

#include "ops/math/optim_math.h"
#include "tensor/tensor.h"

namespace precis::kernels {

/// One parameter of an SGD step: contiguous tensors of param's shape on param's device.
/// grad: param's dtype, or f32 for an f16/bf16 param; master: the f32 master of an f16/bf16
/// param (undefined otherwise); momentum_buffer: f32 (f64 for an f64 param), defined exactly
/// when momentum != 0, as is step (0-d f32: the number of steps applied, 0 means the buffer is
/// filled from the gradient as it is).
struct SgdParam {
  Tensor param, grad, master, momentum_buffer, step;
};

/// One parameter of an Adam(W) step, as SgdParam; exp_avg, exp_avg_sq (and max_exp_avg_sq when
/// amsgrad) f32 (f64 for an f64 param); step: 0-d f32, the steps applied so far.
struct AdamParam {
  Tensor param, grad, master, exp_avg, exp_avg_sq, max_exp_avg_sq, step;
};

/// Updates every parameter of `params` (all of the dtype the kernel is registered for, on one
/// device) in one pass over its buffers, and adds 1 to each defined step counter. grad_scale and
/// found_inf: undefined, or 0-d f32 on the parameters' device; the gradient used is
/// grad · float(1 / grad_scale), and a nonzero found_inf makes the call a no-op. scheduled:
/// undefined, or a contiguous 1-D f64 tensor {lr, momentum} on that device (momentum: SGD's
/// momentum, Adam's beta1) whose values replace hyper's when the kernel runs — a capturable
/// optimizer's (optim/optimizer.h); the host values of hyper still decide which buffers must be
/// present. All three are read by the kernel, never by the host. Looked up by the
/// parameters' dtype. Each element's result is exactly sgd_element / adam_element
/// (ops/math/optim_math.h) applied to it alone, however a backend splits, vectorises or specialises
/// the loop (CPU: bit for bit; CUDA: nvcc may contract, see optim_math.h).
using SgdStepKernel = void(const std::vector<SgdParam>& params, const SgdHyper& hyper, const Tensor& grad_scale,
                           const Tensor& found_inf, const Tensor& scheduled);
using AdamStepKernel = void(const std::vector<AdamParam>& params, const AdamHyper& hyper, const Tensor& grad_scale,
                            const Tensor& found_inf, const Tensor& scheduled);

/// out[i] = the power sum of grads[i] for the norm_type-norm (ops/math/optim_math.h: Σ|x|^p, max|x|
/// for p = inf, NaN if any element is NaN), accumulated in f64 in blocks of a size fixed per
/// backend, blocks combined in order: the result does not depend on the thread count.
/// grads: contiguous floating tensors (any mix of f32, f64, f16, bf16) on one device; out: 1-D f64
/// of grads.size() entries on that device. Looked up by f32; registered under every floating
/// dtype (the gradients' dtypes are dispatched inside, as unscale_grads does).
using GradNormKernel = void(const std::vector<Tensor>& grads, double norm_type, const Tensor& out);

/// The clip of clip_grad_norm_, decided on the device:
///   total = norm_root(combine of power_sums[0 .. n), in order)      written to total_out (0-d f32,
///           or f64 when every gradient is f64)
///   coef  = clip_coefficient<A>(total, max_norm): A = double for f64 gradients, float otherwise
///   if clip_scales(total, coef): grads[i] *= coef (its A), in its compute type, in place.
/// power_sums: 1-D f32/f64 of grads.size() entries on the gradients' device (from GradNormKernel,
/// or the loss scaler's squared norms with norm_type 2). grads as GradNormKernel. Looked up by
/// f32; registered under every floating dtype.
using ClipGradNormKernel = void(const std::vector<Tensor>& grads, const Tensor& power_sums, double norm_type,
                                double max_norm, const Tensor& total_out);

/// Clamps every element of every gradient to [-clip_value, clip_value] in place (in its compute
/// type; NaN stays NaN). grads as GradNormKernel; clip_value >= 0. Looked up by f32.
using ClipGradValueKernel = void(const std::vector<Tensor>& grads, double clip_value);

}  // namespace precis::kernels
