#pragma once
// nn::MultiheadAttention with torch.nn.MultiheadAttention's parameters and names:
// in_proj_weight (3E, E), in_proj_bias (3E) (query, key, value rows in that order), out_proj.weight,
// out_proj.bias. (BERT uses separate query/key/value Linear layers instead: see models/bert.h.)
#include <tuple>

#include "core/rng.h"
#include "models/nn/linear.h"
#include "models/nn/module.h"

namespace precis::nn {

/// Options of nn::MultiheadAttention, with torch.nn.MultiheadAttention's defaults (add_bias_kv,
/// add_zero_attn, kdim and vdim are not offered: key and value have embed_dim features).
struct MultiheadAttentionOptions {
  double dropout = 0.0;      ///< on the attention weights, in training
  bool bias = true;          ///< in_proj_bias and out_proj.bias, like PyTorch's `bias`
  bool batch_first = false;  ///< (N, L, E) inputs instead of (L, N, E), as PyTorch
  Generator* generator = nullptr;  ///< initialisation (dropout uses the default generator)
};

/// The keyword arguments of MultiheadAttention::forward, in PyTorch's order and with its defaults.
struct MultiheadAttentionForwardOptions {
  /// bool (N, S), true = ignore that key (PyTorch's convention; an integer mask: nonzero = ignore).
  Tensor key_padding_mask{};
  /// Also return the attention weights (the second element); false skips computing them.
  bool need_weights = true;
  /// (L, S) or (N·heads, L, S); bool (true = not allowed, PyTorch's convention) or floating (added
  /// to the scores).
  Tensor attn_mask{};
  /// Weights averaged over the heads, (N, L, S); false: per head, (N, heads, L, S).
  bool average_attn_weights = true;
};

/// torch.nn.MultiheadAttention: num_heads scaled dot-product attentions of embed_dim / num_heads
/// features each, between projections of query, key and value, recombined by out_proj.
class MultiheadAttention : public Module {
 public:
  using Options = MultiheadAttentionOptions;  ///< The constructor's options struct.
  using ForwardOptions = MultiheadAttentionForwardOptions;  ///< forward()'s keyword arguments.
  /// embed_dim divisible by num_heads. Initialisation as PyTorch: xavier_uniform_ in_proj_weight,
  /// zero biases, out_proj.weight as a Linear's.
  MultiheadAttention(int64_t embed_dim, int64_t num_heads, Options options = {});

  /// Self- or cross-attention, as torch.nn.MultiheadAttention: returns (attn_output,
  /// attn_weights). query: (L, N, E) or (N, L, E) with batch_first; key/value: (S, N, E) likewise.
  /// attn_output has query's shape; attn_weights are the softmax weights after dropout, (N, L, S)
  /// averaged over heads (see ForwardOptions), undefined when !need_weights. Query rows whose keys
  /// are all masked get zero weights and a zero attention (PyTorch gives NaN there).
  ///   auto [out, weights] = mha.forward(q, k, v, {.key_padding_mask = pad, .need_weights = false});
  /// The projections are Lower under autocast; scores and softmax are computed in fp32.
  std::tuple<Tensor, Tensor> forward(const Tensor& query, const Tensor& key, const Tensor& value,
                                     const ForwardOptions& options = {});
  /// Self-attention without weights: forward(x, x, x, {.need_weights = false}), the output only
  /// (so the layer fits nn::Sequential).
  Tensor forward(const Tensor& x) override { return std::get<0>(forward(x, x, x, {.need_weights = false})); }
  /// As PyTorch's _reset_parameters: xavier_uniform_ in_proj_weight (from gen, or the default
  /// generator when null), zero in_proj_bias and out_proj.bias; out_proj.weight keeps its values.
  void reset_parameters(Generator* gen = nullptr);
  std::string type_name() const override { return "MultiheadAttention"; }
  std::string extra_repr() const override;

  Tensor in_proj_weight;  ///< (3E, E)
  Tensor in_proj_bias;    ///< (3E); undefined without bias
  Child<Linear> out_proj;  ///< Linear(E, E): the heads' concatenated outputs → attn_output

 private:
  int64_t embed_dim_;
  int64_t num_heads_;
  Options options_;
};

}  // namespace precis::nn
