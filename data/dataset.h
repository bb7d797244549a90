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
  std::vector<Tensor> tensors;

  Example() = default;
  Example(std::initializer_list<Tensor> ts) : tensors(ts) {}
  explicit Example(std::vector<Tensor> ts) : tensors(std::move(ts)) {}
  Tensor& operator[](size_t i) { return tensors.at(i); }
  const Tensor& operator[](size_t i) const { return tensors.at(i); }
  size_t size() const { return tensors.size(); }
};

/// A batch the loader yields: the collated tensors plus where they came from.
struct Batch {
  std::vector<Tensor> tensors;   ///< collated fields, e.g. {images (B, C, H, W), labels (B,)}
  std::vector<int64_t> indices;  ///< dataset indices of the examples, in batch order
  int64_t epoch = 0;
  int64_t index = 0;             ///< position of this batch within its epoch

  Tensor& operator[](size_t i) { return tensors.at(i); }
  const Tensor& operator[](size_t i) const { return tensors.at(i); }
  size_t size() const { return tensors.size(); }
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
  explicit TensorDataset(std::vector<Tensor> tensors);
  int64_t size() const override { return size_; }
  Example get(int64_t index) const override;

 private:
  std::vector<Tensor> tensors_;
  int64_t size_ = 0;
};

/// Checks 0 <= index < dataset_size, throwing IndexError naming `who`.
void check_index(const char* who, int64_t index, int64_t dataset_size);

}  // namespace precis::data
