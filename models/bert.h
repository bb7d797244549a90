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

#include "autograd/checkpoint.h"
#include "core/rng.h"
#include "models/nn/nn.h"

namespace precis::models {

/// The model's sizes and hyper-parameters, with the names and meaning of Hugging Face's BertConfig.
/// The defaults are BERT-mini's (HF's defaults are BERT-base's: hidden 768, 12 layers, 12 heads,
/// intermediate 3072). The config is read at construction only.
struct BertConfig {
  int64_t vocab_size = 30522;  ///< rows of word_embeddings; the MLM head's outputs
  int64_t hidden_size = 256;   ///< width of every token vector; a multiple of num_attention_heads
  int64_t num_hidden_layers = 4;  ///< encoder layers (BertLayer)
  int64_t num_attention_heads = 4;  ///< heads per self-attention, of hidden_size / heads features each
  int64_t intermediate_size = 1024;  ///< width of the feed-forward block (intermediate.dense)
  int64_t max_position_embeddings = 512;  ///< the longest sequence: rows of position_embeddings
  int64_t type_vocab_size = 2;  ///< token types (segments A/B): rows of token_type_embeddings
  /// Dropout after the embeddings, on each sub-layer's output and on the classifier's input.
  double hidden_dropout_prob = 0.1;
  double attention_probs_dropout_prob = 0.1;  ///< dropout on the attention probabilities
  double layer_norm_eps = 1e-12;  ///< eps of every LayerNorm
  double initializer_range = 0.02;  ///< std of the N(0, std²) initialisation of Linear and Embedding weights
  /// padding_idx of word_embeddings: that row starts at zero and its gradient stays zero.
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

/// HF's BertEmbeddings: the sum of word, position (0..L-1) and token-type embeddings, then
/// LayerNorm and dropout.
class BertEmbeddings : public nn::Module {
 public:
  /// Tables of vocab_size, max_position_embeddings and type_vocab_size rows of hidden_size,
  /// initialised N(0, 1) here (BertModel re-initialises them).
  explicit BertEmbeddings(const BertConfig& config);
  /// input_ids: (B, L) i64; token_type_ids: (B, L) or undefined (all 0) → (B, L, hidden).
  Tensor forward(const Tensor& input_ids, const Tensor& token_type_ids);
  Tensor forward(const Tensor& input_ids) override { return forward(input_ids, Tensor()); }
  std::string type_name() const override { return "BertEmbeddings"; }

  /// (vocab_size, hidden); the padding row is pad_token_id. BertForMaskedLM ties its decoder to it.
  nn::Child<nn::Embedding> word_embeddings;
  nn::Child<nn::Embedding> position_embeddings;    ///< (max_position_embeddings, hidden)
  nn::Child<nn::Embedding> token_type_embeddings;  ///< (type_vocab_size, hidden)
  /// LayerNorm(hidden, layer_norm_eps) over the summed embeddings (HF's capitalised name).
  nn::Child<nn::LayerNorm> LayerNorm;  // NOLINT: HF's name
  nn::Child<nn::Dropout> dropout;  ///< hidden_dropout_prob, after LayerNorm
  /// 0 .. max_position_embeddings - 1 (i64), a non-persistent buffer as HF's: it follows to(),
  /// so a forward on a device makes no host-to-device copy (one a CUDA graph could not replay).
  Tensor position_ids;
};

/// HF's BertSelfAttention: multi-head scaled dot-product attention over separate query, key and
/// value projections (precis::scaled_dot_product_attention), dropout on the probabilities in
/// training. Returns the heads' concatenated context, (B, L, hidden), without an output projection
/// (that is BertAttention's output.dense).
class BertSelfAttention : public nn::Module {
 public:
  /// hidden_size must be a multiple of num_attention_heads (precis::Error otherwise).
  explicit BertSelfAttention(const BertConfig& config);
  /// x: (B, L, hidden); mask: bool broadcastable to (B, heads, L, L), true = attend, or undefined.
  Tensor forward(const Tensor& x, const Tensor& mask);
  std::string type_name() const override { return "BertSelfAttention"; }

  nn::Child<nn::Linear> query;  ///< Linear(hidden, hidden): the queries of all heads
  nn::Child<nn::Linear> key;    ///< Linear(hidden, hidden): the keys of all heads
  nn::Child<nn::Linear> value;  ///< Linear(hidden, hidden): the values of all heads

 private:
  int64_t heads_;
  double dropout_p_;
};

/// dense → dropout → LayerNorm(· + residual): BertSelfOutput and BertOutput.
class BertResidualOutput : public nn::Module {
 public:
  /// dense maps `in` features (hidden_size for BertSelfOutput, intermediate_size for BertOutput)
  /// to hidden_size; `name` is the type_name() shown by str() ("BertSelfOutput", "BertOutput").
  BertResidualOutput(int64_t in, const BertConfig& config, std::string name);
  /// LayerNorm(dropout(dense(h)) + residual), the dropout and the add as one dropout_add. h: (B, L, in),
  /// residual: (B, L, hidden) → (B, L, hidden).
  Tensor forward(const Tensor& h, const Tensor& residual);
  std::string type_name() const override { return name_; }

  nn::Child<nn::Linear> dense;  ///< Linear(in, hidden)
  /// LayerNorm(hidden, layer_norm_eps) over the dropped-out dense output plus the residual.
  nn::Child<nn::LayerNorm> LayerNorm;  // NOLINT: HF's name
  nn::Child<nn::Dropout> dropout;  ///< hidden_dropout_prob, on dense's output

 private:
  std::string name_;
};

/// HF's BertAttention: self-attention, then its output block (dense, dropout, residual LayerNorm).
class BertAttention : public nn::Module {
 public:
  /// Children "self" and "output" (BertSelfOutput), as HF.
  explicit BertAttention(const BertConfig& config);
  /// output(self(x, mask), x). x: (B, L, hidden) → (B, L, hidden); mask as BertSelfAttention.
  Tensor forward(const Tensor& x, const Tensor& mask);
  std::string type_name() const override { return "BertAttention"; }

  nn::Child<BertSelfAttention> self;  ///< the attention proper (query, key, value)
  nn::Child<BertResidualOutput> output;  ///< BertSelfOutput: dense(hidden → hidden), dropout, LayerNorm with x
};

/// One post-LN encoder layer: attention, then dense → GELU → dense with the residual LayerNorm.
class BertLayer : public nn::Module {
 public:
  /// Children "attention", "intermediate.dense" and "output" (BertOutput), as HF.
  explicit BertLayer(const BertConfig& config);
  /// x: (B, L, hidden); mask as BertSelfAttention.
  Tensor forward(const Tensor& x, const Tensor& mask);
  std::string type_name() const override { return "BertLayer"; }

  nn::Child<BertAttention> attention;  ///< self-attention with its residual LayerNorm
  nn::Child<nn::Linear> intermediate_dense;  ///< registered as "intermediate.dense"
  /// BertOutput: dense(intermediate → hidden), dropout, LayerNorm with the attention's output.
  nn::Child<BertResidualOutput> output;
};

/// HF's BertModel: embeddings, num_hidden_layers BertLayers and the optional pooler. Parameters are
/// f32 on the CPU (use to()), initialised as HF (see the file comment) from config.generator.
class BertModel : public nn::Module {
 public:
  /// add_pooling_layer: build pooler.dense, needed by pool() (BertForMaskedLM goes without, as HF).
  explicit BertModel(const BertConfig& config, bool add_pooling_layer = true);
  /// input_ids: (B, L) i64. attention_mask: (B, L) (bool or integer, nonzero = a real token) or
  /// undefined (attend everywhere). token_type_ids: (B, L) or undefined. Returns the sequence
  /// output (B, L, hidden).
  Tensor forward(const Tensor& input_ids, const Tensor& attention_mask, const Tensor& token_type_ids = Tensor());
  Tensor forward(const Tensor& input_ids) override { return forward(input_ids, Tensor()); }
  /// tanh(dense(sequence_output[:, 0])): (B, hidden). Needs the pooling layer.
  Tensor pool(const Tensor& sequence_output);
  std::string type_name() const override { return "BertModel"; }
  /// The config the model was built with (generator reset to null); a reference into this model.
  const BertConfig& config() const { return config_; }
  /// Activation checkpointing of the encoder layers (autograd/checkpoint.h): with mode full or
  /// selective each BertLayer is a region whose activations are recomputed in backward. Default:
  /// none. Selective with the default kept_ops and no keep policy runs selective_keep_policy;
  /// set kept_ops or keep to choose otherwise.
  void set_checkpointing(const autograd::CheckpointOptions& options) { checkpointing_ = options; }
  /// The keep policy of a selective encoder layer at sequence length seq_len: the outputs of the
  /// query, key and attention-output projections and of the feed-forward GEMMs are kept; the value
  /// projection, the attention core (scores, softmax, dropout), norms and activations are
  /// recomputed, and the attention context (softmax·v) too unless seq_len > hidden_size, where
  /// its 2·B·L²·hidden matmul costs more than v's 2·B·L·hidden² GEMM and it is kept. The
  /// attention dropout's mask is kept (one bit per score), so the recomputation draws no Philox.
  static KeepPolicy selective_keep_policy(int64_t seq_len, int64_t hidden_size);
  /// The encoder layers' checkpointing options.
  const autograd::CheckpointOptions& checkpointing() const { return checkpointing_; }

  nn::Child<BertEmbeddings> embeddings;  ///< "embeddings": word, position and token-type embeddings
  std::vector<nn::Child<BertLayer>> layers;  ///< "encoder.layer.<i>"
  nn::Child<nn::Linear> pooler_dense;        ///< "pooler.dense"; empty without the pooling layer

 private:
  BertConfig config_;
  autograd::CheckpointOptions checkpointing_{.mode = autograd::CheckpointMode::none};
};

/// What BertForMaskedLM::forward_with_labels returns: HF's MaskedLMOutput (loss, logits) and the
/// labels that line up with the logits' rows.
struct MaskedLMOutput {
  /// 0-d mean cross-entropy over the positions whose label is not -100 (NaN when there are none,
  /// as cross_entropy's mean of nothing); f32 under autocast and for an f32 model.
  Tensor loss;
  /// (B, L, vocab_size); with masked_positions_only (N, vocab_size): one row per labelled
  /// position, in row-major (b, l) order. Undefined with return_logits = false.
  Tensor logits;
  /// The labels of logits' rows, on the model's device: (B, L), or (N) with masked_positions_only.
  Tensor labels;
};

/// Options of BertForMaskedLM::forward_with_labels (designated initialisers: {.masked_positions_only = true}).
struct MaskedLMOptions {
  Tensor token_type_ids = Tensor();  ///< (B, L), or undefined (all 0)
  /// Run the prediction head (transform, decoder to the vocabulary, loss) only at the positions
  /// whose label is not -100, gathered from the flattened (B·L, hidden) encoder output, as NVIDIA's
  /// BERT pre-training does. The loss and every gradient are the full head's (ignored positions
  /// add nothing to either), up to rounding; with 15 % of the tokens masked the head — about 70 %
  /// of BERT-mini's FLOPs at vocabulary 30522 — costs 15 % as much. The positions are read from
  /// the labels on the host (labels on a GPU are copied back: one wait for the device).
  bool masked_positions_only = false;
  /// false: the decoder and its loss run as one linear_cross_entropy (ops/functional.h), which
  /// never holds the (rows, vocab_size) logits — at vocabulary 30522 and 2048 rows that is 125 MB
  /// in bf16 and four passes over it — and the output's logits are left undefined. The loss and
  /// the gradients are the same up to rounding.
  bool return_logits = true;
};

/// HF's BertForMaskedLM: BertModel (no pooler) and the masked-language-model head, dense → GELU →
/// LayerNorm → decoder to vocabulary logits.
class BertForMaskedLM : public nn::Module {
 public:
  /// The decoder's weight is bert.embeddings.word_embeddings.weight (tied); its bias starts at zero.
  explicit BertForMaskedLM(const BertConfig& config);
  /// Logits over the vocabulary: (B, L, vocab_size).
  Tensor forward(const Tensor& input_ids, const Tensor& attention_mask, const Tensor& token_type_ids = Tensor());
  Tensor forward(const Tensor& input_ids) override { return forward(input_ids, Tensor()); }
  /// Mean cross-entropy over the positions whose label is not -100. logits (B, L, V), labels (B, L).
  static Tensor loss(const Tensor& logits, const Tensor& labels);
  /// HF's forward(input_ids, attention_mask, ..., labels=labels): the logits and their mean
  /// masked-LM loss in one call. labels: (B, L) i64, a token id per predicted position and -100
  /// elsewhere, on the host or the model's device. With options.masked_positions_only the head runs
  /// at the labelled positions only (MaskedLMOptions); the loss is the same.
  MaskedLMOutput forward_with_labels(const Tensor& input_ids, const Tensor& attention_mask, const Tensor& labels,
                                     const MaskedLMOptions& options = {});
  std::string type_name() const override { return "BertForMaskedLM"; }

  nn::Child<BertModel> bert;  ///< "bert": the encoder, without the pooling layer
  nn::Child<nn::Linear> transform_dense;      ///< "cls.predictions.transform.dense"
  nn::Child<nn::LayerNorm> transform_norm;    ///< "cls.predictions.transform.LayerNorm"
  /// "cls.predictions.decoder": weight tied to bert.embeddings.word_embeddings.weight, bias tied to
  /// "cls.predictions.bias" (as HF); the tying survives to(), clone() and load_state_dict().
  nn::Child<nn::Linear> decoder;

 private:
  // The prediction head on hidden states (..., hidden) → logits (..., vocab_size).
  Tensor head(const Tensor& hidden);
  Tensor transform(const Tensor& hidden);  // dense → GELU → LayerNorm, the head before the decoder
};

/// HF's BertForSequenceClassification: BertModel with its pooler, dropout, and a linear
/// classifier over the pooled [CLS] vector. Train it with cross_entropy on the logits.
class BertForSequenceClassification : public nn::Module {
 public:
  /// num_labels: the classes (positive); classifier initialised N(0, initializer_range²), bias zero.
  BertForSequenceClassification(const BertConfig& config, int64_t num_labels);
  /// Logits (B, num_labels) from the pooled [CLS] output.
  Tensor forward(const Tensor& input_ids, const Tensor& attention_mask, const Tensor& token_type_ids = Tensor());
  Tensor forward(const Tensor& input_ids) override { return forward(input_ids, Tensor()); }
  std::string type_name() const override { return "BertForSequenceClassification"; }

  nn::Child<BertModel> bert;  ///< "bert": the encoder with its pooling layer
  nn::Child<nn::Dropout> dropout;  ///< hidden_dropout_prob, on the pooled output
  nn::Child<nn::Linear> classifier;  ///< Linear(hidden, num_labels)
};

/// HF's _init_weights over every Linear, Embedding and LayerNorm of `module`.
void bert_init_weights(nn::Module& module, double initializer_range, Generator* gen);

}  // namespace precis::models
