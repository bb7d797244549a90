#include "models/bert.h"

#include <cmath>

#include "autograd/grad_mode.h"
#include "data/text/wordpiece.h"
#include "ops/functional.h"
#include "tensor/factory.h"

namespace precis::models {

namespace {

// A parameter-free module that only groups children under a name, for HF's nesting
// ("encoder.layer", "intermediate.dense", "cls.predictions.transform").
class Group : public nn::Module {
 public:
  explicit Group(std::string type) : type_(std::move(type)) {}
  std::string type_name() const override { return type_; }

 private:
  std::string type_;
};

// The label of positions the masked-LM loss ignores (PyTorch's and HF's -100).
constexpr int64_t kMlmIgnoreIndex = -100;

nn::Linear dense(int64_t in, int64_t out, const BertConfig& c) { return nn::Linear(in, out, {.generator = c.generator}); }

// (B, L) attention mask → bool (B, 1, 1, L), true = attend.
Tensor key_mask(const Tensor& attention_mask, const Tensor& input_ids) {
  if (!attention_mask.defined()) return Tensor();
  PRECIS_CHECK_SHAPE(attention_mask.sizes() == input_ids.sizes(), "BertModel: attention_mask ",
                     attention_mask.describe(), " must have input_ids' shape ", input_ids.describe());
  Tensor keep = attention_mask.dtype() == DType::boolean ? attention_mask : ne(attention_mask, 0);
  return keep.view({attention_mask.size(0), 1, 1, attention_mask.size(1)});
}

}  // namespace

BertConfig BertConfig::mini(int64_t vocab_size) {
  BertConfig c;
  c.vocab_size = vocab_size;
  return c;
}

BertConfig BertConfig::mini_from_vocab_file(const std::string& path) {
  // The tokenizer's reader, so the size is the tokenizer's count, and a directory or a device
  // given as the file is refused by name (an ifstream "opens" a directory and reads 0 lines).
  return mini(static_cast<int64_t>(data::read_vocab(path).size()));
}

Tensor attention_mask_from_lengths(const Tensor& lengths, int64_t seq_len) {
  PRECIS_CHECK_SHAPE(lengths.dim() == 1, "attention_mask_from_lengths: lengths ", lengths.describe(), " must be 1-D");
  Tensor positions = arange(static_cast<double>(seq_len), {.dtype = DType::i64, .device = lengths.device()});
  return lt(positions.unsqueeze(0), lengths.to(DType::i64).unsqueeze(1));
}

// ---- embeddings ---------------------------------------------------------------------------------

BertEmbeddings::BertEmbeddings(const BertConfig& c)
    : word_embeddings(add("word_embeddings", nn::Embedding(c.vocab_size, c.hidden_size,
                                                           {.padding_idx = c.pad_token_id, .generator = c.generator}))),
      position_embeddings(add("position_embeddings",
                              nn::Embedding(c.max_position_embeddings, c.hidden_size, {.generator = c.generator}))),
      token_type_embeddings(add("token_type_embeddings",
                                nn::Embedding(c.type_vocab_size, c.hidden_size, {.generator = c.generator}))),
      LayerNorm(add("LayerNorm", nn::LayerNorm(c.hidden_size, {.eps = c.layer_norm_eps}))),
      dropout(add("dropout", nn::Dropout(c.hidden_dropout_prob))),
      position_ids(arange(static_cast<double>(c.max_position_embeddings), {.dtype = DType::i64})) {
  register_buffer("position_ids", position_ids, /*persistent=*/false);
}

Tensor BertEmbeddings::forward(const Tensor& input_ids, const Tensor& token_type_ids) {
  PRECIS_CHECK_SHAPE(input_ids.dim() == 2, "BertEmbeddings: input_ids ", input_ids.describe(), " must be (B, L)");
  const int64_t len = input_ids.size(1);
  PRECIS_CHECK_SHAPE(len <= position_embeddings->num_embeddings(), "BertEmbeddings: sequence length ", len,
                     " exceeds max_position_embeddings ", position_embeddings->num_embeddings());
  PRECIS_CHECK_DEVICE(position_ids.device() == input_ids.device(), "BertEmbeddings: input_ids ",
                      input_ids.describe(), " are on another device than the model (", position_ids.device().str(),
                      "); move the model with to(device) or the batch with .to(", position_ids.device().str(), ")");
  const Tensor positions = position_ids.narrow(0, 0, len);
  Tensor types = token_type_ids.defined() ? token_type_ids
                                          : zeros(input_ids.sizes(), {.dtype = DType::i64, .device = input_ids.device()});
  Tensor e = word_embeddings(input_ids) + token_type_embeddings(types) + position_embeddings(positions);
  return dropout(LayerNorm(e));
}

// ---- encoder layer ------------------------------------------------------------------------------

BertSelfAttention::BertSelfAttention(const BertConfig& c)
    : query(add("query", dense(c.hidden_size, c.hidden_size, c))),
      key(add("key", dense(c.hidden_size, c.hidden_size, c))),
      value(add("value", dense(c.hidden_size, c.hidden_size, c))),
      heads_(c.num_attention_heads),
      dropout_p_(c.attention_probs_dropout_prob) {
  PRECIS_CHECK(c.hidden_size % c.num_attention_heads == 0, "BertSelfAttention: hidden_size ", c.hidden_size,
               " is not a multiple of num_attention_heads ", c.num_attention_heads);
}

Tensor BertSelfAttention::forward(const Tensor& x, const Tensor& mask) {
  PRECIS_CHECK_SHAPE(x.dim() == 3 && x.size(2) == query->in_features(), "BertSelfAttention: input ", x.describe(),
                     " must be (B, L, ", query->in_features(), ")");
  const int64_t b = x.size(0), l = x.size(1), hidden = x.size(2), d = hidden / heads_;
  auto split = [&](const Tensor& t) { return t.view({b, l, heads_, d}).transpose(1, 2); };  // (B, H, L, D)
  // One statement each: the region's linear calls are then q, k, v in that order (0, 1, 2), which
  // BertModel::selective_keep_policy counts on; as arguments of one call their order would be the
  // compiler's.
  const Tensor q = split(query(x));
  const Tensor k = split(key(x));
  const Tensor v = split(value(x));
  Tensor ctx = scaled_dot_product_attention(q, k, v, mask, is_training() ? dropout_p_ : 0.0);
  return ctx.transpose(1, 2).reshape({b, l, hidden});
}

BertResidualOutput::BertResidualOutput(int64_t in, const BertConfig& c, std::string name)
    : dense(add("dense", models::dense(in, c.hidden_size, c))),
      LayerNorm(add("LayerNorm", nn::LayerNorm(c.hidden_size, {.eps = c.layer_norm_eps}))),
      dropout(add("dropout", nn::Dropout(c.hidden_dropout_prob))),
      name_(std::move(name)) {}

Tensor BertResidualOutput::forward(const Tensor& h, const Tensor& residual) {
  // dropout(dense(h)) + residual as one pass each way (dense's bias is in its GEMM already).
  return LayerNorm(dropout_add(dense(h), residual, dropout->p(), dropout->is_training(), dropout->generator()));
}

BertAttention::BertAttention(const BertConfig& c)
    : self(add("self", BertSelfAttention(c))),
      output(add("output", BertResidualOutput(c.hidden_size, c, "BertSelfOutput"))) {}

Tensor BertAttention::forward(const Tensor& x, const Tensor& mask) { return output->forward(self->forward(x, mask), x); }

BertLayer::BertLayer(const BertConfig& c) : attention(add("attention", BertAttention(c))) {
  auto inter = add("intermediate", Group("BertIntermediate"));
  intermediate_dense = inter->add("dense", dense(c.hidden_size, c.intermediate_size, c));
  output = add("output", BertResidualOutput(c.intermediate_size, c, "BertOutput"));
}

Tensor BertLayer::forward(const Tensor& x, const Tensor& mask) {
  Tensor a = attention->forward(x, mask);
  // gelu(intermediate_dense(a)) with the GELU in the GEMM's epilogue pass (unfused when the layer
  // runs its GEMMs in fp8).
  const Tensor h = intermediate_dense->runs_fp8() ? gelu(intermediate_dense(a))
                                                  : linear_gelu(a, intermediate_dense->weight, intermediate_dense->bias);
  return output->forward(h, a);
}

// ---- whole model --------------------------------------------------------------------------------

BertModel::BertModel(const BertConfig& c, bool add_pooling_layer) : config_(c) {
  PRECIS_CHECK(c.num_hidden_layers >= 0, "BertModel: num_hidden_layers is ", c.num_hidden_layers,
               "; it must be 0 or more (BERT-mini has 4)");
  config_.generator = nullptr;  // used during construction only
  embeddings = add("embeddings", BertEmbeddings(c));
  auto encoder = add("encoder", Group("BertEncoder"));
  auto list = encoder->add("layer", nn::ModuleList());
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) layers.push_back(list->push_back(BertLayer(c)));
  if (add_pooling_layer) {
    auto pooler = add("pooler", Group("BertPooler"));
    pooler_dense = pooler->add("dense", dense(c.hidden_size, c.hidden_size, c));
  }
  bert_init_weights(*this, c.initializer_range, c.generator);
}

Tensor BertModel::forward(const Tensor& input_ids, const Tensor& attention_mask, const Tensor& token_type_ids) {
  const Tensor mask = key_mask(attention_mask, input_ids);
  Tensor h = embeddings->forward(input_ids, token_type_ids);
  autograd::CheckpointOptions options = checkpointing_;
  if (options.mode == autograd::CheckpointMode::selective && !options.keep &&
      options.kept_ops == autograd::default_selective_kept_ops())
    options.keep = selective_keep_policy(input_ids.size(1), config_.hidden_size);
  for (auto& layer : layers) {
    h = autograd::checkpoint(
        options, [l = layer.ptr()](const Tensor& x, const Tensor& m) { return l->forward(x, m); }, h, mask);
  }
  return h;
}

KeepPolicy BertModel::selective_keep_policy(int64_t seq_len, int64_t hidden_size) {
  // The value projection is recomputed: its output is read only by the context product and by
  // the backward, and its GEMM (2·B·L·hidden²) is among the layer's cheapest. The context
  // (softmax·v, the size of v) is read by the backward too: kept when recomputing it, a
  // 2·B·L²·hidden batched matmul, costs more than v's GEMM (L > hidden), recomputed otherwise.
  // Linear calls in a layer: 0-2 q, k, v, 3 the attention output, 4 the feed-forward output;
  // matmul calls: 0 the scores q·kᵀ (never kept: (B, heads, L, L)), 1 the context. The score
  // pass's dropout mask (attention_softmax; one bit per score) is kept: applying it again costs a
  // pass over the scores, drawing it again a Philox block per four scores besides.
  const bool keep_context = seq_len > hidden_size;
  return [keep_context](const KeepCandidate& c) {
    return c.op == OpId::linear_gelu || c.op == OpId::attention_softmax || (c.op == OpId::linear && c.index != 2) ||
           (keep_context && c.op == OpId::matmul && c.index == 1);
  };
}

Tensor BertModel::pool(const Tensor& sequence_output) {
  PRECIS_CHECK(static_cast<bool>(pooler_dense), "BertModel::pool: the model was built without the pooling layer");
  return tanh(pooler_dense(sequence_output.select(1, 0)));
}

BertForMaskedLM::BertForMaskedLM(const BertConfig& c) : bert(add("bert", BertModel(c, /*add_pooling_layer=*/false))) {
  auto cls = add("cls", Group("BertOnlyMLMHead"));
  auto predictions = cls->add("predictions", Group("BertLMPredictionHead"));
  auto transform = predictions->add("transform", Group("BertPredictionHeadTransform"));
  transform_dense = transform->add("dense", dense(c.hidden_size, c.hidden_size, c));
  transform_norm = transform->add("LayerNorm", nn::LayerNorm(c.hidden_size, {.eps = c.layer_norm_eps}));
  Tensor& bias = predictions->register_parameter("bias", zeros({c.vocab_size}));
  decoder = predictions->add("decoder", nn::Linear(c.hidden_size, c.vocab_size, {.generator = c.generator}));
  decoder->weight = bert->embeddings->word_embeddings->weight;
  decoder->bias = bias;  // zeros, as HF
  bert_init_weights(*transform, c.initializer_range, c.generator);
}

Tensor BertForMaskedLM::transform(const Tensor& hidden) {
  return transform_norm(transform_dense->runs_fp8() ? gelu(transform_dense(hidden))
                                                    : linear_gelu(hidden, transform_dense->weight, transform_dense->bias));
}

Tensor BertForMaskedLM::head(const Tensor& hidden) { return decoder(transform(hidden)); }

Tensor BertForMaskedLM::forward(const Tensor& input_ids, const Tensor& attention_mask, const Tensor& token_type_ids) {
  return head(bert->forward(input_ids, attention_mask, token_type_ids));
}

MaskedLMOutput BertForMaskedLM::forward_with_labels(const Tensor& input_ids, const Tensor& attention_mask,
                                                    const Tensor& labels, const MaskedLMOptions& options) {
  PRECIS_CHECK(input_ids.defined() && labels.defined(),
               "BertForMaskedLM::forward_with_labels: input_ids and labels must be defined");
  PRECIS_CHECK_SHAPE(labels.sizes() == input_ids.sizes(), "BertForMaskedLM::forward_with_labels: labels ",
                     labels.describe(), " must have input_ids' shape ", input_ids.describe(),
                     " (-100 where no token is predicted)");
  PRECIS_CHECK_DTYPE(labels.dtype() == DType::i64, "BertForMaskedLM::forward_with_labels: labels ", labels.describe(),
                     " must be i64 token ids (-100 where no token is predicted); convert with labels.to(DType::i64)");
  Tensor h = bert->forward(input_ids, attention_mask, options.token_type_ids);
  const Device device = h.device();
  MaskedLMOutput out;
  out.labels = upload(labels, device);
  if (options.masked_positions_only) {
    // The labelled positions of the flattened (B·L) tokens, found on the host.
    const Tensor host = labels.device().is_cpu() ? labels : labels.to(Device::cpu());
    std::vector<int64_t> positions;
    const std::vector<int64_t> values = host.contiguous().to_vector<int64_t>();
    for (size_t i = 0; i < values.size(); ++i)
      if (values[i] != kMlmIgnoreIndex) positions.push_back(static_cast<int64_t>(i));
    const Tensor index = upload(from_vector<int64_t>(positions), device);
    h = index_select(h.reshape({-1, h.size(2)}), 0, index);
    out.labels = index_select(out.labels.reshape({-1}), 0, index);
  }
  if (!options.return_logits) {
    const Tensor t = transform(h);
    out.loss = linear_cross_entropy(t.reshape({-1, t.size(t.dim() - 1)}), decoder->weight, decoder->bias,
                                    out.labels.reshape({-1}), {.ignore_index = kMlmIgnoreIndex});
    return out;
  }
  out.logits = head(h);
  const int64_t vocab = out.logits.size(out.logits.dim() - 1);
  out.loss = cross_entropy(out.logits.reshape({-1, vocab}), out.labels.reshape({-1}), Tensor(), kMlmIgnoreIndex);
  return out;
}

Tensor BertForMaskedLM::loss(const Tensor& logits, const Tensor& labels) {
  PRECIS_CHECK_SHAPE(logits.dim() == 3 && labels.dim() == 2 && logits.size(0) == labels.size(0) &&
                         logits.size(1) == labels.size(1),
                     "BertForMaskedLM::loss: logits ", logits.describe(), " must be (B, L, V) and labels ",
                     labels.describe(), " (B, L)");
  return cross_entropy(logits.reshape({-1, logits.size(2)}), labels.reshape({-1}), Tensor(), kMlmIgnoreIndex);
}

BertForSequenceClassification::BertForSequenceClassification(const BertConfig& c, int64_t num_labels)
    : bert(add("bert", BertModel(c))),
      dropout(add("dropout", nn::Dropout(c.hidden_dropout_prob))),
      classifier(add("classifier", dense(c.hidden_size, num_labels, c))) {
  bert_init_weights(*classifier, c.initializer_range, c.generator);
}

Tensor BertForSequenceClassification::forward(const Tensor& input_ids, const Tensor& attention_mask,
                                              const Tensor& token_type_ids) {
  Tensor h = bert->forward(input_ids, attention_mask, token_type_ids);
  return classifier(dropout(bert->pool(h)));
}

void bert_init_weights(nn::Module& module, double range, Generator* gen) {
  for (auto& [name, m] : module.named_modules()) {
    if (auto* l = dynamic_cast<nn::Linear*>(m)) {
      nn::init::normal_(l->weight, 0.0, range, gen);
      if (l->bias.defined()) nn::init::zeros_(l->bias);
    } else if (auto* e = dynamic_cast<nn::Embedding*>(m)) {
      nn::init::normal_(e->weight, 0.0, range, gen);
      if (e->padding_idx() >= 0) {
        NoGradGuard no_grad;
        e->weight.detach().select(0, e->padding_idx()).zero_();
      }
    } else if (auto* n = dynamic_cast<nn::LayerNorm*>(m)) {
      n->reset_parameters();
    }
  }
}

}  // namespace precis::models
