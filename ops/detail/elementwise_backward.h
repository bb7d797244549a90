#pragma once
// Backward helpers of the element-wise family: the dedicated kernels relu and gelu use for their
// gradients (op-table rows relu_backward / gelu_backward). Internal to ops/ (not part of the
// public functional API) and not differentiable: they run inside backward closures, with grad
// mode off.
#include <string>

#include "tensor/tensor.h"

namespace precis {

/// grad where x > 0, else 0 (0 at x == 0, as PyTorch). grad and x: same shape and floating dtype,
/// any strides. The result takes their shared layout (empty_elementwise, ops/detail/broadcast.h).
Tensor relu_backward(const Tensor& grad, const Tensor& x);
/// grad · gelu'(x) for approximate = "none" (erf form) or "tanh". grad and x as relu_backward.
Tensor gelu_backward(const Tensor& grad, const Tensor& x, const std::string& approximate = "none");

}  // namespace precis
