#include "data/dataset.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/error.h"
#include "tensor/factory.h"

namespace precis::data {

void check_index(const char* who, int64_t index, int64_t dataset_size) {
  PRECIS_CHECK_INDEX(index >= 0 && index < dataset_size, who, ": index ", index, " is out of range for a dataset of ",
                     dataset_size, " examples");
}

Example byte_image_example(const uint8_t* pixels, Shape shape, uint8_t label) {
  Tensor image = empty(std::move(shape), {.dtype = DType::f32});
  std::transform(pixels, pixels + image.numel(), image.data_ptr<float>(),
                 [](uint8_t b) { return static_cast<float>(b) / 255.0f; });
  return Example{image, scalar_tensor(static_cast<int64_t>(label), {.dtype = DType::i64})};
}

TensorDataset::TensorDataset(std::vector<Tensor> tensors) : tensors_(std::move(tensors)) {
  PRECIS_CHECK(!tensors_.empty(), "TensorDataset: needs at least one tensor");
  for (const Tensor& t : tensors_) {
    PRECIS_CHECK_SHAPE(t.defined() && t.dim() >= 1, "TensorDataset: every tensor needs a dim 0 to index, got ",
                       t.defined() ? t.describe() : std::string("an undefined tensor"));
    PRECIS_CHECK_SHAPE(t.size(0) == tensors_[0].size(0), "TensorDataset: tensors differ in size(0): ",
                       tensors_[0].describe(), " vs ", t.describe());
  }
  size_ = tensors_[0].size(0);
}

Example TensorDataset::get(int64_t index) const {
  check_index("TensorDataset::get", index, size_);
  Example ex;
  ex.tensors.reserve(tensors_.size());
  for (const Tensor& t : tensors_) ex.tensors.push_back(t.select(0, index).clone());
  return ex;
}

Subset::Subset(std::shared_ptr<const Dataset> dataset, std::vector<int64_t> indices)
    : dataset_(std::move(dataset)), indices_(std::move(indices)) {
  PRECIS_CHECK(dataset_ != nullptr, "Subset: the dataset is null");
  const int64_t n = dataset_->size();
  for (int64_t i : indices_) check_index("Subset", i, n);
}

Example Subset::get(int64_t index) const {
  check_index("Subset::get", index, size());
  return dataset_->get(indices_[static_cast<size_t>(index)]);
}

Example Subset::sample(int64_t index, SampleRng& rng) const {
  check_index("Subset::sample", index, size());
  return dataset_->sample(indices_[static_cast<size_t>(index)], rng);
}

namespace {
// Stream id of random_split's permutation (the loader's reserved ids are the two largest).
constexpr uint64_t kRandomSplitStream = ~uint64_t{0} - 2;
}  // namespace

std::vector<std::shared_ptr<Subset>> random_split(std::shared_ptr<const Dataset> dataset,
                                                  const std::vector<double>& lengths, uint64_t seed) {
  PRECIS_CHECK(dataset != nullptr, "random_split: the dataset is null");
  PRECIS_CHECK(!lengths.empty(), "random_split: no lengths given");
  const int64_t n = dataset->size();
  double total = 0;
  for (double l : lengths) {
    PRECIS_CHECK(std::isfinite(l) && l >= 0, "random_split: every length must be finite and >= 0, got ", l);
    total += l;
  }
  std::vector<int64_t> counts(lengths.size());
  if (std::abs(total - 1.0) <= 1e-9 && total <= 1.0) {
    // Fractions: floor each, then hand out the remainder round-robin from the first subset.
    int64_t assigned = 0;
    for (size_t i = 0; i < lengths.size(); ++i) {
      counts[i] = static_cast<int64_t>(std::floor(lengths[i] * static_cast<double>(n)));
      assigned += counts[i];
    }
    for (int64_t r = 0; r < n - assigned; ++r) counts[static_cast<size_t>(r) % counts.size()] += 1;
  } else {
    for (size_t i = 0; i < lengths.size(); ++i) {
      PRECIS_CHECK(lengths[i] == std::floor(lengths[i]), "random_split: lengths must be whole example counts (or "
                   "fractions summing to 1), got ", lengths[i]);
      counts[i] = static_cast<int64_t>(lengths[i]);
    }
    const int64_t sum = std::accumulate(counts.begin(), counts.end(), int64_t{0});
    PRECIS_CHECK(sum == n, "random_split: the lengths sum to ", sum, " but the dataset has ", n,
                 " examples (give counts that sum to it, or fractions that sum to 1)");
  }
  SampleRng rng(seed, kRandomSplitStream, 0);
  const std::vector<int64_t> perm = random_permutation(n, rng);
  std::vector<std::shared_ptr<Subset>> out;
  size_t offset = 0;
  for (int64_t c : counts) {
    const auto first = perm.begin() + static_cast<std::ptrdiff_t>(offset);
    out.push_back(std::make_shared<Subset>(dataset, std::vector<int64_t>(first, first + c)));
    offset += static_cast<size_t>(c);
  }
  return out;
}

}  // namespace precis::data
