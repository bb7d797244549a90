#include "models/nn/attention.h"

#include <cmath>
#include <limits>
#include <sstream>

#include "models/nn/init.h"
#include "ops/functional.h"
#include "tensor/factory.h"

namespace precis::nn {

MultiheadAttention::MultiheadAttention(int64_t embed_dim, int64_t num_heads, Options options)
    : embed_dim_(embed_dim), num_heads_(num_heads), options_(options) {
  PRECIS_CHECK(embed_dim > 0 && num_heads > 0 && embed_dim % num_heads == 0, "nn::MultiheadAttention: embed_dim (",
               embed_dim, ") must be a positive multiple of num_heads (", num_heads, ")");
  in_proj_weight = empty({3 * embed_dim, embed_dim});
  if (options.bias) in_proj_bias = empty({3 * embed_dim});
  out_proj = add("out_proj", Linear(embed_dim, embed_dim, {.bias = options.bias, .generator = options.generator}));
  reset_parameters(options.generator);
  options_.generator = nullptr;
  register_parameter("in_proj_weight", in_proj_weight);
  register_parameter("in_proj_bias", in_proj_bias);
}

void MultiheadAttention::reset_parameters(Generator* gen) {
  init::xavier_uniform_(in_proj_weight, 1.0, gen);
  if (in_proj_bias.defined()) init::zeros_(in_proj_bias);
  if (out_proj->bias.defined()) init::zeros_(out_proj->bias);
}

std::tuple<Tensor, Tensor> MultiheadAttention::forward(const Tensor& query, const Tensor& key, const Tensor& value,
                                                       const ForwardOptions& fo) {
  const int64_t e = embed_dim_, h = num_heads_, d = e / h;
  PRECIS_CHECK_SHAPE(query.dim() == 3 && key.dim() == 3 && value.dim() == 3 && query.size(2) == e &&
                         key.size(2) == e && value.size(2) == e && key.sizes() == value.sizes(),
                     "nn::MultiheadAttention(", e, ", heads ", h, "): query ", query.describe(), ", key ",
                     key.describe(), " and value ", value.describe(), " must be 3-D with last dim ", e,
                     " (key and value of one shape)");
  // Work in (N, L, E).
  const Tensor q_in = options_.batch_first ? query : query.transpose(0, 1);
  const Tensor k_in = options_.batch_first ? key : key.transpose(0, 1);
  const Tensor v_in = options_.batch_first ? value : value.transpose(0, 1);
  const int64_t n = q_in.size(0), l = q_in.size(1), s = k_in.size(1);
  PRECIS_CHECK_SHAPE(k_in.size(0) == n, "nn::MultiheadAttention: query ", query.describe(), " and key ",
                     key.describe(), " have different batch sizes");
  auto project = [&](const Tensor& x, int64_t i, int64_t len) {
    Tensor w = in_proj_weight.slice(0, i * e, (i + 1) * e);
    Tensor b = in_proj_bias.defined() ? in_proj_bias.slice(0, i * e, (i + 1) * e) : Tensor();
    return linear(x, w, b).view({n, len, h, d}).transpose(1, 2);  // (N, H, len, D)
  };
  const Tensor q = project(q_in, 0, l), k = project(k_in, 1, s), v = project(v_in, 2, s);

  // Masks become one additive fp32 mask broadcastable to (N, H, L, S).
  Tensor mask;
  const double neg_inf = -std::numeric_limits<double>::infinity();
  const Tensor& kpm = fo.key_padding_mask;
  if (kpm.defined()) {
    PRECIS_CHECK_SHAPE(kpm.dim() == 2 && kpm.size(0) == n && kpm.size(1) == s, "nn::MultiheadAttention: key_padding_mask ",
                       kpm.describe(), " must be (", n, ", ", s, ")");
    Tensor ignore = kpm.dtype() == DType::boolean ? kpm : ne(kpm, 0);
    mask = masked_fill(zeros({n, 1, 1, s}, {.device = kpm.device()}), ignore.view({n, 1, 1, s}), neg_inf);
  }
  if (fo.attn_mask.defined()) {
    const Tensor& attn_mask = fo.attn_mask;
    const bool two_d = attn_mask.dim() == 2 && attn_mask.size(0) == l && attn_mask.size(1) == s;
    const bool three_d = attn_mask.dim() == 3 && attn_mask.size(0) == n * h && attn_mask.size(1) == l &&
                         attn_mask.size(2) == s;
    PRECIS_CHECK_SHAPE(two_d || three_d, "nn::MultiheadAttention: attn_mask ", attn_mask.describe(), " must be (", l,
                       ", ", s, ") or (", n * h, ", ", l, ", ", s, ")");
    Tensor am = two_d ? attn_mask.view({1, 1, l, s}) : attn_mask.view({n, h, l, s});
    if (am.dtype() == DType::boolean) am = masked_fill(zeros(am.sizes(), {.device = am.device()}), am, neg_inf);
    mask = mask.defined() ? mask + am : am;
  }
  const double p = is_training() ? options_.dropout : 0.0;
  Tensor ctx, weights;
  if (!fo.need_weights) {
    ctx = scaled_dot_product_attention(q, k, v, mask, p);  // (N, H, L, D)
  } else {
    // The weights are asked for: the same math written out (sdpa keeps them internal).
    Tensor scores = matmul(q, k.transpose(-2, -1)) * (1.0 / std::sqrt(static_cast<double>(d)));
    if (mask.defined()) scores = scores + mask;
    weights = softmax(scores, -1, scores.dtype() == DType::f64 ? DType::f64 : DType::f32);
    // A row with every key masked is NaN after softmax; sdpa gives such rows zero weights.
    if (mask.defined()) weights = masked_fill(weights, ne(weights, weights), 0.0);
    weights = dropout(weights, p, p > 0.0);
    ctx = matmul(weights.to(v.dtype()), v);
    if (fo.average_attn_weights) weights = mean(weights, {1});
  }
  Tensor out = (*out_proj)(ctx.transpose(1, 2).reshape({n, l, e}));
  return {options_.batch_first ? out : out.transpose(0, 1), weights};
}

std::string MultiheadAttention::extra_repr() const {
  std::ostringstream s;
  s << "embed_dim=" << embed_dim_ << ", num_heads=" << num_heads_ << ", dropout=" << options_.dropout
    << ", batch_first=" << (options_.batch_first ? "true" : "false");
  return s.str();
}

}  // namespace precis::nn
