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

Tensor MultiheadAttention::forward(const Tensor& query, const Tensor& key, const Tensor& value,
                                   const Tensor& key_padding_mask, const Tensor& attn_mask) {
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
  if (key_padding_mask.defined()) {
    PRECIS_CHECK_SHAPE(key_padding_mask.dim() == 2 && key_padding_mask.size(0) == n && key_padding_mask.size(1) == s,
                       "nn::MultiheadAttention: key_padding_mask ", key_padding_mask.describe(), " must be (", n, ", ",
                       s, ")");
    Tensor ignore = key_padding_mask.dtype() == DType::boolean ? key_padding_mask : ne(key_padding_mask, 0);
    mask = masked_fill(zeros({n, 1, 1, s}), ignore.view({n, 1, 1, s}), neg_inf);
  }
  if (attn_mask.defined()) {
    Tensor am;
    if (attn_mask.dim() == 2) am = attn_mask.view({1, 1, l, s});
    else am = attn_mask.view({n, h, l, s});
    if (am.dtype() == DType::boolean) am = masked_fill(zeros(am.sizes()), am, neg_inf);
    mask = mask.defined() ? mask + am : am;
  }
  const double p = is_training() ? options_.dropout : 0.0;
  Tensor ctx = scaled_dot_product_attention(q, k, v, mask, p);  // (N, H, L, D)
  Tensor out = (*out_proj)(ctx.transpose(1, 2).reshape({n, l, e}));
  return options_.batch_first ? out : out.transpose(0, 1);
}

std::string MultiheadAttention::extra_repr() const {
  std::ostringstream s;
  s << "embed_dim=" << embed_dim_ << ", num_heads=" << num_heads_ << ", dropout=" << options_.dropout
    << ", batch_first=" << (options_.batch_first ? "true" : "false");
  return s.str();
}

}  // namespace precis::nn
