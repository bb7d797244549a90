#pragma once
// Kernels of the loss scaler (amp::GradScaler), shared by every backend.
#include <vector>

#include "tensor/tensor.h"

namespace precis::kernels {

/// One fused pass over a list of gradients (contiguous, any floating dtype, one device):
///   u = g · inv_scale                (inv_scale: 0-d f32)
///   if write: g = u                  (in place, rounded to g's dtype)
///   counts[i]   = number of non-finite elements of u_i        (1-D f32, one per gradient)
///   sq_norms[i] = Σ u_i²  accumulated in f64 (every backend)   (1-D f32/f64, one per gradient)
///   found_inf   = max(found_inf, any counts[i] > 0)            (0-d f32, updated in place)
/// Looked up by the dtype of found_inf (f32); the gradients' own dtypes are dispatched inside, so
/// backends register the one kernel under every floating dtype.
using UnscaleKernel = void(const std::vector<Tensor>& grads, const Tensor& inv_scale, bool write,
                           const Tensor& found_inf, const Tensor& counts, const Tensor& sq_norms);

}  // namespace precis::kernels
