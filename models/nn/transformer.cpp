#include "models/nn/transformer.h"

#include "ops/functional.h"

namespace precis::nn {

TransformerEncoderLayer::TransformerEncoderLayer(int64_t d_model, int64_t nhead, Options options)
    : options_(std::move(options)) {
  const Options& o = options_;
  PRECIS_CHECK(o.activation == "relu" || o.activation == "gelu", "nn::TransformerEncoderLayer: activation must be "
               "\"relu\" or \"gelu\", got \"", o.activation, "\"");
  PRECIS_CHECK(o.dim_feedforward > 0, "nn::TransformerEncoderLayer: dim_feedforward must be positive, got ",
               o.dim_feedforward);
  // Registration order is PyTorch's, so named_parameters() lists the same names in the same order.
  self_attn = add("self_attn", MultiheadAttention(d_model, nhead,
                                                  {.dropout = o.dropout, .bias = o.bias,
                                                   .batch_first = o.batch_first, .generator = o.generator}));
  linear1 = add("linear1", Linear(d_model, o.dim_feedforward, {.bias = o.bias, .generator = o.generator}));
  dropout = add("dropout", Dropout(o.dropout));
  linear2 = add("linear2", Linear(o.dim_feedforward, d_model, {.bias = o.bias, .generator = o.generator}));
  norm1 = add("norm1", LayerNorm(d_model, {.eps = o.layer_norm_eps, .bias = o.bias}));
  norm2 = add("norm2", LayerNorm(d_model, {.eps = o.layer_norm_eps, .bias = o.bias}));
  dropout1 = add("dropout1", Dropout(o.dropout));
  dropout2 = add("dropout2", Dropout(o.dropout));
  options_.generator = nullptr;  // used up; a copy must not point at the caller's generator
}

Tensor TransformerEncoderLayer::self_attention_block(const Tensor& x, const Tensor& mask,
                                                     const Tensor& key_padding_mask) {
  auto [out, weights] =
      self_attn->forward(x, x, x, {.key_padding_mask = key_padding_mask, .need_weights = false, .attn_mask = mask});
  return dropout1(out);
}

Tensor TransformerEncoderLayer::feed_forward_block(const Tensor& x) {
  Tensor h = linear1(x);
  h = options_.activation == "relu" ? relu(h) : gelu(h);
  return dropout2(linear2(dropout(h)));
}

Tensor TransformerEncoderLayer::forward(const Tensor& src, const Tensor& src_mask, const Tensor& src_key_padding_mask) {
  PRECIS_CHECK_SHAPE(src.dim() == 3, "nn::TransformerEncoderLayer: src ", src.describe(), " must be 3-D: ",
                     options_.batch_first ? "(N, S, E)" : "(S, N, E)");
  Tensor x = src;
  if (options_.norm_first) {
    x = x + self_attention_block(norm1(x), src_mask, src_key_padding_mask);
    x = x + feed_forward_block(norm2(x));
  } else {
    x = norm1(x + self_attention_block(x, src_mask, src_key_padding_mask));
    x = norm2(x + feed_forward_block(x));
  }
  return x;
}

TransformerEncoder::TransformerEncoder(const TransformerEncoderLayer& encoder_layer, int64_t num_layers,
                                       std::optional<LayerNorm> final_norm) {
  PRECIS_CHECK(num_layers > 0, "nn::TransformerEncoder: num_layers must be positive, got ", num_layers);
  layers = add("layers", ModuleList());
  for (int64_t i = 0; i < num_layers; ++i)
    layer_list_.emplace_back(layers->push_back(std::move(*encoder_layer.clone<TransformerEncoderLayer>())));
  if (final_norm) norm = add("norm", std::move(*final_norm));
}

TransformerEncoderLayer& TransformerEncoder::layer(size_t i) const {
  PRECIS_CHECK_INDEX(i < layer_list_.size(), "nn::TransformerEncoder: layer ", i, " is out of range for ",
                     layer_list_.size(), " layers");
  return *layer_list_[i];
}

Tensor TransformerEncoder::forward(const Tensor& src, const Tensor& mask, const Tensor& src_key_padding_mask) {
  Tensor x = src;
  for (const auto& l : layer_list_) x = l(x, mask, src_key_padding_mask);
  return norm ? norm(x) : x;
}

}  // namespace precis::nn
