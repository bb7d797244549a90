#pragma once
// Kernel signatures of the loss, dropout and erf ops, shared by every backend (the rest are in
// ops/contracts/kernels.h). The functional API (ops/loss.cpp, ops/dropout.cpp) checks operands, brings them
// to the layout the kernel expects and turns the per-row results into the reduction.
#include <cstdint>

#include "core/rng.h"
#include "tensor/tensor.h"

namespace precis::kernels {

// ---- class-index losses ------------------------------------------------------------------------
// Rows: x is (M, C) contiguous (the class dim last; K-dim inputs are permuted to this layout by
// the caller); target is (M) i64 contiguous holding classes in [0, C) or ignore_index (checked by
// the caller on the CPU; cross_entropy's device kernels get unchecked targets, since checking
// them would read them back and wait for the device, and give a row whose target is outside
// [0, C) a NaN loss, weight and gradient); weight is (C) contiguous in the accumulation type, or
// undefined for all ones.
// Per-row outputs are (M) contiguous in the accumulation type: f32 for f32/f16/bf16, f64 for f64.
// Keyed by x's dtype.

/// Fused log-softmax + NLL with label smoothing ε, one pass over each row of logits. With
/// m_i = max_c x_ic and s_i = log Σ_c exp(x_ic − m_i) (so log p_ic = x_ic − m_i − s_i):
///   row_stats_i   = (m_i, s_i)               (M, 2): what backward needs to rebuild p
///   loss_rows_i   = (1 − ε)·w[t_i]·(−log p_{i,t_i}) + (ε / C)·Σ_c w_c·(−log p_ic)
///   weight_rows_i = w[t_i]
/// and 0 for both at rows whose target is ignore_index (row_stats is still written). m and s
/// are kept apart because m + s would round at m's magnitude.
using CrossEntropyKernel = void(const Tensor& loss_rows, const Tensor& weight_rows, const Tensor& row_stats,
                                const Tensor& x, const Tensor& target, const Tensor& weight, int64_t ignore_index,
                                double label_smoothing);

/// Gradient of Σ_i grad_rows_i·loss_rows_i with respect to x, p = exp(x − m)·exp(−s):
///   grad_x_ij = g_i·(((1 − ε)·w[t_i] + (ε / C)·Σ_c w_c)·p_ij − (1 − ε)·w[t_i]·[j = t_i] − (ε / C)·w_j)
/// and 0 on ignored rows. grad_x: (M, C) contiguous, x's dtype. grad_rows: (M) in the accumulation
/// type, any stride (stride 0 for a reduced loss's single gradient).
using CrossEntropyBackwardKernel = void(const Tensor& grad_x, const Tensor& x, const Tensor& row_stats,
                                        const Tensor& target, const Tensor& weight, const Tensor& grad_rows,
                                        int64_t ignore_index, double label_smoothing);

/// CrossEntropyKernel and CrossEntropyBackwardKernel in one call, for when the loss gradient
/// grad_rows is known before the loss (linear_cross_entropy, whose backward only rescales):
/// loss_rows, weight_rows and row_stats as CrossEntropyKernel defines them, grad_x as
/// CrossEntropyBackwardKernel does (same operands and layouts), with one exp per logit instead of
/// two. grad_x must not alias x. Backends may differ from the two-kernel pair only in grad_x's
/// last bits (the CPU kernel: ops/cpu/loss.cpp says where); the per-row outputs are identical.
using CrossEntropyWithGradKernel = void(const Tensor& loss_rows, const Tensor& weight_rows, const Tensor& row_stats,
                                        const Tensor& grad_x, const Tensor& x, const Tensor& target,
                                        const Tensor& weight, const Tensor& grad_rows, int64_t ignore_index,
                                        double label_smoothing);

/// linear_cross_entropy's fast path, where a backend has one (CPU with oneDNN: f32 and bf16;
/// ops/cpu/linear_cross_entropy.cpp): the loss of the logits x·wᵀ + b without forming them whole.
/// x: (M, K) contiguous, M, K >= 1; w: (V, K) contiguous, V >= 1; b: (V) contiguous or undefined; all of
/// x's dtype. target, loss_rows and weight_rows as CrossEntropyKernel, with no class weights
/// (weight_rows is 1 or 0). grad_x (M, K), grad_w (V, K), grad_b (V): fp32, contiguous, or
/// undefined when not wanted; they receive the gradients of Σ_i g·loss_rows_i, g = row_grad's one
/// fp32 element (on x's device, read where the kernel runs: no host read), summed in fp32 from the
/// logit gradient rounded to x's dtype (as cross_entropy's backward rounds it). chunk_rows: rows
/// of logits made at a time (LinearCrossEntropyOptions::chunk_rows; 0: the backend's choice).
/// Returns false, writing nothing, when the backend cannot run it here (the caller then takes the
/// generic path).
using LinearCrossEntropyKernel = bool(const Tensor& loss_rows, const Tensor& weight_rows, const Tensor& grad_x,
                                      const Tensor& grad_w, const Tensor& grad_b, const Tensor& x, const Tensor& w,
                                      const Tensor& b, const Tensor& target, const Tensor& row_grad,
                                      int64_t ignore_index, double label_smoothing, int64_t chunk_rows);

/// NLL on log-probabilities: loss_rows_i = −w[t_i]·x_{i,t_i}, weight_rows_i = w[t_i]; 0 for both
/// at ignored rows. x: (M, C) any strides (only M elements are read).
using NllLossKernel = void(const Tensor& loss_rows, const Tensor& weight_rows, const Tensor& x,
                           const Tensor& target, const Tensor& weight, int64_t ignore_index);

// ---- dropout ------------------------------------------------------------------------------------

/// out = keep ? x·scale : 0, scale = 1 / (1 − p), where element i (row-major over x's shape) is kept
/// when the 24 high bits of lane i % 4 of Philox block (offset + i / 4) of `seed`, read as a
/// fraction of 2^24, are below 1 − p, with rng's seed and its offset plus the value at
/// rng.offset_base when that is set (a kernel captured in a CUDA graph: kernels::philox_offset,
/// read where the kernel runs). The mask is a pure function of (seed, offset, i), so backward
/// regenerates it by running this kernel on the gradient, and the result does not depend on the
/// thread count. out: contiguous; x: out's shape, any strides. 0 <= p < 1. Computes in fp32 for
/// f16/bf16 (f64 for f64).
using DropoutKernel = void(const Tensor& out, const Tensor& x, double p, const PhiloxDraw& rng);

/// dropout_add's pass (ops/dropout_add.cpp): out = residual + (keep ? x·scale : 0) with
/// DropoutKernel's mask and scale, computed in fp32 (f64 when out is f64) and rounded once to
/// out's dtype; with residual undefined, out = keep ? x·scale : 0 (its backward: the gradient of
/// x, from the output gradient, in x's dtype). out: contiguous; x and residual: out's shape, any
/// strides, any dtypes whose compute type is out's (f32, f16, bf16 around an f32/f16/bf16 out;
/// f64 with f64). Keyed by out's dtype. 0 < p < 1.
using DropoutAddKernel = void(const Tensor& out, const Tensor& x, const Tensor& residual, double p,
                              const PhiloxDraw& rng);

}  // namespace precis::kernels
