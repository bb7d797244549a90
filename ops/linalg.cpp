// matmul and linear, declared for the op front-end (ops/frontend.h): operand checks, bringing
// operands to the kernels' 3-D / 2-D forms without copying where strides allow, and their backward.
#include <algorithm>
#include <string>

#include "ops/frontend.h"
#include "ops/recompute.h"
#include "ops/functional.h"
#include "ops/contracts/kernels.h"
#include "ops/detail/linear_check.h"
#include "ops/op_table.h"
#include "ops/profiler.h"
#include "tensor/factory.h"

namespace precis {

using autograd::SavedTensor;
using autograd::TensorList;

using detail::Domain;
using detail::OpContext;

namespace {

std::string operands(const Tensor& a, const Tensor& b) {
  return "a is " + a.describe() + ", b is " + b.describe();
}

// Sizes [begin, end) of t.
Shape dims_of(const Tensor& t, int64_t begin, int64_t end) {
  return Shape(t.sizes().begin() + begin, t.sizes().begin() + end);
}

// Broadcasts two batch shapes (right-aligned, size 1 stretches) or throws naming the operands.
Shape broadcast_batch(const Shape& x, const Shape& y, const Tensor& a, const Tensor& b) {
  const size_t nd = std::max(x.size(), y.size());
  Shape out(nd);
  for (size_t i = 0; i < nd; ++i) {
    const int64_t xs = i + x.size() >= nd ? x[i + x.size() - nd] : 1;
    const int64_t ys = i + y.size() >= nd ? y[i + y.size() - nd] : 1;
    PRECIS_CHECK_SHAPE(xs == ys || xs == 1 || ys == 1, "matmul: batch dims ", shape_str(x), " and ", shape_str(y),
                       " do not broadcast: ", operands(a, b));
    out[i] = xs == 1 ? ys : xs;
  }
  return out;
}

// Stride of dims [begin, end) of t merged into one dim, if they can be without a copy (each
// non-size-1 dim steps over the whole of the next non-size-1 one); -1 otherwise. Size-1 dims
// don't matter.
int64_t merged_stride(const Tensor& t, int64_t end, int64_t begin = 0) {
  int64_t stride = -1, span = 0;  // stride and size of the merged run so far, innermost first
  for (int64_t d = end - 1; d >= begin; --d) {
    if (t.size(d) == 1) continue;
    if (stride < 0) {
      stride = t.stride(d);
      span = t.size(d);
    } else {
      if (t.stride(d) != stride * span) return -1;
      span *= t.size(d);
    }
  }
  return stride < 0 ? 0 : stride;
}

// x expanded to (*batch, r, c), `batch` being the broadcast batch shape.
Tensor expand_to_batch(const Tensor& x, const Shape& batch) {
  Shape full = batch;
  full.push_back(x.size(-2));
  full.push_back(x.size(-1));
  return x.expand(full);
}

// x: (*batch_x, r, c) brought to (B, r, c) for the kernel, where `batch` is the broadcast batch
// shape of numel B: a batch of one when x has no batch of its own (kernel broadcasting), else
// the batch dims merged into one, as a view when the strides allow; undefined when they do not
// (a copy is needed).
Tensor batch3_view(const Tensor& x, const Shape& batch) {
  const int64_t nb = x.dim() - 2, r = x.size(-2), c = x.size(-1);
  const Shape x_batch = dims_of(x, 0, nb);
  if (shape_numel(x_batch) == 1 || shape_numel(batch) == 0)
    return detail::make_alias(x, {1, r, c}, {r * c, x.stride(-2), x.stride(-1)}, x.storage_offset());
  const Tensor e = expand_to_batch(x, batch);
  const int64_t stride = merged_stride(e, static_cast<int64_t>(batch.size()));
  if (stride < 0) return Tensor();
  return detail::make_alias(e, {shape_numel(batch), r, c}, {stride, e.stride(-2), e.stride(-1)}, e.storage_offset());
}

// batch3_view, or a contiguous copy where the batch dims do not merge (e.g. batches [3, 1] with [1, 4]).
Tensor to_batch3(const Tensor& x, const Shape& batch) {
  Tensor v = batch3_view(x, batch);
  if (v.defined()) return v;
  return expand_to_batch(x, batch).contiguous().view({shape_numel(batch), x.size(-2), x.size(-1)});
}

// x brought to (B1, B2, r, c) with the batch dims [0, split) merged into B1 and [split, end) into
// B2, as a view; undefined when either group does not merge without a copy.
Tensor batch4_view(const Tensor& x, const Shape& batch, int64_t split) {
  const Tensor e = expand_to_batch(x, batch);
  const int64_t nb = static_cast<int64_t>(batch.size());
  const int64_t outer = merged_stride(e, split), inner = merged_stride(e, nb, split);
  if (outer < 0 || inner < 0) return Tensor();
  return detail::make_alias(e, {shape_numel(dims_of(e, 0, split)), shape_numel(dims_of(e, split, nb)), e.size(-2), e.size(-1)},
                            {outer, inner, e.stride(-2), e.stride(-1)}, e.storage_offset());
}

void check_matmul(const Tensor& a, const Tensor& b) {
  PRECIS_CHECK(a.defined() && b.defined(), "matmul: an operand is an undefined tensor");
  PRECIS_CHECK_DEVICE(a.device() == b.device(), "matmul: operands are on different devices: ", operands(a, b),
                      "; move both to one device with .to(device)");
  PRECIS_CHECK_DTYPE(a.is_floating_point() && b.is_floating_point(), "matmul: expects floating operands, ",
                     operands(a, b), "; convert with .to(DType::f32)");
  PRECIS_CHECK_DTYPE(a.dtype() == b.dtype(), "matmul: operands have different dtypes: ", operands(a, b),
                     "; convert one with .to(DType::", dtype_name(promote_types(a.dtype(), b.dtype())),
                     ") (or run under autocast)");
  PRECIS_CHECK_SHAPE(a.dim() >= 1 && b.dim() >= 1, "matmul: both operands need at least 1 dim, ", operands(a, b),
                     "; use mul() to scale by a 0-d tensor");
  const int64_t kb = b.dim() == 1 ? b.size(0) : b.size(-2);
  PRECIS_CHECK_SHAPE(a.size(-1) == kb, "matmul: incompatible shapes: ", operands(a, b), "; expected a.size(-1) == ",
                     b.dim() == 1 ? "b.size(0)" : "b.size(-2)");
}

// The forward without autograd. 1-D operands are made matrices ((k) → (1, k) for a, (k, 1) for
// b) and the added dim is dropped from the result, as in torch.matmul.
Tensor matmul_forward(const Tensor& a, const Tensor& b) {
  NoGradGuard no_grad;  // the views and copies below are internal
  const Tensor a2 = a.dim() == 1 ? a.unsqueeze(0) : a;
  const Tensor b2 = b.dim() == 1 ? b.unsqueeze(1) : b;
  const int64_t n = a2.size(-2), k = a2.size(-1), m = b2.size(-1);
  const auto matmul_kernel = kernel<kernels::MatmulKernel>(OpId::matmul, a.device().type, a.dtype());
  const TensorOptions options{.dtype = a.dtype(), .device = a.device()};

  Shape batch, out3_sizes;
  Tensor a3, b3;
  const int64_t row_stride = b2.dim() == 2 && a2.dim() > 2 ? merged_stride(a2, a2.dim() - 1) : -1;
  if (row_stride >= 0) {
    // (*batch, n, k) @ (k, m): the batch folds into the rows of one GEMM.
    batch = dims_of(a2, 0, a2.dim() - 2);
    const int64_t rows = shape_numel(batch) * n;
    a3 = detail::make_alias(a2, {1, rows, k}, {rows * k, row_stride, a2.stride(-1)}, a2.storage_offset());
    b3 = detail::make_alias(b2, {1, k, m}, {k * m, b2.stride(0), b2.stride(1)}, b2.storage_offset());
    out3_sizes = {1, rows, m};
  } else {
    batch = broadcast_batch(dims_of(a2, 0, a2.dim() - 2), dims_of(b2, 0, b2.dim() - 2), a, b);
    a3 = batch3_view(a2, batch);
    b3 = batch3_view(b2, batch);
    out3_sizes = {shape_numel(batch), n, m};
    if (!(a3.defined() && b3.defined()) && a.device().type == DeviceType::cpu) {
      // The CPU kernel takes two batch dims (ops/contracts/kernels.h): look for a split of the batch dims
      // into two groups that each merge in both operands, e.g. attention's (B, H) heads viewed
      // out of (B, L, H, D), whose B and H steps are L·H·D and D.
      const int64_t nb = static_cast<int64_t>(batch.size());
      for (int64_t split = 1; split < nb; ++split) {
        Tensor a4 = batch4_view(a2, batch, split), b4 = batch4_view(b2, batch, split);
        if (a4.defined() && b4.defined()) {
          a3 = std::move(a4);
          b3 = std::move(b4);
          out3_sizes = {a3.size(0), a3.size(1), n, m};
          break;
        }
      }
    }
    if (!a3.defined()) a3 = to_batch3(a2, batch);
    if (!b3.defined()) b3 = to_batch3(b2, batch);
  }
  Tensor out3 = empty(out3_sizes, options);
  if (out3.numel() > 0) {
    if (k == 0) {
      out3.zero_();
    } else {
      if (profiler::counting_flops())
        profiler::add_flops(OpId::matmul, 2.0 * static_cast<double>(out3.numel()) * static_cast<double>(k));
      matmul_kernel(out3, a3, b3);
    }
  }
  Shape out_sizes = batch;
  if (a.dim() > 1) out_sizes.push_back(n);
  if (b.dim() > 1) out_sizes.push_back(m);
  return out3.view(out_sizes);
}

// Sums a gradient computed for the broadcast shape back to `t`'s shape.
Tensor reduce_to(const Tensor& g, const Tensor& t) { return g.sizes() == t.sizes() ? g : sum_to(g, t.sizes()); }

// grad_a = g·bᵀ, grad_b = aᵀ·g, with broadcast batch dims summed back and 1-D operands' added
// dims removed. Runs with grad mode off.
TensorList matmul_backward(const Tensor& g, const Tensor& a, const Tensor& b, bool need_a, bool need_b) {
  Tensor ga, gb;
  if (a.dim() == 1 && b.dim() == 1) {  // g is 0-d: grad_a = g·b, grad_b = g·a
    const Tensor g1 = g.expand({1});  // (not reshape: views.cpp cannot yet view a 0-d tensor as [1])
    if (need_a) ga = matmul(g1, b.unsqueeze(0));
    if (need_b) gb = matmul(g1, a.unsqueeze(0));
    return {ga, gb};
  }
  const Tensor a2 = a.dim() == 1 ? a.unsqueeze(0) : a;
  const Tensor b2 = b.dim() == 1 ? b.unsqueeze(1) : b;
  Tensor g2 = g;
  if (a.dim() == 1) g2 = g2.unsqueeze(-2);
  if (b.dim() == 1) g2 = g2.unsqueeze(-1);
  if (need_a) ga = reduce_to(matmul(g2, b2.transpose(-1, -2)), a2).reshape(a.sizes());
  if (need_b) {
    if (b2.dim() == 2 && a2.dim() > 2) {
      // Σ over the batch of a_iᵀ·g_i is one GEMM over all rows: (rows, k)ᵀ · (rows, m).
      const int64_t rows = shape_numel(dims_of(a2, 0, a2.dim() - 1)), k = a2.size(-1), m = g2.size(-1);
      gb = matmul(a2.reshape({rows, k}).t(), g2.reshape({rows, m}));
    } else {
      gb = reduce_to(matmul(a2.transpose(-1, -2), g2), b2);
    }
    gb = gb.reshape(b.sizes());
  }
  return {ga, gb};
}

// The declarations keep their own operand checks (Domain::any): their errors name every operand
// ("a is ..., b is ...") and say which dtype to convert to.
struct Matmul {
  static constexpr OpId id = OpId::matmul;
  static constexpr Domain domain = Domain::any;
  static constexpr const char* names[] = {"a", "b"};
  struct Saved {
    SavedTensor a, b;
    bool need_a = false, need_b = false;
  };
  static Tensor forward(OpContext<Saved>& ctx, const std::array<Tensor, 2>& in) {
    const Tensor &a = in[0], &b = in[1];
    check_matmul(a, b);
    Tensor out = kept_or_computed(OpId::matmul, [&a = a, &b = b] { return matmul_forward(a, b); });
    if (ctx.grad) ctx.saved = {SavedTensor(a), SavedTensor(b), a.requires_grad(), b.requires_grad()};
    return out;
  }
  static TensorList backward(const Saved& s, const TensorList& g) {
    return matmul_backward(g[0], s.a.unpack("matmul"), s.b.unpack("matmul"), s.need_a, s.need_b);
  }
};

struct Linear {
  static constexpr OpId id = OpId::linear;
  static constexpr Domain domain = Domain::any;
  static constexpr const char* names[] = {"input", "weight", "bias"};
  static constexpr unsigned optional = 0b100;  // no bias
  struct Saved {
    SavedTensor x, w;
    bool need_x = false, need_w = false, need_b = false;
    int64_t rows = 0, ins = 0, outs = 0;
  };
  static Tensor forward(OpContext<Saved>& ctx, const std::array<Tensor, 3>& in) {
    const Tensor &x = in[0], &weight = in[1], &bias = in[2];
    detail::check_linear_operands("linear", x, weight, bias);
    const int64_t ins = weight.size(1), outs = weight.size(0);
    const Shape lead = dims_of(x, 0, x.dim() - 1);
    const int64_t rows = shape_numel(lead);
    Tensor out = kept_or_computed(OpId::linear, [&] {
      NoGradGuard no_grad;
      const Tensor x2 = x.reshape({rows, ins}).contiguous();
      const Tensor w = weight.contiguous();
      const Tensor b = bias.defined() ? bias.contiguous() : Tensor();
      Tensor out2 = empty({rows, outs}, {.dtype = x.dtype(), .device = x.device()});
      if (profiler::counting_flops())
        profiler::add_flops(OpId::linear,
                            2.0 * static_cast<double>(rows) * static_cast<double>(ins) * static_cast<double>(outs));
      kernel<kernels::LinearKernel>(OpId::linear, x.device().type, x.dtype())(out2, x2, w, b);
      Shape out_sizes = lead;
      out_sizes.push_back(outs);
      return out2.view(out_sizes);
    });
    if (ctx.grad)
      ctx.saved = {SavedTensor(x), SavedTensor(weight), x.requires_grad(), weight.requires_grad(),
                   bias.defined() && bias.requires_grad(), rows, ins, outs};
    return out;
  }
  static TensorList backward(const Saved& s, const TensorList& g) {
    // g: (*lead, out) seen as (rows, out); the weight and bias gradients sum over all rows.
    const Tensor g2 = g[0].reshape({s.rows, s.outs});
    Tensor gx, gw, gb;
    const Tensor x = s.x.unpack("linear");
    if (s.need_x) gx = matmul(g2, s.w.unpack("linear")).reshape(x.sizes());
    if (s.need_w) gw = matmul(g2.t(), x.reshape({s.rows, s.ins}));
    if (s.need_b) gb = sum(g2, {0});
    return {gx, gw, gb};
  }
};

}  // namespace

void detail::check_linear_operands(const char* op, const Tensor& x, const Tensor& w, const Tensor& bias) {
  PRECIS_CHECK(x.defined() && w.defined(), op, ": input or weight is an undefined tensor");
  auto describe_all = [&] {
    std::string s = "input is " + x.describe() + ", weight is " + w.describe();
    if (bias.defined()) s += ", bias is " + bias.describe();
    return s;
  };
  const bool same_device = w.device() == x.device() && (!bias.defined() || bias.device() == x.device());
  PRECIS_CHECK_DEVICE(same_device, op, ": operands are on different devices: ", describe_all(),
                      "; move them to one device with .to(device)");
  const bool floating = x.is_floating_point() && w.is_floating_point() && (!bias.defined() || bias.is_floating_point());
  PRECIS_CHECK_DTYPE(floating, op, ": expects floating operands, ", describe_all(), "; convert with .to(DType::f32)");
  const bool same_dtype = w.dtype() == x.dtype() && (!bias.defined() || bias.dtype() == x.dtype());
  PRECIS_CHECK_DTYPE(same_dtype, op, ": operands have different dtypes: ", describe_all(), "; convert with .to(DType::",
                     dtype_name(w.dtype()), ") (or run under autocast)");
  PRECIS_CHECK_SHAPE(w.dim() == 2, op, ": weight must be 2-D (out_features, in_features), ", describe_all());
  PRECIS_CHECK_SHAPE(x.dim() >= 1 && x.size(-1) == w.size(1), op, ": incompatible shapes: ", describe_all(),
                     "; expected input.size(-1) == weight.size(1)");
  PRECIS_CHECK_SHAPE(!bias.defined() || (bias.dim() == 1 && bias.size(0) == w.size(0)), op, ": bias must be (",
                     w.size(0), "), ", describe_all());
}

Tensor matmul(const Tensor& a, const Tensor& b) { return detail::call<Matmul>({a, b}); }

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  return detail::call<Linear>({x, weight, bias});
}

}  // namespace precis
