#include "models/nn/embedding.h"

#include "autograd/grad_mode.h"
#include "models/nn/init.h"
#include "ops/functional.h"
#include "tensor/factory.h"

namespace precis::nn {

Embedding::Embedding(int64_t num_embeddings, int64_t embedding_dim, Options options)
    : num_embeddings_(num_embeddings), embedding_dim_(embedding_dim) {
  PRECIS_CHECK(num_embeddings > 0 && embedding_dim > 0, "nn::Embedding: sizes must be positive, got ", num_embeddings,
               " x ", embedding_dim);
  if (options.padding_idx) {
    const int64_t p = *options.padding_idx;
    PRECIS_CHECK_INDEX(p >= -num_embeddings && p < num_embeddings, "nn::Embedding: padding_idx ", p,
                       " is outside [-", num_embeddings, ", ", num_embeddings, ")");
    padding_idx_ = p < 0 ? p + num_embeddings : p;
  }
  weight = empty({num_embeddings, embedding_dim});
  reset_parameters(options.generator);
  register_parameter("weight", weight);
}

void Embedding::reset_parameters(Generator* gen) {
  init::normal_(weight, 0.0, 1.0, gen);
  if (padding_idx_ >= 0) {
    NoGradGuard no_grad;
    weight.detach().select(0, padding_idx_).zero_();
  }
}

Tensor Embedding::forward(const Tensor& indices) {
  return embedding(indices, weight, padding_idx_ >= 0 ? std::optional<int64_t>(padding_idx_) : std::nullopt);
}

std::string Embedding::extra_repr() const {
  std::string s = std::to_string(num_embeddings_) + ", " + std::to_string(embedding_dim_);
  if (padding_idx_ >= 0) s += ", padding_idx=" + std::to_string(padding_idx_);
  return s;
}

}  // namespace precis::nn
