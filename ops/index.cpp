// Joining and indexing: cat, stack, index_select, gather, index_add, scatter_add. index_select,
// gather, index_add and scatter_add are declared once for the op front-end (ops/frontend.h); cat
// and stack take a list of tensors and are written out. Checks, output shapes and backward
// formulas here; kernels in ops/cpu/index.cpp (and ops/cuda/).
// 0-d operands are handled as 1-element 1-D tensors, as PyTorch does for these ops.
#include <sstream>

#include "core/checked_math.h"
#include "ops/device_asserts.h"
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

// "x [2, 3] f32 cpu, index [4] i64 cpu": every operand of an indexing op, for error messages.
std::string operands(const Tensor& x, const Tensor& index, const Tensor* src = nullptr) {
  std::string s = "x " + x.describe() + ", index " + index.describe();
  if (src != nullptr) s += ", src " + src->describe();
  return s;
}

Tensor as_1d(const Tensor& t) { return t.dim() == 0 ? t.reshape({1}) : t; }

void check_same_device(const char* op, const Tensor& x, const Tensor& index, const Tensor* src = nullptr) {
  const bool ok = index.device() == x.device() && (src == nullptr || src->device() == x.device());
  PRECIS_CHECK_DEVICE(ok, op, ": all operands must be on one device, got ", operands(x, index, src));
}

// Every index in [0, size): at once on the CPU, on the device elsewhere (ops/device_asserts.h).
void check_range(const char* op, const Tensor& idx, int64_t size, std::string all) {
  detail::check_index_range(idx, size, std::nullopt, [op, size, all = std::move(all)](int64_t v) {
    return detail::str_cat(op, ": index ", v, " is out of range for a dim of size ", size, " (", all, ")");
  });
}

// A 1-D (or 0-d) i64/i32 index, converted to contiguous i64 and checked against `size`.
Tensor checked_index_1d(const char* op, const Tensor& x, const Tensor& index, int64_t size, const Tensor* src = nullptr) {
  PRECIS_CHECK_DTYPE(index.dtype() == DType::i64 || index.dtype() == DType::i32, op,
                     ": index must be i64 or i32, got ", operands(x, index, src),
                     "; convert it with index.to(DType::i64)");
  PRECIS_CHECK_SHAPE(index.dim() <= 1, op, ": index must be 1-D, got ", operands(x, index, src));
  Tensor idx = as_1d(index).to(DType::i64).contiguous();
  check_range(op, idx, size, operands(x, index, src));
  return idx;
}

// An i64/i32 index with x's number of dims (PyTorch takes both, as for the 1-D ops), converted to
// contiguous i64 and checked element-wise against `size`.
Tensor checked_index_nd(const char* op, const Tensor& x, const Tensor& index, int64_t size, const Tensor* src = nullptr) {
  PRECIS_CHECK_DTYPE(index.dtype() == DType::i64 || index.dtype() == DType::i32, op,
                     ": index must be i64 or i32, got ", operands(x, index, src),
                     "; convert it with index.to(DType::i64)");
  Tensor idx = as_1d(index).to(DType::i64).contiguous();
  check_range(op, idx, size, operands(x, index, src));
  return idx;
}

// x (its requires_grad dropped) as a fresh contiguous tensor: the out-of-place base of the adds.
Tensor contiguous_copy(const Tensor& x) {
  Tensor out = empty(x.sizes(), {.dtype = x.dtype(), .device = x.device()});
  kernel<kernels::CopyKernel>(OpId::copy, x.device().type, x.dtype())(out, x);
  return out;
}

// Shape of t as seen through its 0-d → 1-D promotion, restored on the result.
Tensor restore_0d(const Tensor& out, bool was_0d) { return was_0d ? out.reshape({}) : out; }

}  // namespace

// cat is written out: a list of operands, which the front-end's fixed operand array cannot take.
Tensor cat(const std::vector<Tensor>& tensors_in, int64_t dim) {
  const std::vector<Tensor> tensors = apply_precision_list(OpId::cat, tensors_in);
  PRECIS_CHECK(!tensors.empty(), "cat: expects a non-empty list of tensors");
  // PyTorch's legacy rule: 1-D tensors of shape [0] are skipped whatever the others' shapes.
  auto skipped = [](const Tensor& t) { return t.dim() == 1 && t.sizes()[0] == 0; };
  int ref_i = -1;
  DType dtype = tensors[0].dtype();
  for (size_t i = 0; i < tensors.size(); ++i) {
    PRECIS_CHECK(tensors[i].defined(), "cat: tensor at position ", i, " is undefined");
    PRECIS_CHECK_SHAPE(tensors[i].dim() > 0, "cat: zero-dimensional tensor at position ", i, " (",
                       tensors[i].describe(), ") cannot be concatenated; unsqueeze it or use stack()");
    dtype = promote_types(dtype, tensors[i].dtype());
    if (ref_i < 0 && !skipped(tensors[i])) ref_i = static_cast<int>(i);
  }
  if (ref_i < 0) ref_i = 0;  // everything is [0]: the result is [0] too
  const Tensor& ref = tensors[ref_i];
  const int64_t d = detail::wrap_dim(dim, ref.dim(), "cat", ref);

  // Every operand that disagrees with the first kept one, named with its position.
  std::ostringstream bad;
  bool shape_ok = true, device_ok = true;
  Shape out_sizes = ref.sizes();
  out_sizes[d] = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    if (t.device() != ref.device()) device_ok = false;
    if (skipped(t) && static_cast<int>(i) != ref_i) continue;
    bool match = t.dim() == ref.dim();
    for (int64_t k = 0; match && k < ref.dim(); ++k)
      if (k != d && t.sizes()[k] != ref.sizes()[k]) match = false;
    if (!match) {
      shape_ok = false;
      bad << "\n  position " << i << ": " << t.describe();
    } else {
      // Expanded operands can have sizes near INT64_MAX without the memory: the sum may overflow.
      const std::optional<int64_t> sum = checked_add(out_sizes[d], t.sizes()[d]);
      PRECIS_CHECK_SHAPE(sum.has_value(), "cat: the sizes along dim ", d, " add up to more than int64 holds; ",
                         "operand ", i, " is ", t.describe());
      out_sizes[d] = *sum;
    }
  }
  auto all_operands = [&] {
    std::ostringstream os;
    for (size_t i = 0; i < tensors.size(); ++i) os << (i ? ", " : "") << "[" << i << "] " << tensors[i].describe();
    return os.str();
  };
  PRECIS_CHECK_DEVICE(device_ok, "cat: all tensors must be on one device, got ", all_operands());
  PRECIS_CHECK_SHAPE(shape_ok, "cat: sizes must match except in dim ", d, "; these tensors differ from the one at position ",
                     ref_i, " (", ref.describe(), "):", bad.str(), "\n  operands: ", all_operands());

  std::vector<Tensor> inputs;  // cast to the common dtype (differentiable casts), skipped ones dropped
  std::vector<size_t> used;
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (skipped(tensors[i]) && static_cast<int>(i) != ref_i) continue;
    inputs.push_back(tensors[i].to(dtype));
    used.push_back(i);
  }
  Tensor out = empty(out_sizes, {.dtype = dtype, .device = ref.device()});
  std::vector<Tensor> plain;  // what the kernel sees: no autograd on the way
  for (const Tensor& t : inputs) plain.push_back(t.detach());
  kernel<kernels::CatKernel>(OpId::cat, ref.device().type, dtype)(out, plain, d);

  if (autograd::needs_grad(inputs)) {
    std::vector<int64_t> lengths;
    for (const Tensor& t : inputs) lengths.push_back(t.sizes()[d]);
    autograd::record(OpId::cat, inputs, {out}, [lengths, d](const TensorList& g) -> TensorList {
      TensorList grads;
      int64_t offset = 0;
      for (int64_t len : lengths) {
        grads.push_back(g[0].narrow(d, offset, len));
        offset += len;
      }
      return grads;
    });
  }
  return out;
}

// stack is written out too (a list of operands); it records nothing itself: the cat it ends in does.
Tensor stack(const std::vector<Tensor>& tensors_in, int64_t dim) {
  const std::vector<Tensor> tensors = apply_precision_list(OpId::stack, tensors_in);
  PRECIS_CHECK(!tensors.empty(), "stack: expects a non-empty list of tensors");
  const Tensor& ref = tensors[0];
  std::ostringstream bad;
  bool ok = true;
  for (size_t i = 0; i < tensors.size(); ++i) {
    PRECIS_CHECK(tensors[i].defined(), "stack: tensor at position ", i, " is undefined");
    if (tensors[i].sizes() != ref.sizes()) {
      ok = false;
      bad << "\n  position " << i << ": " << tensors[i].describe();
    }
  }
  PRECIS_CHECK_SHAPE(ok, "stack: all tensors must have the same shape; these differ from position 0 (", ref.describe(),
                     "):", bad.str());
  const int64_t d = detail::wrap_dim(dim, ref.dim() + 1, "stack", ref);
  std::vector<Tensor> parts;
  for (const Tensor& t : tensors) parts.push_back(t.unsqueeze(d));
  return cat(parts, d);
}

namespace {

// index_select, gather: x is the operand; dim and index are parameters (no gradient flows to the
// index). Their backward scatters the gradient back along the same index.
struct IndexGradSaved {
  Tensor idx;
  int64_t d = 0;
  Shape x1_sizes, x_sizes;
};

struct IndexSelect {
  static constexpr OpId id = OpId::index_select;
  static constexpr Domain domain = Domain::any;
  static constexpr const char* names[] = {"x"};
  using Saved = IndexGradSaved;
  static Tensor forward(OpContext<Saved>& ctx, const std::array<Tensor, 1>& in, int64_t dim, const Tensor& index) {
    const Tensor& x = in[0];
    PRECIS_CHECK(index.defined(), "index_select: x and index must be defined");
    check_same_device("index_select", x, index);
    const bool was_0d = x.dim() == 0;
    const Tensor x1 = as_1d(x.detach());
    const int64_t d = detail::wrap_dim(dim, x1.dim(), "index_select", x);
    Tensor idx = checked_index_1d("index_select", x, index, x1.sizes()[d]);
    Shape out_sizes = x1.sizes();
    out_sizes[d] = idx.numel();
    Tensor out = empty(out_sizes, {.dtype = x.dtype(), .device = x.device()});
    kernel<kernels::IndexSelectKernel>(id, x.device().type, x.dtype())(out, x1, d, idx);
    if (ctx.grad) ctx.saved = {std::move(idx), d, x1.sizes(), x.sizes()};
    // A 0-d x with a 0-d index gives a 0-d result; with a 1-D index, a 1-D one.
    return restore_0d(out, was_0d && index.dim() == 0);
  }
  static TensorList backward(const Saved& s, const TensorList& g) {
    const Tensor base = zeros(s.x1_sizes, {.dtype = g[0].dtype(), .device = g[0].device()});
    Shape g_sizes = s.x1_sizes;
    g_sizes[s.d] = s.idx.numel();
    return {index_add(base, s.d, s.idx, g[0].reshape(g_sizes)).reshape(s.x_sizes)};
  }
};

struct Gather {
  static constexpr OpId id = OpId::gather;
  static constexpr Domain domain = Domain::any;
  static constexpr const char* names[] = {"x"};
  using Saved = IndexGradSaved;
  static Tensor forward(OpContext<Saved>& ctx, const std::array<Tensor, 1>& in, int64_t dim, const Tensor& index) {
    const Tensor& x = in[0];
    PRECIS_CHECK(index.defined(), "gather: x and index must be defined");
    check_same_device("gather", x, index);
    PRECIS_CHECK_SHAPE(index.dim() == x.dim(), "gather: index must have as many dims as x, got ", operands(x, index));
    const Tensor x1 = as_1d(x.detach());
    const int64_t d = detail::wrap_dim(dim, x1.dim(), "gather", x);
    for (int64_t k = 0; k < index.dim(); ++k)
      PRECIS_CHECK_SHAPE(k == d || index.sizes()[k] <= x.sizes()[k], "gather: index size ", index.sizes()[k],
                         " exceeds x's size ", x.sizes()[k], " at dim ", k, " (", operands(x, index), ")");
    Tensor idx = checked_index_nd("gather", x, index, x1.sizes()[d]);
    Tensor out = empty(idx.sizes(), {.dtype = x.dtype(), .device = x.device()});
    kernel<kernels::GatherKernel>(id, x.device().type, x.dtype())(out, x1, d, idx);
    if (ctx.grad) ctx.saved = {std::move(idx), d, x1.sizes(), x.sizes()};
    return restore_0d(out, x.dim() == 0);
  }
  static TensorList backward(const Saved& s, const TensorList& g) {
    const Tensor base = zeros(s.x1_sizes, {.dtype = g[0].dtype(), .device = g[0].device()});
    return {scatter_add(base, s.d, s.idx, g[0].reshape(s.idx.sizes())).reshape(s.x_sizes)};
  }
};

// index_add / scatter_add: one device, src in x's dtype, and not bool (nothing to add). Their own
// checks (Domain::any): the messages name every operand, the index included.
void check_add_operands(const char* op, const Tensor& x, const Tensor& index, const Tensor& src) {
  check_same_device(op, x, index, &src);
  PRECIS_CHECK_DTYPE(src.dtype() == x.dtype(), op, ": src must have x's dtype, got ", operands(x, index, &src),
                     "; convert src with src.to(x.dtype())");
  PRECIS_CHECK_DTYPE(x.dtype() != DType::boolean, op, ": bool tensors cannot be added, got ",
                     operands(x, index, &src));
}

// index_add, scatter_add: x and src are the operands (gradients {g, the gathered g}); dim and
// index are parameters.
struct IndexAdd {
  static constexpr OpId id = OpId::index_add;
  static constexpr Domain domain = Domain::any;
  static constexpr const char* names[] = {"x", "src"};
  struct Saved {
    Tensor idx;
    int64_t d = 0;
    Shape x1_sizes, src_shape;
  };
  static Tensor forward(OpContext<Saved>& ctx, const std::array<Tensor, 2>& in, int64_t dim, const Tensor& index) {
    const Tensor& x = in[0];
    const Tensor& src = in[1];
    PRECIS_CHECK(index.defined(), "index_add: x, index and src must be defined");
    check_add_operands("index_add", x, index, src);
    const Tensor x1 = as_1d(x.detach());
    const int64_t d = detail::wrap_dim(dim, x1.dim(), "index_add", x);
    Tensor idx = checked_index_1d("index_add", x, index, x1.sizes()[d], &src);
    Shape src_sizes = x1.sizes();
    src_sizes[d] = idx.numel();
    const Tensor s1 = as_1d(src.detach());
    PRECIS_CHECK_SHAPE(s1.sizes() == src_sizes, "index_add: src must have shape ", shape_str(src_sizes),
                       " (x's shape with dim ", d, " set to the index length), got ", operands(x, index, &src));
    Tensor out = contiguous_copy(x1);
    kernel<kernels::IndexAddKernel>(id, x.device().type, x.dtype())(out, d, idx, s1);
    if (ctx.grad) ctx.saved = {std::move(idx), d, x1.sizes(), src.sizes()};
    return restore_0d(out, x.dim() == 0);
  }
  static TensorList backward(const Saved& s, const TensorList& g) {
    return {g[0], index_select(g[0].reshape(s.x1_sizes), s.d, s.idx).reshape(s.src_shape)};
  }
};

struct ScatterAdd {
  static constexpr OpId id = OpId::scatter_add;
  static constexpr Domain domain = Domain::any;
  static constexpr const char* names[] = {"x", "src"};
  struct Saved {
    Tensor idx;
    int64_t d = 0;
    Shape x1_sizes, s1_sizes, src_shape;
  };
  static Tensor forward(OpContext<Saved>& ctx, const std::array<Tensor, 2>& in, int64_t dim, const Tensor& index) {
    const Tensor& x = in[0];
    const Tensor& src = in[1];
    PRECIS_CHECK(index.defined(), "scatter_add: x, index and src must be defined");
    check_add_operands("scatter_add", x, index, src);
    PRECIS_CHECK_SHAPE(index.dim() == x.dim() && src.dim() == x.dim(),
                       "scatter_add: x, index and src must have the same number of dims, got ",
                       operands(x, index, &src));
    const Tensor x1 = as_1d(x.detach());
    const int64_t d = detail::wrap_dim(dim, x1.dim(), "scatter_add", x);
    for (int64_t k = 0; k < index.dim(); ++k) {
      PRECIS_CHECK_SHAPE(index.sizes()[k] <= src.sizes()[k], "scatter_add: index size ", index.sizes()[k],
                         " exceeds src's size ", src.sizes()[k], " at dim ", k, " (", operands(x, index, &src), ")");
      PRECIS_CHECK_SHAPE(k == d || index.sizes()[k] <= x.sizes()[k], "scatter_add: index size ", index.sizes()[k],
                         " exceeds x's size ", x.sizes()[k], " at dim ", k, " (", operands(x, index, &src), ")");
    }
    Tensor idx = checked_index_nd("scatter_add", x, index, x1.sizes()[d], &src);
    // Only src's leading part (index's shape) is read, as in PyTorch.
    Tensor s1 = as_1d(src.detach());
    const Shape s1_sizes = s1.sizes();
    for (int64_t k = 0; k < s1.dim(); ++k) s1 = s1.narrow(k, 0, idx.sizes()[k]);
    Tensor out = contiguous_copy(x1);
    kernel<kernels::ScatterAddKernel>(id, x.device().type, x.dtype())(out, d, idx, s1);
    if (ctx.grad) ctx.saved = {std::move(idx), d, x1.sizes(), s1_sizes, src.sizes()};
    return restore_0d(out, x.dim() == 0);
  }
  static TensorList backward(const Saved& s, const TensorList& g) {
    Tensor gs = gather(g[0].reshape(s.x1_sizes), s.d, s.idx);
    if (gs.sizes() != s.s1_sizes) {
      // src larger than index: its unread part gets no gradient.
      Tensor full_g = zeros(s.s1_sizes, {.dtype = gs.dtype(), .device = gs.device()});
      Tensor region = full_g;
      for (int64_t k = 0; k < gs.dim(); ++k) region = region.narrow(k, 0, gs.sizes()[k]);
      region.copy_(gs);
      gs = full_g;
    }
    return {g[0], gs.reshape(s.src_shape)};
  }
};

}  // namespace

Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index) {
  return detail::call<IndexSelect>({x}, dim, index);
}

Tensor gather(const Tensor& x, int64_t dim, const Tensor& index) { return detail::call<Gather>({x}, dim, index); }

Tensor index_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src) {
  return detail::call<IndexAdd>({x, src}, dim, index);
}

Tensor scatter_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src) {
  return detail::call<ScatterAdd>({x, src}, dim, index);
}

}  // namespace precis
