// scaled_dot_product_attention, composed of public ops (its backward comes from theirs):
// batched matmul for the scores (in q's dtype: Lower), masking and softmax in fp32, dropout on the
// weights, and a batched matmul with v. Between the matmuls, attention_softmax (one fused pass
// each way, same numbers) replaces the chain of ops where it has a kernel and the mask fits. Causal masking never empties a row (key 0 is visible to
// every query), so only explicit masks are checked for rows with no visible key.
#include <cmath>
#include <deque>
#include <limits>
#include <mutex>

#include "core/grad_mode.h"
#include "ops/detail/attention_softmax.h"
#include "ops/functional.h"
#include "ops/op_table.h"
#include "ops/precision.h"
#include "tensor/factory.h"

namespace precis {

namespace {

// True where a query row of the (..., L, S) scores has every key masked: from the bool mask's
// rows when there is one, else from −inf scores (an additive mask). On the CPU undefined when no
// row is entirely masked, so the common case pays no extra pass over the scores; on a device the
// rows are returned as they are, since asking whether any is set would make the host wait for the
// device (zeroing rows where none is set changes nothing).
Tensor all_masked_rows(const Tensor& scores, const Tensor& keep) {
  if (scores.size(-1) == 0) return Tensor();  // no keys: the weights are empty, nothing to zero (nor a max to take)
  const Tensor rows = keep.defined()
                          ? eq(sum(keep, {-1}, true), 0)
                          : eq(std::get<0>(max(scores.detach(), -1, true)), -std::numeric_limits<double>::infinity());
  if (!rows.device().is_cpu()) return rows;
  return sum(rows).item<int64_t>() > 0 ? rows : Tensor();
}

// The causal mask (L, S) on `device`: key j is visible from query i when j <= i (top-left
// aligned, as PyTorch). Built from host indices, so on a GPU each mask is made once and kept (the
// last few sizes per process): a step captured in a CUDA graph after an eager warm-up step then
// uploads nothing (an upload inside a capture is refused), and eager steps copy nothing per call.
Tensor causal_keep(int64_t L, int64_t S, Device device) {
  const auto make = [&] {
    NoGradGuard no_grad;
    const TensorOptions idx{.dtype = DType::i64, .device = device};
    return le(arange(static_cast<double>(S), idx).unsqueeze(0), arange(static_cast<double>(L), idx).unsqueeze(1));
  };
  if (device.is_cpu()) return make();
  struct Entry {
    Device device;
    int64_t L, S;
    Tensor keep;
  };
  static std::mutex mutex;
  // Never destroyed: device memory must not be freed by static destructors after the runtime is gone.
  static auto* const cache = new std::deque<Entry>();
  const std::lock_guard<std::mutex> lock(mutex);
  for (const Entry& e : *cache)
    if (e.device == device && e.L == L && e.S == S) return e.keep;
  Tensor keep = make();
  if (cache->size() == 8) cache->pop_front();
  cache->push_back({device, L, S, keep});
  return keep;
}

// Whether the fused score pass (ops/detail/attention_softmax.h) takes over between the matmuls: where
// its kernels exist for the scores' device and dtype (the CPU), the mask broadcasts to the scores
// without growing them and needs no gradient, and dropout is not p = 1 (dropout's own zeros).
bool use_fused(const Tensor& raw, const Tensor& mask, double dropout_p) {
  if (dropout_p >= 1.0) return false;
  if (find_fused_kernel(OpId::attention_softmax, raw.device().type, raw.dtype()) == nullptr ||
      find_fused_kernel(OpId::attention_softmax_backward, raw.device().type, raw.dtype()) == nullptr)
    return false;
  if (!mask.defined()) return true;
  if (mask.requires_grad() && is_grad_enabled()) return false;
  if (mask.dim() > raw.dim()) return false;
  for (int64_t d = 1; d <= mask.dim(); ++d)
    if (mask.size(-d) != 1 && mask.size(-d) != raw.size(-d)) return false;
  return true;
}

}  // namespace

// Written out: a composite whose kernels are other ops' (they record the graph); only the hook
// and the checks are its own.
Tensor scaled_dot_product_attention(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in,
                                    const Tensor& attn_mask_in, double dropout_p, bool is_causal, double scale,
                                    Generator* generator) {
  const auto [q, k, v, attn_mask] =
      apply_precision(OpId::scaled_dot_product_attention, q_in, k_in, v_in, attn_mask_in);
  const char* op = "scaled_dot_product_attention";
  PRECIS_CHECK(q.defined() && k.defined() && v.defined(), op, ": q, k and v must be defined");
  // Named captures: clang before 16 cannot capture structured bindings implicitly.
  auto operands = [&q = q, &k = k, &v = v, &attn_mask = attn_mask] {
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

  Tensor raw = matmul(q, k.transpose(-2, -1));  // (..., L, S) in q's dtype
  if (use_fused(raw, attn_mask, dropout_p)) return matmul(attention_softmax(raw, attn_mask, is_causal, s, dropout_p, generator), v);
  const DType score_dtype = q.dtype() == DType::f64 ? DType::f64 : DType::f32;
  Tensor scores = mul(raw.to(score_dtype), s);
  const double neg_inf = -std::numeric_limits<double>::infinity();
  if (is_causal) {
    scores = where(causal_keep(L, S, q.device()), scores, neg_inf);
  } else if (attn_mask.defined()) {
    scores = attn_mask.dtype() == DType::boolean ? where(attn_mask, scores, neg_inf)
                                                 : add(scores, attn_mask.to(score_dtype));
  }
  // A row with every key masked gets zero weights (PyTorch's math backend does the same) rather
  // than the NaN of softmax over −inf: its scores are zeroed before the softmax (so backward sees
  // finite values) and its weights after (so no gradient flows to them).
  Tensor empty_rows;
  if (attn_mask.defined()) empty_rows = all_masked_rows(scores, attn_mask.dtype() == DType::boolean ? attn_mask : Tensor());
  if (empty_rows.defined()) scores = masked_fill(scores, empty_rows, 0.0);
  Tensor weights = softmax(scores, -1);
  if (empty_rows.defined()) weights = masked_fill(weights, empty_rows, 0.0);
  weights = weights.to(q.dtype());
  if (dropout_p > 0.0) weights = dropout(weights, dropout_p, true, generator);
  return matmul(weights, v);
}

}  // namespace precis
