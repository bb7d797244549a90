#pragma once
// Collate functions: turn the examples of one batch into the batch's tensors. The loader calls
// its collate on a worker thread; a collate must be thread-safe (a pure function is).
#include <functional>
#include <vector>

#include "data/dataset.h"

namespace precis::data {

/// Builds a batch's tensors from its examples (in batch order).
using CollateFn = std::function<std::vector<Tensor>(std::vector<Example>& examples)>;

/// The default collate: field i of the batch stacks field i of every example along a new dim 0
/// (shapes (S...) → (B, S...)). Every example must have the same number of fields, and field i
/// the same shape and dtype in each (ShapeError / DTypeError naming the example otherwise). CPU.
std::vector<Tensor> stack_examples(std::vector<Example>& examples);

/// A collate for variable-length sequences: field i of every example is 1-D (L_e,) with the
/// same dtype; it is right-padded with pad_values[i] to (B, max L_e). When add_attention_mask is
/// true, an i64 (B, max L_e) mask (1 at real tokens, 0 at padding, from field 0's lengths) is
/// appended as the last field. Fields beyond pad_values.size() must be fixed-shape and are
/// stacked as stack_examples does.
CollateFn pad_collate(std::vector<double> pad_values, bool add_attention_mask = true);

}  // namespace precis::data
