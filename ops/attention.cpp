// scaled_dot_product_attention, composed of public ops (its backward comes from theirs):
// batched matmul for the scores (in q's dtype: Lower), masking and softmax in fp32, dropout on the
// weights, and a batched matmul with v.
#include <cmath>
#include <limits>

#include "ops/functional.h"
#include "tensor/factory.h"

namespace precis {

namespace {

// Softmax over the last dim of fp32 scores that may hold −inf (masked) entries. A row with every
// entry masked gives zeros rather than NaN (PyTorch's math backend does the same).
// TODO(norm): use precis::softmax once it lands; keep the all-masked-row behaviour.
Tensor masked_softmax_last(const Tensor& s) {
  // The shift carries no gradient (softmax is shift-invariant); an all −inf row's shift is moved
  // to the lowest finite value so that its exponentials come out 0 instead of NaN.
  const Tensor m = maximum(std::get<0>(max(s.detach(), -1, true)), -std::numeric_limits<double>::max());
  const Tensor e = exp(sub(s, m));
  // Σ e >= 1 on any row with an unmasked entry (its maximum gives e^0), so the floor only acts on
  // all-masked rows and never ties (which would halve the gradient).
  return div(e, maximum(sum(e, {-1}, true), 1e-30));
}

}  // namespace

Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& attn_mask,
                                    double dropout_p, bool is_causal, double scale, Generator* generator) {
  const char* op = "scaled_dot_product_attention";
  PRECIS_CHECK(q.defined() && k.defined() && v.defined(), op, ": q, k and v must be defined");
  auto operands = [&] {
    std::string s = "q " + q.describe() + ", k " + k.describe() + ", v " + v.describe();
    if (attn_mask.defined()) s += ", attn_mask " + attn_mask.describe();
    return s;
  };
  PRECIS_CHECK_DTYPE(q.is_floating_point() && k.dtype() == q.dtype() && v.dtype() == q.dtype(), op,
                     ": q, k and v must be floating with one dtype, got ", operands());
  PRECIS_CHECK_DEVICE(k.device() == q.device() && v.device() == q.device() &&
                          (!attn_mask.defined() || attn_mask.device() == q.device()),
                      op, ": all operands must be on one device, got ", operands());
  PRECIS_CHECK_SHAPE(q.dim() >= 2 && k.dim() >= 2 && v.dim() >= 2, op,
                     ": q, k and v must be (..., L, E), (..., S, E), (..., S, Ev), got ", operands());
  PRECIS_CHECK_SHAPE(k.size(-1) == q.size(-1), op, ": q and k must share the embedding size E (last dim), got ",
                     operands());
  PRECIS_CHECK_SHAPE(v.size(-2) == k.size(-2), op, ": k and v must share the key length S (dim -2), got ",
                     operands());
  PRECIS_CHECK(!(is_causal && attn_mask.defined()), op,
               ": pass either attn_mask or is_causal, not both (fold the causal mask into attn_mask)");
  PRECIS_CHECK(dropout_p >= 0.0 && dropout_p <= 1.0, op, ": dropout_p must be in [0, 1], got ", dropout_p);
  PRECIS_CHECK(scale >= 0.0, op, ": scale must be positive (0 means 1/sqrt(E)), got ", scale);
  const int64_t L = q.size(-2), S = k.size(-2);
  if (attn_mask.defined()) {
    PRECIS_CHECK_DTYPE(attn_mask.dtype() == DType::boolean || attn_mask.is_floating_point(), op,
                       ": attn_mask must be bool (true = attend) or floating (added to the scores), got ", operands());
    const bool ok = attn_mask.dim() >= 1 && (attn_mask.size(-1) == S || attn_mask.size(-1) == 1) &&
                    (attn_mask.dim() < 2 || attn_mask.size(-2) == L || attn_mask.size(-2) == 1);
    PRECIS_CHECK_SHAPE(ok, op, ": attn_mask must broadcast to (..., L, S) = (..., ", L, ", ", S, "), got ", operands());
  }
  const double s = scale > 0.0 ? scale : 1.0 / std::sqrt(static_cast<double>(q.size(-1)));

  const DType score_dtype = q.dtype() == DType::f64 ? DType::f64 : DType::f32;
  Tensor scores = mul(matmul(q, k.transpose(-2, -1)).to(score_dtype), s);  // (..., L, S)
  const double neg_inf = -std::numeric_limits<double>::infinity();
  if (is_causal) {
    // Key j is visible from query i when j <= i (top-left aligned, as PyTorch).
    const TensorOptions idx{.dtype = DType::i64, .device = q.device()};
    const Tensor keep = le(arange(static_cast<double>(S), idx).unsqueeze(0), arange(static_cast<double>(L), idx).unsqueeze(1));
    scores = where(keep, scores, neg_inf);
  } else if (attn_mask.defined()) {
    scores = attn_mask.dtype() == DType::boolean ? where(attn_mask, scores, neg_inf)
                                                 : add(scores, attn_mask.to(score_dtype));
  }
  Tensor weights = masked_softmax_last(scores).to(q.dtype());
  if (dropout_p > 0.0) weights = dropout(weights, dropout_p, true, generator);
  return matmul(weights, v);
}

}  // namespace precis
