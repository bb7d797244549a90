#pragma once
// Kernel signatures of GEMM epilogues: the element-wise passes that fused ops run over a GEMM's
// output (forward) and over the gradient arriving at it (backward). Used by linear_gelu
// (ops/linear_gelu.cpp); looked up with kernel<Fn>() like those of ops/contracts/kernels.h.
#include "tensor/tensor.h"

namespace precis::kernels {

/// linear_gelu's forward pass over the GEMM's output: out = gelu(pre) and, when deriv is defined,
/// deriv = gelu'(pre) in the compute type (f32 for f16/bf16/f32, f64 for f64), the values the
/// gelu and gelu_backward kernels compute. pre, out: (M, N) contiguous, one floating dtype; out
/// may be pre itself. deriv: (M, N) contiguous. param: 0 = erf form, 1 = tanh form.
using GeluEpilogueKernel = void(const Tensor& out, const Tensor& deriv, const Tensor& pre, double param);

/// linear_gelu's backward pass: grad_pre = grad · gelu'(pre), rounded to grad's dtype as the
/// gelu_backward kernel rounds it, with gelu' computed from pre (saved_is_derivative = false:
/// saved is pre, grad's dtype) or read from the forward's deriv (true: saved in the compute
/// type); and, when grad_bias ((N), grad's dtype) is defined, grad_bias = the column sums of
/// grad_pre over its M rows, summed from the rounded values in the same pass, in the order (and
/// with the fp32 partials and f64 total) of the sum kernel's column reduction, so it equals
/// sum(grad_pre, {0}). grad, grad_pre: (M, N) contiguous; N > 1 when grad_bias is defined.
using GeluEpilogueBackwardKernel = void(const Tensor& grad_pre, const Tensor& grad_bias, const Tensor& grad,
                                        const Tensor& saved, bool saved_is_derivative, double param);

}  // namespace precis::kernels

namespace precis::detail {
/// Whether linear_gelu's CPU path computes gelu' in its forward pass and keeps it (fp32 for
/// f16/bf16: backward is then a multiply) rather than keeping the GEMM's output and computing
/// gelu' in backward. True (measured faster: benchmarks/results/linear-gelu-2026-12-02c.md);
/// switchable so the probe and the tests can run both.
bool& linear_gelu_saves_derivative();
}  // namespace precis::detail
