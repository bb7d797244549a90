#pragma once
// nn::TransformerEncoderLayer and nn::TransformerEncoder with torch.nn's names, defaults and
// semantics (post-norm by default, norm_first for pre-norm), so a PyTorch state_dict loads as is:
//   self_attn.in_proj_weight, self_attn.in_proj_bias, self_attn.out_proj.{weight,bias},
//   linear1.{weight,bias}, linear2.{weight,bias}, norm1.{weight,bias}, norm2.{weight,bias};
// in an encoder each under layers.<i>., and the optional final norm under norm.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/rng.h"
#include "models/nn/activation.h"
#include "models/nn/attention.h"
#include "models/nn/linear.h"
#include "models/nn/module.h"
#include "models/nn/norm.h"
#include "models/nn/sequential.h"

namespace precis::nn {

/// Options of nn::TransformerEncoderLayer, with torch.nn.TransformerEncoderLayer's defaults
/// (activation is named by a string; a callable is not accepted).
struct TransformerEncoderLayerOptions {
  int64_t dim_feedforward = 2048;  ///< hidden width of the feed-forward block (linear1's outputs), positive
  double dropout = 0.1;            ///< after attention, inside and after the feed-forward block, on the attention weights
  std::string activation = "relu";  ///< of the feed-forward block: "relu" or "gelu" (exact, erf form)
  double layer_norm_eps = 1e-5;    ///< eps of norm1 and norm2
  bool batch_first = false;        ///< (N, S, E) inputs instead of (S, N, E)
  bool norm_first = false;         ///< pre-norm: x + sa(norm1(x)), x + ff(norm2(x)); else post-norm
  bool bias = true;                ///< in the linear layers and the layer norms
  Generator* generator = nullptr;  ///< initialisation (dropout uses the default generator)
};

/// One encoder block: self-attention and a feed-forward network (linear1, activation, dropout,
/// linear2), each with a residual connection and a LayerNorm, as torch.nn.TransformerEncoderLayer.
///   post-norm: x = norm1(x + sa(x));  x = norm2(x + ff(x))
///   pre-norm:  x = x + sa(norm1(x));  x = x + ff(norm2(x))
/// Parameters are initialised as PyTorch's (MultiheadAttention's and Linear's defaults).
class TransformerEncoderLayer : public Module {
 public:
  using Options = TransformerEncoderLayerOptions;  ///< The options struct.
  /// d_model divisible by nhead. ValueError for an unknown activation.
  TransformerEncoderLayer(int64_t d_model, int64_t nhead, Options options = {});

  /// src: (S, N, E), or (N, S, E) with batch_first. src_mask: (S, S) or (N·nhead, S, S), bool (true
  /// = not allowed) or floating (added to the scores); src_key_padding_mask: (N, S), true = a
  /// padding position no query attends to. Either may be undefined. Output: src's shape. Padded
  /// positions get computed outputs like the others (PyTorch's inference fast path, with nested
  /// tensors, returns zeros there instead).
  Tensor forward(const Tensor& src, const Tensor& src_mask, const Tensor& src_key_padding_mask = Tensor());
  /// forward(src, no masks): a single-tensor module (fits nn::Sequential).
  Tensor forward(const Tensor& src) override { return forward(src, Tensor(), Tensor()); }
  std::string type_name() const override { return "TransformerEncoderLayer"; }
  /// The options given at construction (generator reset to null); a reference into this layer.
  const Options& options() const { return options_; }

  Child<MultiheadAttention> self_attn;  ///< MultiheadAttention(d_model, nhead), self-attention
  Child<Linear> linear1;                ///< Linear(d_model, dim_feedforward), the feed-forward block's first layer
  Child<Dropout> dropout;               ///< after the activation, inside the feed-forward block
  Child<Linear> linear2;                ///< Linear(dim_feedforward, d_model), the feed-forward block's second layer
  Child<LayerNorm> norm1;               ///< LayerNorm(d_model) of the attention sub-block
  Child<LayerNorm> norm2;               ///< LayerNorm(d_model) of the feed-forward sub-block
  Child<Dropout> dropout1;              ///< on the attention output, before the residual sum
  Child<Dropout> dropout2;              ///< on the feed-forward output, before the residual sum

 private:
  Tensor self_attention_block(const Tensor& x, const Tensor& mask, const Tensor& key_padding_mask);
  Tensor feed_forward_block(const Tensor& x);
  Options options_;
};

/// A stack of num_layers copies of `encoder_layer` (deep copies: every layer starts with the same
/// weights, as in PyTorch, whose TransformerEncoder deep-copies its layer), then the optional
/// final `norm` (use one with norm_first layers). Children: "layers" (a ModuleList) and "norm".
class TransformerEncoder : public Module {
 public:
  /// encoder_layer is cloned num_layers times (positive); the encoder keeps no reference to it.
  /// norm, when given, is moved in as the child "norm".
  TransformerEncoder(const TransformerEncoderLayer& encoder_layer, int64_t num_layers,
                     std::optional<LayerNorm> norm = std::nullopt);

  /// Runs the layers in order with the same masks (see TransformerEncoderLayer::forward), then norm.
  Tensor forward(const Tensor& src, const Tensor& mask, const Tensor& src_key_padding_mask = Tensor());
  Tensor forward(const Tensor& src) override { return forward(src, Tensor(), Tensor()); }
  std::string type_name() const override { return "TransformerEncoder"; }

  size_t num_layers() const { return layer_list_.size(); }  ///< Number of encoder layers.
  /// The i-th layer, typed (IndexError when i >= num_layers()); it lives as long as this encoder.
  TransformerEncoderLayer& layer(size_t i) const;

  Child<ModuleList> layers;  ///< the layers, children "0", "1", ... (state_dict keys `layers.<i>.*`)
  Child<LayerNorm> norm;  ///< empty without a final norm

 private:
  std::vector<Child<TransformerEncoderLayer>> layer_list_;
};

}  // namespace precis::nn
