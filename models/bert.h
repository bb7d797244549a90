#pragma once
// BERT (Devlin et al.) with Hugging Face's module layout and parameter names, so HF checkpoints
// map 1:1: embeddings.word_embeddings.weight, encoder.layer.0.attention.self.query.weight,
// ...attention.output.dense.weight, ...attention.output.LayerNorm.weight,
// ...intermediate.dense.weight, ...output.dense.weight, ...output.LayerNorm.weight, pooler.dense.*;
// heads: BertForMaskedLM ("bert." + the above, cls.predictions.transform.dense.weight,
// cls.predictions.transform.LayerNorm.*, cls.predictions.bias, cls.predictions.decoder.weight tied
// to the word embeddings) and BertForSequenceClassification (bert.*, classifier.*).
//
// Post-LN encoder layers, exact (erf) GELU, LayerNorm eps 1e-12, dropout 0.1 on embeddings,
// attention probabilities and sub-layer outputs (training mode only). Weights are initialised as
// HF does: Linear and Embedding N(0, 0.02²) (padding row zero), biases zero, LayerNorm (1, 0).
#include <memory>
#include <string>

#include "core/rng.h"
#include "models/nn/nn.h"

namespace precis::models {

struct BertConfig {
  int64_t vocab_size = 30522;
  int64_t hidden_size = 256;
  int64_t num_hidden_layers = 4;
  int64_t num_attention_heads = 4;
  int64_t intermediate_size = 1024;
  int64_t max_position_embeddings = 512;
  int64_t type_vocab_size = 2;
  double hidden_dropout_prob = 0.1;
  double attention_probs_dropout_prob = 0.1;
  double layer_norm_eps = 1e-12;
  double initializer_range = 0.02;
  int64_t pad_token_id = 0;
  Generator* generator = nullptr;  ///< initialisation (the default generator when null)

  /// BERT-mini (4 layers, hidden 256, 4 heads, intermediate 1024) over `vocab_size` tokens.
  static BertConfig mini(int64_t vocab_size = 30522);
  /// BERT-mini with the vocabulary size read from a vocab.txt (one token per line, as
  /// data::read_vocab reads it: IOError when the file cannot be read, is not a regular file, is
  /// empty or is malformed).
  static BertConfig mini_from_vocab_file(const std::string& path);
};

/// (B, L) attention mask (bool, true = a real token) from per-sequence lengths (B) i64 / i32:
/// position j of sequence b is kept when j < lengths[b].
Tensor attention_mask_from_lengths(const Tensor& lengths, int64_t seq_len);

class BertEmbeddings : public nn::Module {
 public:
  explicit BertEmbeddings(const BertConfig& config);
  /// input_ids: (B, L) i64; token_type_ids: (B, L) or undefined (all 0) → (B, L, hidden).
  Tensor forward(const Tensor& input_ids, const Tensor& token_type_ids);
  Tensor forward(const Tensor& input_ids) override { return forward(input_ids, Tensor()); }
  std::string type_name() const override { return "BertEmbeddings"; }

  nn::Child<nn::Embedding> word_embeddings, position_embeddings, token_type_embeddings;
  nn::Child<nn::LayerNorm> LayerNorm;  // NOLINT: HF's name
  nn::Child<nn::Dropout> dropout;
};

class BertSelfAttention : public nn::Module {
 public:
  explicit BertSelfAttention(const BertConfig& config);
  /// x: (B, L, hidden); mask: bool broadcastable to (B, heads, L, L), true = attend, or undefined.
  Tensor forward(const Tensor& x, const Tensor& mask);
  std::string type_name() const override { return "BertSelfAttention"; }

  nn::Child<nn::Linear> query, key, value;

 private:
  int64_t heads_;
  double dropout_p_;
};

/// dense → dropout → LayerNorm(· + residual): BertSelfOutput and BertOutput.
class BertResidualOutput : public nn::Module {
 public:
  BertResidualOutput(int64_t in, const BertConfig& config, std::string name);
  Tensor forward(const Tensor& h, const Tensor& residual);
  std::string type_name() const override { return name_; }

  nn::Child<nn::Linear> dense;
  nn::Child<nn::LayerNorm> LayerNorm;  // NOLINT: HF's name
  nn::Child<nn::Dropout> dropout;

 private:
  std::string name_;
};

class BertAttention : public nn::Module {
 public:
  explicit BertAttention(const BertConfig& config);
  Tensor forward(const Tensor& x, const Tensor& mask);
  std::string type_name() const override { return "BertAttention"; }

  nn::Child<BertSelfAttention> self;
  nn::Child<BertResidualOutput> output;
};

/// One post-LN encoder layer: attention, then dense → GELU → dense with the residual LayerNorm.
class BertLayer : public nn::Module {
 public:
  explicit BertLayer(const BertConfig& config);
  /// x: (B, L, hidden); mask as BertSelfAttention.
  Tensor forward(const Tensor& x, const Tensor& mask);
  std::string type_name() const override { return "BertLayer"; }

  nn::Child<BertAttention> attention;
  nn::Child<nn::Linear> intermediate_dense;  ///< registered as "intermediate.dense"
  nn::Child<BertResidualOutput> output;
};

class BertModel : public nn::Module {
 public:
  explicit BertModel(const BertConfig& config, bool add_pooling_layer = true);
  /// input_ids: (B, L) i64. attention_mask: (B, L) (bool or integer, nonzero = a real token) or
  /// undefined (attend everywhere). token_type_ids: (B, L) or undefined. Returns the sequence
  /// output (B, L, hidden).
  Tensor forward(const Tensor& input_ids, const Tensor& attention_mask, const Tensor& token_type_ids = Tensor());
  Tensor forward(const Tensor& input_ids) override { return forward(input_ids, Tensor()); }
  /// tanh(dense(sequence_output[:, 0])): (B, hidden). Needs the pooling layer.
  Tensor pool(const Tensor& sequence_output);
  std::string type_name() const override { return "BertModel"; }
  const BertConfig& config() const { return config_; }

  nn::Child<BertEmbeddings> embeddings;
  std::vector<nn::Child<BertLayer>> layers;  ///< "encoder.layer.<i>"
  nn::Child<nn::Linear> pooler_dense;        ///< "pooler.dense"; empty without the pooling layer

 private:
  BertConfig config_;
};

class BertForMaskedLM : public nn::Module {
 public:
  explicit BertForMaskedLM(const BertConfig& config);
  /// Logits over the vocabulary: (B, L, vocab_size).
  Tensor forward(const Tensor& input_ids, const Tensor& attention_mask, const Tensor& token_type_ids = Tensor());
  Tensor forward(const Tensor& input_ids) override { return forward(input_ids, Tensor()); }
  /// Mean cross-entropy over the positions whose label is not -100. logits (B, L, V), labels (B, L).
  static Tensor loss(const Tensor& logits, const Tensor& labels);
  std::string type_name() const override { return "BertForMaskedLM"; }

  nn::Child<BertModel> bert;
  nn::Child<nn::Linear> transform_dense;      ///< "cls.predictions.transform.dense"
  nn::Child<nn::LayerNorm> transform_norm;    ///< "cls.predictions.transform.LayerNorm"
  /// "cls.predictions.decoder": weight tied to bert.embeddings.word_embeddings.weight, bias tied to
  /// "cls.predictions.bias" (as HF); the tying survives to(), clone() and load_state_dict().
  nn::Child<nn::Linear> decoder;
};

class BertForSequenceClassification : public nn::Module {
 public:
  BertForSequenceClassification(const BertConfig& config, int64_t num_labels);
  /// Logits (B, num_labels) from the pooled [CLS] output.
  Tensor forward(const Tensor& input_ids, const Tensor& attention_mask, const Tensor& token_type_ids = Tensor());
  Tensor forward(const Tensor& input_ids) override { return forward(input_ids, Tensor()); }
  std::string type_name() const override { return "BertForSequenceClassification"; }

  nn::Child<BertModel> bert;
  nn::Child<nn::Dropout> dropout;
  nn::Child<nn::Linear> classifier;
};

/// HF's _init_weights over every Linear, Embedding and LayerNorm of `module`.
void bert_init_weights(nn::Module& module, double initializer_range, Generator* gen);

}  // namespace precis::models
