#pragma once
// nn::Embedding: a lookup table of num_embeddings vectors (torch.nn.Embedding).
#include <optional>

#include "core/rng.h"
#include "models/nn/module.h"

namespace precis::nn {

/// Options of nn::Embedding, with torch.nn.Embedding's defaults (max_norm, sparse and
/// scale_grad_by_freq are not supported).
struct EmbeddingOptions {
  /// A row whose gradient stays zero and which is initialised to zeros (the padding token);
  /// negative values count from the end, as PyTorch.
  std::optional<int64_t> padding_idx = std::nullopt;
  Generator* generator = nullptr;  ///< for reset_parameters (the default generator when null)
};

/// torch.nn.Embedding: row i of `weight` is the vector of index i; IndexError for an index outside
/// [0, num_embeddings).
class Embedding : public Module {
 public:
  using Options = EmbeddingOptions;  ///< The options struct, as `nn::Embedding::Options{.padding_idx = 0}`.
  /// weight: (num_embeddings, embedding_dim), N(0, 1) with the padding row zeroed.
  Embedding(int64_t num_embeddings, int64_t embedding_dim, Options options = {});

  /// indices: any shape, i64 or i32 → (..., embedding_dim) in weight's dtype. Passthrough.
  Tensor forward(const Tensor& indices) override;
  /// Redraws weight from N(0, 1) (gen, or the default generator when null) and zeroes the padding
  /// row, as torch.nn.Embedding.reset_parameters.
  void reset_parameters(Generator* gen = nullptr);
  std::string type_name() const override { return "Embedding"; }
  std::string extra_repr() const override;

  int64_t num_embeddings() const { return num_embeddings_; }  ///< Rows of the table (valid indices).
  int64_t embedding_dim() const { return embedding_dim_; }    ///< Length of each vector.
  /// The padding row in [0, num_embeddings), or -1.
  int64_t padding_idx() const { return padding_idx_; }

  Tensor weight;  ///< "weight"

 private:
  int64_t num_embeddings_;
  int64_t embedding_dim_;
  int64_t padding_idx_ = -1;
};

}  // namespace precis::nn
