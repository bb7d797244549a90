// Differentiable views: each shares storage with its input (tensor/ makes the alias) and records
// a backward that maps the gradient of the view back to the input's shape.
#include <algorithm>
#include <numeric>

#include "autograd/record.h"
#include "core/checked_math.h"
#include "ops/detail/scalar_check.h"
#include "ops/functional.h"
#include "tensor/factory.h"

namespace precis {

using autograd::TensorList;
using detail::wrap_dim;

namespace {

// Resolves one -1 in `sizes` against numel.
Shape infer_size(const Shape& sizes, int64_t numel, const char* op, const Tensor& x) {
  Shape out = sizes;
  int64_t known = 1;
  int infer = -1;
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i] == -1) {
      PRECIS_CHECK_SHAPE(infer < 0, op, ": only one dimension can be -1, got ", shape_str(sizes));
      infer = static_cast<int>(i);
    } else {
      PRECIS_CHECK_SHAPE(out[i] >= 0, op, ": invalid size ", out[i], " in ", shape_str(sizes));
      // Sizes are the caller's: their product may overflow, and no tensor has that many elements.
      const std::optional<int64_t> k = checked_mul(known, out[i]);
      PRECIS_CHECK_SHAPE(k.has_value(), op, ": shape ", shape_str(sizes), " is invalid for a tensor ", x.describe(),
                         " (", numel, " elements): the product of its sizes overflows int64");
      known = *k;
    }
  }
  if (infer >= 0) {
    PRECIS_CHECK_SHAPE(known != 0 && numel % known == 0, op, ": shape ", shape_str(sizes),
                       " is invalid for a tensor ", x.describe());
    out[infer] = numel / known;
  } else {
    PRECIS_CHECK_SHAPE(known == numel, op, ": shape ", shape_str(sizes), " is invalid for a tensor ", x.describe(),
                       " (", numel, " elements)");
  }
  return out;
}

// Strides for viewing (sizes, strides) as new_sizes without copying, or empty when impossible.
// Works chunk by chunk: each run of old dims that is contiguous in memory may be re-split freely.
std::optional<Shape> view_strides(const Shape& sizes, const Shape& strides, const Shape& new_sizes) {
  Shape new_strides(new_sizes.size());
  if (new_sizes.empty()) return new_strides;
  if (sizes.empty()) return contiguous_strides(new_sizes);  // one element: any all-ones shape
  int64_t numel = 1;
  for (int64_t s : sizes) numel *= s;
  if (numel == 0) return contiguous_strides(new_sizes);
  int64_t view_d = static_cast<int64_t>(new_sizes.size()) - 1;
  int64_t chunk_base_stride = strides.empty() ? 1 : strides.back();
  int64_t tensor_numel = 1, view_numel = 1;
  for (int64_t d = static_cast<int64_t>(sizes.size()) - 1; d >= 0; --d) {
    tensor_numel *= sizes[d];
    if (d == 0 || (sizes[d - 1] != 1 && strides[d - 1] != tensor_numel * chunk_base_stride)) {
      while (view_d >= 0 && (view_numel < tensor_numel || new_sizes[view_d] == 1)) {
        new_strides[view_d] = view_numel * chunk_base_stride;
        view_numel *= new_sizes[view_d];
        --view_d;
      }
      if (view_numel != tensor_numel) return std::nullopt;
      if (d > 0) {
        chunk_base_stride = strides[d - 1];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  if (view_d != -1) return std::nullopt;
  return new_strides;
}

Tensor record_view(const Tensor& x, Tensor out, OpId op, autograd::FunctionNode::Backward backward) {
  // Marked with or without grad: an in-place write into x under grad mode later makes this view
  // stale whether or not x required grad when it was taken (autograd::rebase_history).
  out.impl()->mark_view();
  if (autograd::needs_grad({&x})) autograd::record(op, {x}, {out}, std::move(backward));
  return out;
}

Tensor reshape_view(const Tensor& x, const Shape& sizes, const char* op, bool allow_copy) {
  const Shape target = infer_size(sizes, x.numel(), op, x);
  auto strides = view_strides(x.sizes(), x.strides(), target);
  if (!strides) {
    PRECIS_CHECK_SHAPE(allow_copy, op, ": cannot view a tensor ", x.describe(), " with strides ",
                       shape_str(x.strides()), " as ", shape_str(target),
                       " without copying; use reshape() or call contiguous() first");
    return reshape_view(x.contiguous(), target, op, false);
  }
  Shape in_sizes = x.sizes();
  return record_view(x, detail::make_alias(x, target, *strides, x.storage_offset()), OpId::view,
                     [in_sizes](const TensorList& g) -> TensorList { return {g[0].reshape(in_sizes)}; });
}

}  // namespace

Tensor Tensor::view(const Shape& sizes) const {
  require_defined("view", *this);
  return reshape_view(*this, sizes, "view", false);
}
Tensor Tensor::reshape(const Shape& sizes) const {
  require_defined("reshape", *this);
  return reshape_view(*this, sizes, "reshape", true);
}

Tensor Tensor::flatten(int64_t start_dim, int64_t end_dim) const {
  require_defined("flatten", *this);
  if (dim() == 0) return reshape({1});
  const int64_t s = wrap_dim(start_dim, dim(), "flatten", *this);
  const int64_t e = wrap_dim(end_dim, dim(), "flatten", *this);
  PRECIS_CHECK(s <= e, "flatten: start_dim (", start_dim, ") must not come after end_dim (", end_dim, ")");
  Shape out(sizes().begin(), sizes().begin() + s);
  // Cannot overflow: every tensor's sizes multiply (zeros counted as ones) to at most INT64_MAX.
  int64_t n = 1;
  for (int64_t d = s; d <= e; ++d) n *= sizes()[d];
  out.push_back(n);
  out.insert(out.end(), sizes().begin() + e + 1, sizes().end());
  return reshape(out);
}

Tensor Tensor::squeeze() const {
  require_defined("squeeze", *this);
  Shape out;
  for (int64_t s : sizes())
    if (s != 1) out.push_back(s);
  return reshape(out);
}

Tensor Tensor::squeeze(int64_t d) const {
  require_defined("squeeze", *this);
  const int64_t w = wrap_dim(d, dim(), "squeeze", *this);
  if (dim() == 0 || sizes()[w] != 1) return *this;
  Shape out = sizes();
  out.erase(out.begin() + w);
  return reshape(out);
}

Tensor Tensor::unsqueeze(int64_t d) const {
  require_defined("unsqueeze", *this);
  const int64_t w = wrap_dim(d, dim() + 1, "unsqueeze", *this);
  Shape out = sizes();
  out.insert(out.begin() + w, 1);
  return reshape(out);
}

Tensor Tensor::permute(const Shape& dims) const {
  require_defined("permute", *this);
  PRECIS_CHECK_SHAPE(static_cast<int64_t>(dims.size()) == dim(), "permute: got ", dims.size(),
                     " dims for a tensor ", describe());
  Shape perm(dims.size()), out_sizes(dims.size()), out_strides(dims.size());
  std::vector<bool> seen(dims.size(), false);
  for (size_t i = 0; i < dims.size(); ++i) {
    perm[i] = wrap_dim(dims[i], dim(), "permute", *this);
    PRECIS_CHECK_SHAPE(!seen[perm[i]], "permute: dim ", perm[i], " repeated in ", shape_str(dims));
    seen[perm[i]] = true;
    out_sizes[i] = sizes()[perm[i]];
    out_strides[i] = strides()[perm[i]];
  }
  Shape inverse(dims.size());
  for (size_t i = 0; i < perm.size(); ++i) inverse[perm[i]] = static_cast<int64_t>(i);
  return record_view(*this, detail::make_alias(*this, out_sizes, out_strides, storage_offset()), OpId::permute,
                     [inverse](const TensorList& g) -> TensorList { return {g[0].permute(inverse)}; });
}

Tensor Tensor::transpose(int64_t dim0, int64_t dim1) const {
  require_defined("transpose", *this);
  if (dim() == 0) return *this;
  Shape perm(dim());
  std::iota(perm.begin(), perm.end(), 0);
  std::swap(perm[wrap_dim(dim0, dim(), "transpose", *this)], perm[wrap_dim(dim1, dim(), "transpose", *this)]);
  return permute(perm);
}

Tensor Tensor::t() const {
  require_defined("t", *this);
  PRECIS_CHECK_SHAPE(dim() <= 2, "t: expects a tensor with at most 2 dims, got ", describe(),
                     "; use transpose(dim0, dim1)");
  return dim() < 2 ? *this : transpose(0, 1);
}

Tensor Tensor::slice(int64_t d, int64_t start, int64_t end, int64_t step) const {
  require_defined("slice", *this);
  PRECIS_CHECK_SHAPE(dim() > 0, "slice: cannot slice a 0-d tensor");
  const int64_t w = wrap_dim(d, dim(), "slice", *this);
  PRECIS_CHECK(step > 0, "slice: step must be positive, got ", step);
  const int64_t n = sizes()[w];
  auto clamp = [n](int64_t i) { return std::clamp<int64_t>(i < 0 ? i + n : i, 0, n); };
  const int64_t s = clamp(start), e = std::max(clamp(end), clamp(start));
  Shape out_sizes = sizes(), out_strides = strides();
  out_sizes[w] = ceil_div(e - s, step);
  // A step larger than the dim leaves at most one element, whose stride is never used: keep the
  // old one rather than multiply by a step that may overflow int64.
  if (out_sizes[w] > 1) {
    const std::optional<int64_t> st = checked_mul(out_strides[w], step);
    PRECIS_INTERNAL_ASSERT(st.has_value(), "slice: stride ", out_strides[w], " x step ", step,
                           " overflows though the result holds ", out_sizes[w], " elements");
    out_strides[w] = *st;
  }
  const int64_t offset = storage_offset() + s * strides()[w];
  Shape in_sizes = sizes();
  DType dt = dtype();
  return record_view(*this, detail::make_alias(*this, out_sizes, out_strides, offset), OpId::slice,
                     [in_sizes, dt, w, s, e, step](const TensorList& g) -> TensorList {
                       Tensor gi = zeros(in_sizes, {.dtype = g[0].dtype(), .device = g[0].device()});
                       gi.slice(w, s, e, step).copy_(g[0]);
                       (void)dt;
                       return {gi};
                     });
}

Tensor Tensor::narrow(int64_t d, int64_t start, int64_t length) const {
  require_defined("narrow", *this);
  PRECIS_CHECK_INDEX(dim() > 0, "narrow: cannot narrow a 0-d tensor ", describe());
  const int64_t w = wrap_dim(d, dim(), "narrow", *this);
  const int64_t n = sizes()[w];
  // As in PyTorch, a negative start counts from the end.
  PRECIS_CHECK_INDEX(start >= -n && start <= n, "narrow: start ", start, " out of range for dim ", w,
                     " of a tensor ", describe());
  if (start < 0) start += n;
  // length <= n - start rather than start + length <= n: the sum may overflow.
  if (length < 0 || length > n - start) [[unlikely]] {
    const std::optional<int64_t> end = checked_add(start, length);
    throw IndexError(detail::str_cat("narrow: range [", start, ", ",
                                     end ? std::to_string(*end) : std::to_string(start) + " + " + std::to_string(length),
                                     ") out of bounds for dim ", w, " of a tensor ", describe()));
  }
  return slice(w, start, start + length);
}

Tensor Tensor::select(int64_t d, int64_t index) const {
  require_defined("select", *this);
  PRECIS_CHECK_INDEX(dim() > 0, "select: cannot select from a 0-d tensor ", describe());
  const int64_t w = wrap_dim(d, dim(), "select", *this);
  const int64_t n = sizes()[w];
  PRECIS_CHECK_INDEX(index >= -n && index < n, "select: index ", index, " out of range for dim ", w,
                     " of a tensor ", describe());
  const int64_t i = index < 0 ? index + n : index;
  return slice(w, i, i + 1).squeeze(w);
}

Tensor Tensor::expand(const Shape& target) const {
  require_defined("expand", *this);
  const int64_t nd = static_cast<int64_t>(target.size());
  PRECIS_CHECK_SHAPE(nd >= dim(), "expand: cannot expand a tensor ", describe(), " to fewer dims ",
                     shape_str(target));
  Shape out_sizes(nd), out_strides(nd);
  for (int64_t i = nd - 1; i >= 0; --i) {
    const int64_t j = i - (nd - dim());
    const int64_t have = j >= 0 ? sizes()[j] : 1;
    const int64_t want = target[i] == -1 ? have : target[i];
    PRECIS_CHECK_SHAPE(j >= 0 || target[i] != -1, "expand: -1 is not allowed for a new leading dim in ",
                       shape_str(target));
    PRECIS_CHECK_SHAPE(have == want || have == 1, "expand: the size of a tensor ", describe(), " (", have,
                       ") must match ", want, " at dim ", i, " or be 1");
    out_sizes[i] = want;
    out_strides[i] = (j >= 0 && have == want) ? strides()[j] : 0;
  }
  if (out_sizes == sizes()) return *this;
  Shape in_sizes = sizes();
  return record_view(*this, detail::make_alias(*this, out_sizes, out_strides, storage_offset()), OpId::expand,
                     [in_sizes](const TensorList& g) -> TensorList { return {sum_to(g[0], in_sizes)}; });
}

Tensor Tensor::contiguous() const {
  require_defined("contiguous", *this);
  return is_contiguous() ? *this : clone();
}

std::vector<Tensor> split(const Tensor& x, int64_t split_size, int64_t d) {
  require_defined("split", x);
  PRECIS_CHECK_INDEX(x.dim() > 0, "split: cannot split a 0-d tensor ", x.describe());
  const int64_t w = wrap_dim(d, x.dim(), "split", x);
  const int64_t n = x.size(w);
  PRECIS_CHECK(split_size > 0 || (split_size == 0 && n == 0), "split: split_size must be > 0 (0 only for an empty ",
               "dim), got ", split_size, " for dim ", w, " of a tensor ", x.describe());
  if (n == 0) return {x.narrow(w, 0, 0)};
  std::vector<Tensor> out;
  out.reserve(static_cast<size_t>((n + split_size - 1) / split_size));
  for (int64_t start = 0; start < n; start += split_size)
    out.push_back(x.narrow(w, start, std::min(split_size, n - start)));
  return out;
}

std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t d) {
  require_defined("chunk", x);
  PRECIS_CHECK(chunks > 0, "chunk: chunks must be > 0, got ", chunks, " for a tensor ", x.describe());
  PRECIS_CHECK_INDEX(x.dim() > 0, "chunk: cannot chunk a 0-d tensor ", x.describe());
  const int64_t n = x.size(wrap_dim(d, x.dim(), "chunk", x));
  return split(x, n == 0 ? 0 : (n + chunks - 1) / chunks, d);
}

}  // namespace precis
