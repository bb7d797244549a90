#pragma once
// Datasets: random access to examples, each a short list of tensors (image and label, token ids
// and labels, ...). Implementations must allow get() from several threads at once (the loader's
// workers call it concurrently): keep them read-only after construction.
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <vector>

#include "data/sample_rng.h"
#include "tensor/tensor.h"

namespace precis::data {

/// One example: its tensors in a fixed order the dataset documents (e.g. {image, label}).
struct Example {
  std::vector<Tensor> tensors;  ///< the fields, in the dataset's order

  Example() = default;
  /// Example{image, label}.
  Example(std::initializer_list<Tensor> ts) : tensors(ts) {}
  /// From a list of fields.
  explicit Example(std::vector<Tensor> ts) : tensors(std::move(ts)) {}
  /// Field i (std::out_of_range past the end).
  Tensor& operator[](size_t i) { return tensors.at(i); }
  /// Field i (std::out_of_range past the end).
  const Tensor& operator[](size_t i) const { return tensors.at(i); }
  size_t size() const { return tensors.size(); }  ///< the number of fields
};

/// A batch the loader yields: the collated tensors plus where they came from.
struct Batch {
  std::vector<Tensor> tensors;   ///< collated fields, e.g. {images (B, C, H, W), labels (B,)}
  std::vector<int64_t> indices;  ///< dataset indices of the examples, in batch order
  int64_t epoch = 0;             ///< the epoch the batch belongs to
  int64_t index = 0;             ///< position of this batch within its epoch

  /// Collated field i (std::out_of_range past the end).
  Tensor& operator[](size_t i) { return tensors.at(i); }
  /// Collated field i (std::out_of_range past the end).
  const Tensor& operator[](size_t i) const { return tensors.at(i); }
  size_t size() const { return tensors.size(); }  ///< the number of fields
};

/// Random-access dataset. size() and get() must be thread-safe (const and read-only).
class Dataset {
 public:
  virtual ~Dataset() = default;
  /// Number of examples.
  virtual int64_t size() const = 0;
  /// Example `index` (0 <= index < size()), without randomness.
  virtual Example get(int64_t index) const = 0;
  /// Example `index` drawn with the sample's own random stream (augmentation, masking). The
  /// loader calls this one; the default ignores `rng` and returns get(index).
  virtual Example sample(int64_t index, SampleRng& rng) const { return get(index); }
};

/// Examples are slices along dim 0 of the given tensors (all with the same size(0)); each
/// example holds contiguous copies, so a batch never aliases the source tensors.
class TensorDataset : public Dataset {
 public:
  /// At least one tensor, each with dim >= 1 and the same size(0) (ValueError / ShapeError
  /// otherwise). Keeps references to the tensors, not copies: do not modify them while loading.
  explicit TensorDataset(std::vector<Tensor> tensors);
  int64_t size() const override { return size_; }
  Example get(int64_t index) const override;

 private:
  std::vector<Tensor> tensors_;
  int64_t size_ = 0;
};

/// The examples of `dataset` at `indices`, in that order (torch.utils.data.Subset): example i is
/// dataset->get(indices[i]) (sample() likewise, with the subset's stream for i). Indices may repeat;
/// each must lie in [0, dataset->size()) (IndexError at construction otherwise).
class Subset : public Dataset {
 public:
  /// Shares `dataset` (non-null, ValueError otherwise); checks every index.
  Subset(std::shared_ptr<const Dataset> dataset, std::vector<int64_t> indices);
  int64_t size() const override { return static_cast<int64_t>(indices_.size()); }
  Example get(int64_t index) const override;
  Example sample(int64_t index, SampleRng& rng) const override;
  const std::vector<int64_t>& indices() const { return indices_; }  ///< into dataset(), in order
  const std::shared_ptr<const Dataset>& dataset() const { return dataset_; }  ///< the underlying dataset

 private:
  std::shared_ptr<const Dataset> dataset_;
  std::vector<int64_t> indices_;
};

/// torch.utils.data.random_split: a seeded random permutation of the dataset cut into
/// non-overlapping Subsets. `lengths` are example counts summing to dataset->size(), or
/// fractions summing to 1 (each gets floor(fraction · size) examples, and the remainder goes one
/// by one to the first subsets, as PyTorch). The permutation is a pure function of `seed` (Philox,
/// the same on every machine), not PyTorch's: the same seed gives other splits than torch's.
///   auto parts = data::random_split(train, {0.9, 0.1}, /*seed=*/42);  // parts[0]: 90%, parts[1]: 10%
std::vector<std::shared_ptr<Subset>> random_split(std::shared_ptr<const Dataset> dataset,
                                                  const std::vector<double>& lengths, uint64_t seed = 0);

/// Checks 0 <= index < dataset_size, throwing IndexError naming `who`.
void check_index(const char* who, int64_t index, int64_t dataset_size);

/// An image dataset's example: the 8-bit pixels at `pixels` (shape's element count of them) as an
/// f32 tensor of `shape` scaled to [0, 1], and the class label as a 0-d i64 tensor.
Example byte_image_example(const uint8_t* pixels, Shape shape, uint8_t label);

}  // namespace precis::data
