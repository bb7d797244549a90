#pragma once
// Masked-language-model inputs, as BERT and Hugging Face's DataCollatorForLanguageModeling make
// them: each non-special token is chosen with probability 15%; a chosen token becomes [MASK] with
// probability 80%, a uniformly random vocabulary id with 10%, and stays itself with 10%. Labels
// are the original id at chosen positions and -100 (ignored by cross_entropy) elsewhere.
#include <cstdint>
#include <memory>
#include <vector>

#include "data/dataset.h"
#include "data/text/wordpiece.h"

namespace precis::data {

inline constexpr int64_t kIgnoreIndex = -100;

/// The masking rates; the defaults are BERT's (Hugging Face's mlm_probability = 0.15 and its
/// 80/10/10 split). MlmMasker checks each is in [0, 1] and that the last two sum to at most 1.
struct MlmOptions {
  double mask_probability = 0.15;    ///< share of non-special tokens chosen
  double replace_with_mask = 0.8;    ///< of the chosen: → [MASK]
  double replace_with_random = 0.1;  ///< of the chosen: → a random id (the rest stay unchanged)
};

/// One masked sequence; both vectors have the input's length.
struct MaskedTokens {
  std::vector<int64_t> input_ids;  ///< the ids with the chosen positions replaced (or kept)
  std::vector<int64_t> labels;     ///< the original id at chosen positions, kIgnoreIndex elsewhere
};

/// Applies BERT's masking (see the file comment) to id sequences. Immutable after construction, so
/// loader workers may share one; all randomness comes from the caller's SampleRng.
class MlmMasker {
 public:
  /// special_ids are never chosen (pad, cls, sep, …); random replacements are drawn from
  /// [0, vocab_size), special ids included, as Hugging Face does.
  MlmMasker(int64_t vocab_size, int64_t mask_id, std::vector<int64_t> special_ids, MlmOptions options = {});
  /// The tokenizer's vocabulary size, [MASK] and its special tokens.
  explicit MlmMasker(const WordPieceTokenizer& tokenizer, MlmOptions options = {});

  /// Masks one sequence. Draws two uniforms per non-special token (chosen?, then what to do) and
  /// one integer per random replacement, in order, from `rng`.
  MaskedTokens mask(const std::vector<int64_t>& ids, SampleRng& rng) const;
  /// The same for a tensor of i64 ids of any shape (row-major order): {input_ids, labels}.
  std::pair<Tensor, Tensor> mask(const Tensor& ids, SampleRng& rng) const;

 private:
  int64_t vocab_size_;
  int64_t mask_id_;
  std::vector<int64_t> special_ids_;  // sorted
  MlmOptions options_;
};

/// Token sequences for masked-LM training. Example = {input_ids (L,) i64, labels (L,) i64}:
/// sample() masks with the example's random stream (a fresh masking every epoch); get() returns
/// the unmasked ids with labels all -100. Batch it with pad_collate({pad_id, kIgnoreIndex}).
class MlmDataset : public Dataset {
 public:
  /// Takes the id sequences (each non-empty, ValueError otherwise) and the masker sample() uses.
  MlmDataset(std::vector<std::vector<int64_t>> sequences, MlmMasker masker);
  /// Encodes every line ([CLS] … [SEP], truncated to max_length ids) and skips lines that encode
  /// to nothing but special tokens.
  static std::shared_ptr<MlmDataset> from_lines(const WordPieceTokenizer& tokenizer,
                                                const std::vector<std::string>& lines, int64_t max_length,
                                                MlmOptions options = {});
  int64_t size() const override { return static_cast<int64_t>(sequences_.size()); }
  Example get(int64_t index) const override;
  Example sample(int64_t index, SampleRng& rng) const override;
  /// Sequence lengths, for token_budget_batches.
  std::vector<int64_t> lengths() const;
  /// The unmasked ids of sequence `index` (IndexError out of range); aliases the dataset's copy.
  const std::vector<int64_t>& sequence(int64_t index) const;

 private:
  std::vector<std::vector<int64_t>> sequences_;
  MlmMasker masker_;
};

}  // namespace precis::data
