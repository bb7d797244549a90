// Reductions: sum, sum_to, mean, var, max. Forward checks and shapes here, kernels in
// ops/cpu/reduce.cpp (and ops/cuda/), backward formulas recorded with each forward.
#include <algorithm>

#include "ops/precision.h"
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

// A floating reduction's operands: the input after the precision hook (checked defined and
// floating), the dims it reduces and its keepdim shape.
struct FloatingReduction {
  Tensor x;
  std::vector<int64_t> dims;
  Shape keep_shape;
};

FloatingReduction prepare_floating(OpId op, const Tensor& x_in, const std::vector<int64_t>& dims) {
  const char* name = op_name(op);
  PRECIS_CHECK(x_in.defined(), name, ": the input tensor is undefined");
  Tensor x = apply_precision(op, x_in)[0];
  PRECIS_CHECK_DTYPE(is_floating(x.dtype()), name, ": expects a floating tensor, got ", x.describe(),
                     "; convert it first, e.g. x.to(DType::f32)");
  std::vector<int64_t> rd = reduce_dims(x, dims, name);
  Shape keep_shape = keepdim_shape(x, rd);
  return {std::move(x), std::move(rd), std::move(keep_shape)};
}

}  // namespace

Tensor sum(const Tensor& x_in, const std::vector<int64_t>& dims, bool keepdim) {
  PRECIS_CHECK(x_in.defined(), "sum: the input tensor is undefined");
  const Tensor x = apply_precision(OpId::sum, x_in)[0];
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

Tensor mean(const Tensor& x_in, const std::vector<int64_t>& dims, bool keepdim) {
  const FloatingReduction r = prepare_floating(OpId::mean, x_in, dims);
  const Tensor& x = r.x;
  const std::vector<int64_t>& rd = r.dims;
  const Shape& keep_shape = r.keep_shape;
  Tensor out = empty(keep_shape, {.dtype = x.dtype(), .device = x.device()});
  if (rd.empty()) {
    kernel<kernels::CopyKernel>(OpId::copy, x.device().type, x.dtype())(out, x);
  } else {
    kernel<kernels::ReduceKernel>(OpId::mean, x.device().type, x.dtype())(out, x, rd);
  }
  Tensor result = finish_shape(out, x, rd, keepdim);
  if (autograd::needs_grad({&x})) {
    const int64_t n = x.numel() / std::max<int64_t>(out.numel(), 1);
    autograd::record(OpId::mean, {x}, {result},
                     [keep_shape, x_shape = x.sizes(), n](const TensorList& g) -> TensorList {
                       return {expand_grad(div(g[0], static_cast<double>(n)), keep_shape, x_shape)};
                     });
  }
  return result;
}

Tensor var(const Tensor& x_in, const std::vector<int64_t>& dims, int64_t correction, bool keepdim) {
  const FloatingReduction r = prepare_floating(OpId::var, x_in, dims);
  const Tensor& x = r.x;
  const std::vector<int64_t>& rd = r.dims;
  const Shape& keep_shape = r.keep_shape;
  Tensor out = empty(keep_shape, {.dtype = x.dtype(), .device = x.device()});
  // A 0-d tensor reduces over nothing: N = 1, handled by the kernel as a 1-element reduction.
  const Tensor xr = rd.empty() ? detail::make_alias(x, {1}, {1}, x.storage_offset()) : x;
  const std::vector<int64_t> kd = rd.empty() ? std::vector<int64_t>{0} : rd;
  kernel<kernels::VarKernel>(OpId::var, x.device().type, x.dtype())(rd.empty() ? out.view({1}) : out, xr, kd,
                                                                      correction);
  Tensor result = finish_shape(out, x, rd, keepdim);
  if (autograd::needs_grad({&x})) {
    const int64_t n = x.numel() / std::max<int64_t>(out.numel(), 1);
    // d var / dx = 2 (x - mean) / (N - correction); N - correction <= 0 gives inf/NaN as forward does.
    // In double, as the kernel does: n - correction overflows int64 for a correction near its minimum.
    const double scale = 2.0 / (static_cast<double>(n) - static_cast<double>(correction));
    autograd::record(OpId::var, {x}, {result},
                     [sx = SavedTensor(x), rd, keep_shape, scale](const TensorList& g) -> TensorList {
                       const Tensor xv = sx.unpack("var");
                       const Tensor centred = rd.empty() ? sub(xv, xv) : sub(xv, mean(xv, rd, true));
                       return {mul(mul(centred, expand_grad(g[0], keep_shape, xv.sizes())), scale)};
                     });
  }
  return result;
}

std::tuple<Tensor, Tensor> max(const Tensor& x_in, int64_t dim, bool keepdim) {
  PRECIS_CHECK(x_in.defined(), "max: the input tensor is undefined");
  const Tensor x = apply_precision(OpId::max, x_in)[0];
  const int64_t d = detail::wrap_dim(dim, x.dim(), "max", x);
  if (x.dim() == 0) {
    // As in PyTorch: the value itself, index 0.
    Tensor v = x.detach().clone();
    Tensor i = zeros({}, {.dtype = DType::i64, .device = x.device()});
    if (autograd::needs_grad({&x}))
      autograd::record(OpId::max, {x}, {v}, [](const TensorList& g) -> TensorList { return {g[0]}; });
    return {v, i};
  }
  PRECIS_CHECK(x.sizes()[d] > 0, "max: max of an empty tensor: dim ", d, " of a tensor ", x.describe(),
               " has size 0, so there is no maximum to take");
  const std::vector<int64_t> rd{d};
  const Shape keep_shape = keepdim_shape(x, rd);
  Tensor values = empty(keep_shape, {.dtype = x.dtype(), .device = x.device()});
  Tensor indices = empty(keep_shape, {.dtype = DType::i64, .device = x.device()});
  kernel<kernels::MaxDimKernel>(OpId::max, x.device().type, x.dtype())(values, indices, x, d);
  Tensor v = finish_shape(values, x, rd, keepdim);
  Tensor i = finish_shape(indices, x, rd, keepdim);
  if (autograd::needs_grad({&x})) {
    // The gradient goes to the index each value came from: scatter_add into zeros.
    autograd::record(OpId::max, {x}, {v},
                     [si = SavedTensor(indices), d, keep_shape, x_shape = x.sizes()](const TensorList& g) -> TensorList {
                       const Tensor gk = g[0].reshape(keep_shape);
                       return {scatter_add(zeros(x_shape, {.dtype = gk.dtype(), .device = gk.device()}), d,
                                           si.unpack("max"), gk)};
                     });
  }
  return {v, i};
}

Tensor max(const Tensor& x_in) {
  PRECIS_CHECK(x_in.defined(), "max: the input tensor is undefined");
  const Tensor x = apply_precision(OpId::max, x_in)[0];
  PRECIS_CHECK(x.numel() > 0, "max: max of an empty tensor ", x.describe(),
               " is undefined; pass a dim to reduce a non-empty dim, or check the input");
  const Tensor flat = x.detach().reshape({x.numel()});
  Tensor values = empty({1}, {.dtype = x.dtype(), .device = x.device()});
  Tensor indices = empty({1}, {.dtype = DType::i64, .device = x.device()});
  kernel<kernels::MaxDimKernel>(OpId::max, x.device().type, x.dtype())(values, indices, flat, 0);
  Tensor v = detail::make_alias(values, {}, {}, 0);
  if (autograd::needs_grad({&x})) {
    // As PyTorch's max(): the gradient is shared evenly by every element equal to the maximum.
    autograd::record(OpId::max, {x}, {v}, [sx = SavedTensor(x), sv = SavedTensor(v)](const TensorList& g) -> TensorList {
      const Tensor xv = sx.unpack("max");
      const Tensor mask = eq(xv, sv.unpack("max")).to(g[0].dtype());
      return {mul(mask, div(g[0], sum(mask)))};
    });
  }
  return v;
}

}  // namespace precis
