#pragma once
// Kernel signatures of attention's fused score pass (ops/attention_softmax.cpp): everything
// scaled_dot_product_attention does between its two batched matmuls, in one pass over the
// (..., L, S) scores forward and one backward. Keyed by the scores' dtype; math in fp32 for
// f16/bf16/f32 scores, f64 for f64 ("acc dtype" below).
#include <array>
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

/// Where the forward's dropout mask comes from (dropout_p > 0), and where it goes.
enum class DropoutKeep : uint8_t {
  draw,        ///< drawn from `rng`; `keep` undefined (nothing needs the mask again)
  draw_store,  ///< drawn from `rng` and packed into `keep` (for the backward, or a recomputation)
  replay,      ///< read from `keep`, as a draw_store call packed it (a recomputation); no draw
};

/// The fused pass's parameters: the mask kind, the score scale, and dropout's p (0 <= p < 1; 0 =
/// no dropout) with the Philox draw `rng` of ops/math/dropout_math.h (element index = the row-major
/// index into the scores; the offset plus rng.offset_base's value when set, as DropoutKernel) and
/// what the forward does with the mask (`keep`).
struct AttentionSoftmaxArgs {
  AttentionMask mask = AttentionMask::none;
  double scale = 1.0;
  double dropout_p = 0.0;
  PhiloxDraw rng;
  DropoutKeep keep = DropoutKeep::draw;
};

/// The dropout mask of a (..., L, S) score pass, packed: i32 of shape (rows, ⌈S / 32⌉), rows =
/// numel / S; bit j % 32 of word j / 32 of a row is set when its key j is kept. 1/32 of the fp32
/// weights' bytes: kept for the backward instead of drawing the Philox blocks again.
inline std::array<int64_t, 2> dropout_keep_shape(int64_t rows, int64_t S) { return {rows, (S + 31) / 32}; }

/// Forward, per row of S keys: t = scores·scale (in the acc dtype), masked; y = softmax(t) (acc
/// dtype); p = dropout(y rounded to the scores' dtype). A row whose every key is masked (keep: no
/// true; additive: every t is −inf) gets y = p = 0. scores: (..., L, S) contiguous; p: its shape
/// and dtype, contiguous; y: its shape in the acc dtype, contiguous — or p itself when p's dtype is
/// the acc dtype and dropout_p is 0, or undefined when no backward will read it. mask: expanded to
/// the scores' shape (any strides; additive in the acc dtype, keep bool), undefined for none and
/// causal. keep (dropout_p > 0 and args.keep draw_store or replay; undefined otherwise): the packed
/// dropout mask (dropout_keep_shape), written or read as args.keep says (the words of a row the
/// forward zeroes are neither).
using AttentionSoftmaxKernel = void(const Tensor& p, const Tensor& y, const Tensor& keep, const Tensor& scores,
                                    const Tensor& mask, const AttentionSoftmaxArgs& args);
/// Backward: ds = scale · y ⊙ (g − Σ_row g ⊙ y), g = grad with the forward's dropout mask and scale
/// applied (rounded to grad's dtype as dropout's backward rounds), zero where a key is masked
/// (keep, causal) and on rows the forward zeroed. ds, grad: the scores' shape and dtype,
/// contiguous; y, mask, args: the forward's; keep: the forward's packed dropout mask (dropout_p >
/// 0; the backward draws nothing), undefined without dropout.
using AttentionSoftmaxBackwardKernel = void(const Tensor& ds, const Tensor& grad, const Tensor& y, const Tensor& keep,
                                            const Tensor& mask, const AttentionSoftmaxArgs& args);

}  // namespace precis::kernels
