#pragma once
// nn::MultiheadAttention with torch.nn.MultiheadAttention's parameters and names:
// in_proj_weight (3E, E), in_proj_bias (3E) (query, key, value rows in that order), out_proj.weight,
// out_proj.bias. (BERT uses separate query/key/value Linear layers instead: see models/bert.h.)
#include "core/rng.h"
#include "models/nn/linear.h"
#include "models/nn/module.h"

namespace precis::nn {

struct MultiheadAttentionOptions {
  double dropout = 0.0;      ///< on the attention weights, in training
  bool bias = true;
  bool batch_first = false;  ///< (N, L, E) inputs instead of (L, N, E), as PyTorch
  Generator* generator = nullptr;  ///< initialisation (dropout uses the default generator)
};

class MultiheadAttention : public Module {
 public:
  using Options = MultiheadAttentionOptions;
  /// embed_dim divisible by num_heads. Initialisation as PyTorch: xavier_uniform_ in_proj_weight,
  /// zero biases, out_proj.weight as a Linear's.
  MultiheadAttention(int64_t embed_dim, int64_t num_heads, Options options = {});

  /// Self- or cross-attention. query: (L, N, E) or (N, L, E) with batch_first; key/value: (S, N, E)
  /// likewise. key_padding_mask: bool (N, S), true = ignore that key (PyTorch's convention).
  /// attn_mask: (L, S) or (N·heads, L, S); bool (true = not allowed, PyTorch's convention) or
  /// floating (added to the scores). Returns the attended output, query's shape. The projections
  /// are Lower under autocast; scores and softmax are computed in fp32.
  Tensor forward(const Tensor& query, const Tensor& key, const Tensor& value,
                 const Tensor& key_padding_mask = Tensor(), const Tensor& attn_mask = Tensor());
  /// Self-attention: forward(x, x, x).
  Tensor forward(const Tensor& x) override { return forward(x, x, x); }
  void reset_parameters(Generator* gen = nullptr);
  std::string type_name() const override { return "MultiheadAttention"; }
  std::string extra_repr() const override;

  Tensor in_proj_weight;  ///< (3E, E)
  Tensor in_proj_bias;    ///< (3E); undefined without bias
  Child<Linear> out_proj;

 private:
  int64_t embed_dim_;
  int64_t num_heads_;
  Options options_;
};

}  // namespace precis::nn
