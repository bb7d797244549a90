#pragma once
// The small BERT the GPU-path tests step (CUDA graphs, host-sync counts): one layer, hidden 32,
// vocabulary 60, sequences up to 16, with `dropout` as both the hidden and the attention dropout.
#include "models/bert.h"

namespace precis::testing {

inline models::BertConfig tiny_bert_config(double dropout = 0.0) {
  models::BertConfig cfg;
  cfg.vocab_size = 60;
  cfg.hidden_size = 32;
  cfg.num_hidden_layers = 1;
  cfg.num_attention_heads = 2;
  cfg.intermediate_size = 64;
  cfg.max_position_embeddings = 16;
  cfg.hidden_dropout_prob = dropout;
  cfg.attention_probs_dropout_prob = dropout;
  return cfg;
}

}  // namespace precis::testing
