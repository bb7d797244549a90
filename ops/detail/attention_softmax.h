#pragma once
// attention_softmax: the fused middle of scaled_dot_product_attention (ops/attention.cpp), from
// the raw scores q·kᵀ to the weights that multiply v. Internal: scaled_dot_product_attention calls
// it where a kernel exists (the CPU) and the mask fits; tests and benchmarks call it directly.
#include "core/rng.h"
#include "tensor/tensor.h"

namespace precis {

/// The weights dropout(softmax(scores·scale + mask), dropout_p) in the scores' dtype, computed as
/// scaled_dot_product_attention's composed ops compute them, bit for bit: the scaled, masked
/// scores and the softmax in fp32 (f64 for f64 scores), the weights rounded to the scores' dtype,
/// then dropout (p > 0: one reservation of ⌈numel / 4⌉ Philox blocks on `generator`, or the
/// default generator, as dropout() reserves). scores: (..., L, S) floating. attn_mask: undefined,
/// bool (true = attend) or floating (added), broadcastable to the scores' shape without growing
/// it; is_causal: key j visible from query i when j <= i (no attn_mask then). A row with no visible
/// key under attn_mask gets zero weights and no gradient. 0 <= dropout_p < 1; scale > 0.
/// Differentiable in scores (not in attn_mask); its backward is one fused pass too.
Tensor attention_softmax(const Tensor& scores, const Tensor& attn_mask, bool is_causal, double scale,
                         double dropout_p = 0.0, Generator* generator = nullptr);

}  // namespace precis
