#include "data/dataset.h"

#include "core/error.h"

namespace precis::data {

void check_index(const char* who, int64_t index, int64_t dataset_size) {
  PRECIS_CHECK_INDEX(index >= 0 && index < dataset_size, who, ": index ", index, " is out of range for a dataset of ",
                     dataset_size, " examples");
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

}  // namespace precis::data
