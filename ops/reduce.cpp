// Reductions: sum, sum_to, mean, var, max, each declared once for the op front-end
// (ops/frontend.h). Kernels in ops/cpu/reduce.cpp and ops/cuda/.
#include <algorithm>

#include "ops/frontend.h"
#include "ops/functional.h"
#include "ops/contracts/kernels.h"
#include "ops/op_table.h"
#include "tensor/factory.h"

namespace precis {

using autograd::SavedTensor;
using autograd::TensorList;

using detail::Domain;
using detail::OpContext;

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

// A reduction's output before finish_shape: the kernels write the keepdim shape.
Tensor empty_keepdim(const Tensor& x, const Shape& keep_shape, DType dtype) {
  return empty(keep_shape, {.dtype = dtype, .device = x.device()});
}

// Sum and mean: one kernel slot (ReduceKernel), the gradient spread evenly (mean: divided by the
// count). A 0-d input reduces nothing: the result is the value itself.
struct SumOrMeanSaved {
  Shape keep_shape, x_shape;
  double divisor = 1.0;
};

template <OpId Id>
struct SumOrMean {
  static constexpr OpId id = Id;
  static constexpr Domain domain = Id == OpId::mean ? Domain::floating : Domain::any;
  using Saved = SumOrMeanSaved;
  static Tensor forward(OpContext<Saved>& ctx, const std::array<Tensor, 1>& in, const std::vector<int64_t>& dims,
                        bool keepdim) {
    const Tensor& x = in[0];
    const std::vector<int64_t> rd = reduce_dims(x, dims, op_name(id));
    // sum of integers (and bools) counts in i64, as PyTorch's.
    const DType out_dtype = is_floating(x.dtype()) ? x.dtype() : DType::i64;
    Shape keep_shape = keepdim_shape(x, rd);
    Tensor out = empty_keepdim(x, keep_shape, out_dtype);
    if (rd.empty()) {
      kernel<kernels::CopyKernel>(OpId::copy, x.device().type, out_dtype)(out, x);
    } else {
      kernel<kernels::ReduceKernel>(id, x.device().type, x.dtype())(out, x, rd);
    }
    if (ctx.grad) {
      const double n = static_cast<double>(x.numel() / std::max<int64_t>(out.numel(), 1));
      ctx.saved = {std::move(keep_shape), x.sizes(), id == OpId::mean ? n : 1.0};
    }
    return finish_shape(out, x, rd, keepdim);
  }
  static TensorList backward(const Saved& s, const TensorList& g) {
    const Tensor spread = id == OpId::mean ? div(g[0], s.divisor) : g[0];
    return {expand_grad(spread, s.keep_shape, s.x_shape)};
  }
};

struct Var {
  static constexpr OpId id = OpId::var;
  static constexpr Domain domain = Domain::floating;
  struct Saved {
    SavedTensor x;
    std::vector<int64_t> dims;
    Shape keep_shape;
    double scale = 0.0;
  };
  static Tensor forward(OpContext<Saved>& ctx, const std::array<Tensor, 1>& in, const std::vector<int64_t>& dims,
                        int64_t correction, bool keepdim) {
    const Tensor& x = in[0];
    const std::vector<int64_t> rd = reduce_dims(x, dims, "var");
    const Shape keep_shape = keepdim_shape(x, rd);
    Tensor out = empty_keepdim(x, keep_shape, x.dtype());
    // A 0-d tensor reduces over nothing: N = 1, handled by the kernel as a 1-element reduction.
    const Tensor xr = rd.empty() ? detail::make_alias(x, {1}, {1}, x.storage_offset()) : x;
    const std::vector<int64_t> kd = rd.empty() ? std::vector<int64_t>{0} : rd;
    kernel<kernels::VarKernel>(id, x.device().type, x.dtype())(rd.empty() ? out.view({1}) : out, xr, kd, correction);
    if (ctx.grad) {
      const int64_t n = x.numel() / std::max<int64_t>(out.numel(), 1);
      // d var / dx = 2 (x - mean) / (N - correction); N - correction <= 0 gives inf/NaN as forward
      // does. In double, as the kernel does: n - correction overflows int64 for a correction near
      // its minimum.
      ctx.saved = {SavedTensor(x), rd, keep_shape, 2.0 / (static_cast<double>(n) - static_cast<double>(correction))};
    }
    return finish_shape(out, x, rd, keepdim);
  }
  static TensorList backward(const Saved& s, const TensorList& g) {
    const Tensor xv = s.x.unpack("var");
    const Tensor centred = s.dims.empty() ? sub(xv, xv) : sub(xv, mean(xv, s.dims, true));
    return {mul(mul(centred, expand_grad(g[0], s.keep_shape, xv.sizes())), s.scale)};
  }
};

// max over one dim: values and the index each came from. The gradient goes to that index
// (scatter_add into zeros); a 0-d input is its own maximum, at index 0 (as PyTorch).
struct MaxDim {
  static constexpr OpId id = OpId::max;
  static constexpr Domain domain = Domain::any;
  struct Saved {
    SavedTensor indices;  // undefined for a 0-d input: the gradient is the incoming one
    int64_t dim = 0;
    Shape keep_shape, x_shape;
  };
  static std::tuple<Tensor, Tensor> forward(OpContext<Saved>& ctx, const std::array<Tensor, 1>& in, int64_t dim,
                                            bool keepdim) {
    const Tensor& x = in[0];
    const int64_t d = detail::wrap_dim(dim, x.dim(), "max", x);
    if (x.dim() == 0) return {x.detach().clone(), zeros({}, {.dtype = DType::i64, .device = x.device()})};
    PRECIS_CHECK(x.sizes()[d] > 0, "max: max of an empty tensor: dim ", d, " of a tensor ", x.describe(),
                 " has size 0, so there is no maximum to take");
    const std::vector<int64_t> rd{d};
    Shape keep_shape = keepdim_shape(x, rd);
    Tensor values = empty_keepdim(x, keep_shape, x.dtype());
    Tensor indices = empty_keepdim(x, keep_shape, DType::i64);
    kernel<kernels::MaxDimKernel>(id, x.device().type, x.dtype())(values, indices, x, d);
    if (ctx.grad) ctx.saved = {SavedTensor(indices), d, std::move(keep_shape), x.sizes()};
    return {finish_shape(values, x, rd, keepdim), finish_shape(indices, x, rd, keepdim)};
  }
  static TensorList backward(const Saved& s, const TensorList& g) {
    if (!s.indices.defined()) return {g[0]};
    const Tensor gk = g[0].reshape(s.keep_shape);
    return {scatter_add(zeros(s.x_shape, {.dtype = gk.dtype(), .device = gk.device()}), s.dim,
                        s.indices.unpack("max"), gk)};
  }
};

// max of every element. As PyTorch's max(): the gradient is shared evenly by every element equal
// to the maximum.
struct MaxAll {
  static constexpr OpId id = OpId::max;
  static constexpr Domain domain = Domain::any;
  struct Saved {
    SavedTensor x, max;
  };
  static Tensor forward(OpContext<Saved>& ctx, const std::array<Tensor, 1>& in) {
    const Tensor& x = in[0];
    PRECIS_CHECK(x.numel() > 0, "max: max of an empty tensor ", x.describe(),
                 " is undefined; pass a dim to reduce a non-empty dim, or check the input");
    const Tensor flat = x.detach().reshape({x.numel()});
    Tensor values = empty({1}, {.dtype = x.dtype(), .device = x.device()});
    Tensor indices = empty({1}, {.dtype = DType::i64, .device = x.device()});
    kernel<kernels::MaxDimKernel>(id, x.device().type, x.dtype())(values, indices, flat, 0);
    Tensor v = detail::make_alias(values, {}, {}, 0);
    if (ctx.grad) ctx.saved = {SavedTensor(x), SavedTensor(v)};
    return v;
  }
  static TensorList backward(const Saved& s, const TensorList& g) {
    const Tensor mask = eq(s.x.unpack("max"), s.max.unpack("max")).to(g[0].dtype());
    return {mul(mask, div(g[0], sum(mask)))};
  }
};

}  // namespace

Tensor sum(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  return detail::call<SumOrMean<OpId::sum>>({x}, dims, keepdim);
}

Tensor mean(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  return detail::call<SumOrMean<OpId::mean>>({x}, dims, keepdim);
}

Tensor var(const Tensor& x, const std::vector<int64_t>& dims, int64_t correction, bool keepdim) {
  return detail::call<Var>({x}, dims, correction, keepdim);
}

std::tuple<Tensor, Tensor> max(const Tensor& x, int64_t dim, bool keepdim) {
  return detail::call<MaxDim>({x}, dim, keepdim);
}

Tensor max(const Tensor& x) { return detail::call<MaxAll>({x}); }

// sum over the dims x was broadcast along: a composite of sum and reshape (no front-end of its
// own: it records nothing itself).
Tensor sum_to(const Tensor& x, const Shape& shape) {
  PRECIS_CHECK(x.defined(), "sum_to: the input tensor is undefined");
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
