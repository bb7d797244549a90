#pragma once
// cat as copies: the CatKernel of every backend. Each input goes into its slab of out (a strided
// alias) through the device's own copy kernel, so a backend with a fast copy has a fast cat.
#include <cstdint>
#include <vector>

#include "tensor/tensor.h"

namespace precis::kernels {

/// out: the concatenation's result, preallocated; inputs: already checked to match out along every
/// dim but `dim`, on out's device and dtype. Empty inputs are skipped.
void cat_by_copy(const Tensor& out, const std::vector<Tensor>& inputs, int64_t dim);

}  // namespace precis::kernels
