// The layout of an element-wise op's output (declared in ops/detail/broadcast.h). PyTorch allocates an
// element-wise result in the memory order its operands share, so `a.t() + b.t()` or a ReLU of a
// channels-last activation stays in that layout and the loop over it is contiguous everywhere
// (docs/design/foundation.md, "Element-wise output layout").
#include <algorithm>
#include <numeric>
#include <vector>

#include "ops/detail/broadcast.h"

namespace precis {

namespace {

// Whether t covers `shape` element for element: same sizes and no stride 0 along a dim of more
// than one element (a user's expand() is a broadcast too). Only such operands have a say.
bool spans(const Tensor& t, const Shape& shape) {
  if (!t.defined() || t.sizes() != shape) return false;
  for (size_t d = 0; d < shape.size(); ++d)
    if (shape[d] > 1 && t.strides()[d] == 0) return false;
  return true;
}

// t's dims from outermost to innermost in memory (stride descending; ties keep their order).
std::vector<size_t> memory_order(const Tensor& t) {
  std::vector<size_t> order(t.sizes().size());
  std::iota(order.begin(), order.end(), size_t{0});
  const Shape& st = t.strides();
  std::stable_sort(order.begin(), order.end(), [&](size_t i, size_t j) { return st[i] > st[j]; });
  return order;
}

// Whether t, walked in `order`, has no gaps and no overlap (size-1 dims may have any stride).
bool dense_in(const Tensor& t, const std::vector<size_t>& order) {
  int64_t expected = 1;
  for (size_t k = order.size(); k-- > 0;) {
    const size_t d = order[k];
    if (t.sizes()[d] == 1) continue;
    if (t.strides()[d] != expected) return false;
    expected *= t.sizes()[d];
  }
  return true;
}

// Whether t's strides strictly decrease along `order` (over the dims of more than one element).
bool ordered_as(const Tensor& t, const std::vector<size_t>& order) {
  int64_t prev = -1;
  for (size_t d : order) {
    if (t.sizes()[d] == 1) continue;
    const int64_t s = t.strides()[d];
    if (prev >= 0 && s >= prev) return false;
    prev = s;
  }
  return true;
}

}  // namespace

Tensor empty_elementwise(const Shape& shape, DType dtype, Device device, std::initializer_list<const Tensor*> operands,
                         const char* op) {
  const Tensor* lead = nullptr;
  for (const Tensor* t : operands)
    if (spans(*t, shape)) {
      lead = t;
      break;
    }
  if (lead == nullptr || lead->is_contiguous()) return detail::new_contiguous(shape, dtype, device, op);
  const std::vector<size_t> order = memory_order(*lead);
  if (!dense_in(*lead, order)) return detail::new_contiguous(shape, dtype, device, op);
  for (const Tensor* t : operands)
    if (t != lead && spans(*t, shape) && !ordered_as(*t, order)) return detail::new_contiguous(shape, dtype, device, op);
  // A row-major buffer of the permuted shape, seen through the inverse permutation.
  Shape permuted(shape.size());
  for (size_t k = 0; k < order.size(); ++k) permuted[k] = shape[order[k]];
  const Tensor base = detail::new_contiguous(permuted, dtype, device, op);
  Shape strides(shape.size());
  for (size_t k = 0; k < order.size(); ++k) strides[order[k]] = base.strides()[k];
  return detail::make_alias(base, shape, std::move(strides), 0);
}

}  // namespace precis
