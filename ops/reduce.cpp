// Reductions: sum, sum_to, mean, var, max. Forward checks and shapes here, kernels in
// ops/cpu/reduce.cpp (and ops/cuda/), backward formulas recorded with each forward.
#include <algorithm>

#include "autograd/record.h"
#include "ops/functional.h"
#include "ops/kernels.h"
#include "ops/op_table.h"
#include "tensor/factory.h"

namespace precis {

using autograd::SavedTensor;
using autograd::TensorList;

namespace {

// The dims a reduction runs over: wrapped, sorted, unique. An empty list means every dim.
// A 0-d tensor accepts dim 0 / -1 and reduces nothing.
std::vector<int64_t> reduce_dims(const Tensor& x, const std::vector<int64_t>& dims, const char* op) {
  std::vector<int64_t> out;
  if (dims.empty()) {
    for (int64_t d = 0; d < x.dim(); ++d) out.push_back(d);
    return out;
  }
  for (int64_t d : dims) out.push_back(detail::wrap_dim(d, x.dim(), op, x));
  std::sort(out.begin(), out.end());
  PRECIS_CHECK(std::adjacent_find(out.begin(), out.end()) == out.end(), op, ": dim ",
               *std::adjacent_find(out.begin(), out.end()), " appears more than once in the dims list ",
               shape_str(dims), " for a tensor ", x.describe());
  if (x.dim() == 0) out.clear();
  return out;
}

// x's shape with the reduced dims set to 1 (the kernels' output layout).
Shape keepdim_shape(const Tensor& x, const std::vector<int64_t>& dims) {
  Shape s = x.sizes();
  for (int64_t d : dims) s[d] = 1;
  return s;
}

// x's shape without the reduced dims.
Shape squeezed_shape(const Tensor& x, const std::vector<int64_t>& dims) {
  Shape s;
  for (int64_t d = 0; d < x.dim(); ++d)
    if (!std::binary_search(dims.begin(), dims.end(), d)) s.push_back(x.sizes()[d]);
  return s;
}

// The result in the shape the caller asked for: out is freshly made (no grad yet), so this
// reshape records nothing.
Tensor finish_shape(const Tensor& out, const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  return keepdim ? out : detail::make_alias(out, squeezed_shape(x, dims), contiguous_strides(squeezed_shape(x, dims)), 0);
}

// Brings the gradient of a reduction back to x's shape: re-inserts the reduced dims as size 1
// (when keepdim was false), then broadcasts.
Tensor expand_grad(const Tensor& g, const Shape& keep_shape, const Shape& x_shape) {
  return g.reshape(keep_shape).expand(x_shape);
}

}  // namespace

Tensor sum(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  const std::vector<int64_t> rd = reduce_dims(x, dims, "sum");
  const DType out_dtype = is_floating(x.dtype()) ? x.dtype() : DType::i64;
  const Shape keep_shape = keepdim_shape(x, rd);
  Tensor out = empty(keep_shape, {.dtype = out_dtype, .device = x.device()});
  if (rd.empty()) {
    // Nothing to reduce (a 0-d tensor): the sum is the value itself.
    kernel<kernels::CopyKernel>(OpId::copy, x.device().type, out_dtype)(out, x);
  } else {
    kernel<kernels::ReduceKernel>(OpId::sum, x.device().type, x.dtype())(out, x, rd);
  }
  Tensor result = finish_shape(out, x, rd, keepdim);
  if (autograd::needs_grad({&x})) {
    autograd::record(OpId::sum, {x}, {result}, [keep_shape, x_shape = x.sizes()](const TensorList& g) -> TensorList {
      return {expand_grad(g[0], keep_shape, x_shape)};
    });
  }
  return result;
}

Tensor sum_to(const Tensor& x, const Shape& shape) {
  if (x.sizes() == shape) return x;
  const int64_t nd = static_cast<int64_t>(shape.size());
  const int64_t lead = x.dim() - nd;
  auto compatible = [&] {
    if (lead < 0) return false;
    for (int64_t i = 0; i < nd; ++i)
      if (shape[i] != 1 && shape[i] != x.sizes()[lead + i]) return false;
    return true;
  };
  PRECIS_CHECK_SHAPE(compatible(), "sum_to: a tensor ", x.describe(), " cannot be summed to shape ", shape_str(shape),
                     ": the shape must be one x broadcasts from (same trailing sizes, or 1)");
  std::vector<int64_t> dims;
  for (int64_t d = 0; d < lead; ++d) dims.push_back(d);
  for (int64_t i = 0; i < nd; ++i)
    if (shape[i] == 1 && x.sizes()[lead + i] != 1) dims.push_back(lead + i);
  if (dims.empty()) return x.reshape(shape);
  return sum(x, dims, /*keepdim=*/true).reshape(shape);
}

}  // namespace precis
