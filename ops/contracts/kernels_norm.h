#pragma once
// Kernel signatures of the normalisation and softmax family (batch_norm, layer_norm, group_norm,
// softmax, log_softmax and their fused backward kernels), shared by every backend. Keyed by the
// input x's dtype. The functional code (ops/norm.cpp, ops/softmax.cpp) checks operands and makes
// every tensor passed here contiguous.
//
// "acc dtype" below is the statistics dtype: f64 for f64 inputs, f32 for f32/f16/bf16 inputs.
// Statistics and parameter gradients are always computed and stored in it.
#include <cstdint>

#include "tensor/tensor.h"

namespace precis::kernels {

/// Batch norm forward. x, out: (N, C, S) (S = product of the spatial dims, 1 if none), both
/// contiguous or both channels-last rows (strides (S·C, 1, C); a channels-last 4-D input;
/// backward's grad and dx then too).
/// weight, bias: (C) in the acc dtype, or undefined (no scale / no shift).
/// running_mean, running_var: (C) in the acc dtype, or undefined.
/// training: normalises with the batch statistics (biased variance); writes save_mean = batch
/// mean and save_rstd = 1/sqrt(var + eps); when the running statistics are defined, updates them
/// in place: r = (1 - momentum)·r + momentum·batch, using the unbiased batch variance.
/// eval: normalises with the running statistics (both defined) and writes them as save_mean /
/// save_rstd. save_mean, save_rstd: (C) in the acc dtype.
using BatchNormKernel = void(const Tensor& out, const Tensor& save_mean, const Tensor& save_rstd, const Tensor& x,
                             const Tensor& weight, const Tensor& bias, const Tensor& running_mean,
                             const Tensor& running_var, bool training, double momentum, double eps);
/// Batch norm backward. grad, x: (N, C, S); weight: (C) acc dtype or undefined; save_mean,
/// save_rstd: the forward's. training: the batch statistics depend on x (full formula); eval:
/// dx = grad·weight·rstd. Outputs left undefined are not computed: dx (N, C, S) in x's dtype,
/// dweight = Σ grad·x̂ and dbias = Σ grad, (C) in the acc dtype.
using BatchNormBackwardKernel = void(const Tensor& dx, const Tensor& dweight, const Tensor& dbias, const Tensor& grad,
                                     const Tensor& x, const Tensor& weight, const Tensor& save_mean,
                                     const Tensor& save_rstd, bool training);

/// Layer norm forward over rows. x, out: (M, D); weight, bias: (D) acc dtype or undefined;
/// mean, rstd: (M) acc dtype (biased variance; rstd = 1/sqrt(var + eps)).
using LayerNormKernel = void(const Tensor& out, const Tensor& mean, const Tensor& rstd, const Tensor& x,
                             const Tensor& weight, const Tensor& bias, double eps);
/// Layer norm backward, one fused pass per row. grad, x: (M, D); weight: (D) acc or undefined;
/// mean, rstd: (M) the forward's. Outputs left undefined are not computed: dx (M, D) x's dtype;
/// dweight, dbias (D) acc dtype.
using LayerNormBackwardKernel = void(const Tensor& dx, const Tensor& dweight, const Tensor& dbias, const Tensor& grad,
                                     const Tensor& x, const Tensor& weight, const Tensor& mean, const Tensor& rstd);

/// Group norm forward. x, out: (N, C, S); groups of C / num_groups consecutive channels;
/// weight, bias: (C) acc dtype or undefined; mean, rstd: (N, num_groups) acc dtype.
using GroupNormKernel = void(const Tensor& out, const Tensor& mean, const Tensor& rstd, const Tensor& x,
                             const Tensor& weight, const Tensor& bias, int64_t num_groups, double eps);
/// Group norm backward. Shapes as the forward; outputs left undefined are not computed: dx
/// (N, C, S) x's dtype; dweight, dbias (C) acc dtype.
using GroupNormBackwardKernel = void(const Tensor& dx, const Tensor& dweight, const Tensor& dbias,
                                     const Tensor& grad, const Tensor& x, const Tensor& weight, const Tensor& mean,
                                     const Tensor& rstd, int64_t num_groups);

/// A contiguous tensor seen as (outer, dim, inner) around one dimension: element (o, k, i) is at
/// (o·dim + k)·inner + i. How every softmax kernel walks its operands.
struct DimSplit {
  int64_t outer = 1, dim = 1, inner = 1;
};
/// x's sizes split around `dim` (0 <= dim < x.dim()).
inline DimSplit split_at_dim(const Tensor& x, int64_t dim) {
  DimSplit l;
  for (int64_t d = 0; d < dim; ++d) l.outer *= x.size(d);
  l.dim = x.size(dim);
  for (int64_t d = dim + 1; d < x.dim(); ++d) l.inner *= x.size(d);
  return l;
}

/// y = softmax(x) or log_softmax(x) along dim. x, y: same shape and dtype.
using SoftmaxKernel = void(const Tensor& y, const Tensor& x, int64_t dim);
/// Fused backward along dim from the forward output y: softmax dx = y·(g − Σ g·y);
/// log_softmax dx = g − exp(y)·Σ g. dx, grad, y: same shape and dtype.
using SoftmaxBackwardKernel = void(const Tensor& dx, const Tensor& grad, const Tensor& y, int64_t dim);

}  // namespace precis::kernels
