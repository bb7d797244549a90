#include "data/text/mlm.h"

#include <algorithm>

#include "core/error.h"
#include "tensor/factory.h"

namespace precis::data {

MlmMasker::MlmMasker(int64_t vocab_size, int64_t mask_id, std::vector<int64_t> special_ids, MlmOptions options)
    : vocab_size_(vocab_size), mask_id_(mask_id), special_ids_(std::move(special_ids)), options_(options) {
  PRECIS_CHECK(vocab_size_ >= 1 && mask_id_ >= 0 && mask_id_ < vocab_size_, "MlmMasker: mask id ", mask_id_,
               " outside a vocabulary of ", vocab_size_);
  PRECIS_CHECK(options_.mask_probability >= 0 && options_.mask_probability <= 1 && options_.replace_with_mask >= 0 &&
                   options_.replace_with_random >= 0 && options_.replace_with_mask + options_.replace_with_random <= 1,
               "MlmMasker: probabilities out of range (mask_probability ", options_.mask_probability,
               ", replace_with_mask ", options_.replace_with_mask, ", replace_with_random ",
               options_.replace_with_random, "; the last two must sum to at most 1)");
  std::sort(special_ids_.begin(), special_ids_.end());
}

MlmMasker::MlmMasker(const WordPieceTokenizer& t, MlmOptions options)
    : MlmMasker(t.vocab_size(), t.mask_id(), {t.pad_id(), t.unk_id(), t.cls_id(), t.sep_id(), t.mask_id()}, options) {}

MaskedTokens MlmMasker::mask(const std::vector<int64_t>& ids, SampleRng& rng) const {
  MaskedTokens out{ids, std::vector<int64_t>(ids.size(), kIgnoreIndex)};
  for (size_t i = 0; i < ids.size(); ++i) {
    if (std::binary_search(special_ids_.begin(), special_ids_.end(), ids[i])) continue;
    if (rng.uniform() >= options_.mask_probability) continue;
    out.labels[i] = ids[i];
    const double what = rng.uniform();
    if (what < options_.replace_with_mask) out.input_ids[i] = mask_id_;
    else if (what < options_.replace_with_mask + options_.replace_with_random) out.input_ids[i] = rng.randint(vocab_size_);
  }
  return out;
}

std::pair<Tensor, Tensor> MlmMasker::mask(const Tensor& ids, SampleRng& rng) const {
  PRECIS_CHECK_DTYPE(ids.dtype() == DType::i64, "MlmMasker::mask: ids must be i64, got ", ids.describe());
  PRECIS_CHECK_DEVICE(ids.device().is_cpu(), "MlmMasker::mask: ids must be on the CPU, got ", ids.describe());
  MaskedTokens m = mask(ids.to_vector<int64_t>(), rng);
  return {from_vector(m.input_ids, ids.sizes()), from_vector(m.labels, ids.sizes())};
}

MlmDataset::MlmDataset(std::vector<std::vector<int64_t>> sequences, MlmMasker masker)
    : sequences_(std::move(sequences)), masker_(std::move(masker)) {
  for (size_t i = 0; i < sequences_.size(); ++i)
    PRECIS_CHECK(!sequences_[i].empty(), "MlmDataset: sequence ", i, " is empty");
}

std::shared_ptr<MlmDataset> MlmDataset::from_lines(const WordPieceTokenizer& tokenizer,
                                                   const std::vector<std::string>& lines, int64_t max_length,
                                                   MlmOptions options) {
  std::vector<std::vector<int64_t>> seqs;
  seqs.reserve(lines.size());
  for (const std::string& line : lines) {
    Encoding e = tokenizer.encode(line, {.truncate_to = max_length});
    if (e.ids.size() > 2) seqs.push_back(std::move(e.ids));
  }
  return std::make_shared<MlmDataset>(std::move(seqs), MlmMasker(tokenizer, options));
}

const std::vector<int64_t>& MlmDataset::sequence(int64_t index) const {
  check_index("MlmDataset", index, size());
  return sequences_[static_cast<size_t>(index)];
}

Example MlmDataset::get(int64_t index) const {
  const auto& s = sequence(index);
  return Example{from_vector(s), full({static_cast<int64_t>(s.size())}, kIgnoreIndex, {.dtype = DType::i64})};
}

Example MlmDataset::sample(int64_t index, SampleRng& rng) const {
  MaskedTokens m = masker_.mask(sequence(index), rng);
  return Example{from_vector(m.input_ids), from_vector(m.labels)};
}

std::vector<int64_t> MlmDataset::lengths() const {
  std::vector<int64_t> out;
  out.reserve(sequences_.size());
  for (const auto& s : sequences_) out.push_back(static_cast<int64_t>(s.size()));
  return out;
}

}  // namespace precis::data
