#pragma once
// Gradient clipping, as torch.nn.utils.clip_grad_norm_ / clip_grad_value_, on the CPU or a CUDA
// device (the op table's grad_norms, clip_grad_norm and clip_grad_value kernels). The gradients of
// one call must be on one device. Like PyTorch's, clipping does not wait for the device: the total
// norm, the decision to clip and the scaling all happen there, and the returned norm is a device
// tensor; only error_if_nonfinite reads it on the host (PyTorch synchronises there too).
//
// Non-finite gradients: when the total norm is NaN or ±inf, clip_grad_norm_ leaves every gradient
// untouched (PyTorch would multiply them all by a NaN coefficient, turning finite gradients into
// NaN) and returns the non-finite norm, so the caller (or amp::GradScaler, which skips such steps)
// can act on it. With error_if_nonfinite it throws a ValueError naming the parameters whose
// gradients are not finite instead.
#include <vector>

#include "tensor/tensor.h"

namespace precis::optim {

/// Scales the gradients of `params` in place so that their total `norm_type`-norm (over all
/// gradients together, as if concatenated) is at most max_norm: when total > max_norm each
/// gradient is multiplied by max_norm / (total + 1e-6), formed as PyTorch forms it: in f64 for f64
/// gradients, in f32 for the others. norm_type > 0, or INFINITY for the max norm. Parameters
/// without a gradient are ignored. Returns the total norm before clipping as a 0-d tensor on the
/// gradients' device: f64 when every gradient is f64 (as PyTorch's), else f32 (0 when no
/// parameter has a gradient).
/// Per-tensor norms accumulate in f64 in one pass over each gradient, in a fixed order (the result
/// does not depend on the thread count). Gradients may be f32, f64, f16 or bf16.
Tensor clip_grad_norm_(const std::vector<Tensor>& params, double max_norm, double norm_type = 2.0,
                       bool error_if_nonfinite = false);

/// The 2-norm clip with the squared 2-norm of each parameter's gradient already known (the loss
/// scaler's unscale_ pass computes them): no pass over the gradients except the scaling.
/// per_param_sq_norms[i] belongs to params[i] (entries of parameters without a gradient are
/// ignored); a negative entry is a ValueError. The Tensor form takes a 1-D f32/f64 tensor of the
/// same length, on any device (moved to the gradients'), and is never read on the host: a
/// negative entry there makes the total NaN, so that nothing is clipped.
Tensor clip_grad_norm_(const std::vector<Tensor>& params, double max_norm,
                       const std::vector<double>& per_param_sq_norms, bool error_if_nonfinite = false);
Tensor clip_grad_norm_(const std::vector<Tensor>& params, double max_norm, const Tensor& per_param_sq_norms,
                       bool error_if_nonfinite = false);

/// The norm of each parameter's gradient (0 for parameters without one), in f64: the pieces
/// clip_grad_norm_ combines. norm_type as above. A host vector, so this waits for the device.
std::vector<double> grad_norms(const std::vector<Tensor>& params, double norm_type = 2.0);

/// Clamps every gradient element to [-clip_value, clip_value] in place (NaN stays NaN).
/// clip_value >= 0.
void clip_grad_value_(const std::vector<Tensor>& params, double clip_value);

/// Marks `param`'s .grad as not the gradient its optimizer steps: a sharded optimizer
/// (dist::ZeroOptimizer) steps the reduced gradient in pieces of its own, and `param.grad()` is the
/// rank's local, unreduced one, so clipping or measuring it would silently do nothing useful. The
/// functions above then refuse `param` with a StateError ending in `instead` (what to call).
void mark_sharded_gradient(const Tensor& param, std::string instead);
/// Undoes mark_sharded_gradient (the sharded optimizer's destructor calls it).
void unmark_sharded_gradient(const Tensor& param);

}  // namespace precis::optim
