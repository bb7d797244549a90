#pragma once
// Kernel signatures of attention's fused score pass (ops/attention_softmax.cpp): everything
// scaled_dot_product_attention does between its two batched matmuls, in one pass over the
// (..., L, S) scores forward and one backward. Keyed by the scores' dtype; math in fp32 for
// f16/bf16/f32 scores, f64 for f64 ("acc dtype" below).
#include <cstdint>

#include "core/rng.h"
#include "tensor/tensor.h"

namespace precis::kernels {

/// How the scores are masked before the softmax.
enum class AttentionMask : uint8_t {
  none,      ///< no mask
  additive,  ///< mask (acc dtype) added to the scaled scores
  keep,      ///< bool mask: false → −inf
  causal,    ///< key j visible from query i when j <= i (top-left aligned)
};

/// The fused pass's parameters: the mask kind, the score scale, and dropout's p (0 <= p < 1; 0 =
/// no dropout) with the Philox draw `rng` of ops/math/dropout_math.h (element index = the row-major
/// index into the scores; the offset plus rng.offset_base's value when set, as DropoutKernel).
struct AttentionSoftmaxArgs {
  AttentionMask mask = AttentionMask::none;
  double scale = 1.0;
  double dropout_p = 0.0;
  PhiloxDraw rng;
};

/// Forward, per row of S keys: t = scores·scale (in the acc dtype), masked; y = softmax(t) (acc
/// dtype); p = dropout(y rounded to the scores' dtype). A row whose every key is masked (keep: no
/// true; additive: every t is −inf) gets y = p = 0. scores: (..., L, S) contiguous; p: its shape
/// and dtype, contiguous; y: its shape in the acc dtype, contiguous — or p itself when p's dtype is
/// the acc dtype and dropout_p is 0. mask: expanded to the scores' shape (any strides; additive in
/// the acc dtype, keep bool), undefined for none and causal.
using AttentionSoftmaxKernel = void(const Tensor& p, const Tensor& y, const Tensor& scores, const Tensor& mask,
                                    const AttentionSoftmaxArgs& args);
/// Backward: ds = scale · y ⊙ (g − Σ_row g ⊙ y), g = grad with the forward's dropout mask and scale
/// applied (rounded to grad's dtype as dropout's backward rounds), zero where a key is masked
/// (keep, causal) and on rows the forward zeroed. ds, grad: the scores' shape and dtype,
/// contiguous; y, mask, args: the forward's.
using AttentionSoftmaxBackwardKernel = void(const Tensor& ds, const Tensor& grad, const Tensor& y, const Tensor& mask,
                                            const AttentionSoftmaxArgs& args);

}  // namespace precis::kernels
