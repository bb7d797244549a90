// batch_norm, layer_norm, group_norm, declared for the op front-end (ops/frontend.h): operand
// checks, the kernel call on contiguous (N, C, S) / (M, D) views, and a backward that runs the
// op's fused *_backward kernel with the mean / rstd the forward saved. Kernels: ops/cpu/norm.cpp.
#include "ops/frontend.h"
#include "ops/functional.h"
#include "ops/contracts/kernels_norm.h"
#include "ops/memory_format.h"
#include "ops/op_table.h"
#include "ops/recompute.h"
#include "tensor/factory.h"

namespace precis {

using autograd::SavedTensor;
using autograd::TensorList;

using detail::Domain;
using detail::OpContext;

namespace {

// The statistics dtype of an input: f64 for f64, fp32 otherwise (docs/design/precision.md).
DType acc_dtype(DType dt) { return dt == DType::f64 ? DType::f64 : DType::f32; }

// The input's dtype and rank (the front-end has checked it is defined).
void check_input(const char* op, const Tensor& input, int64_t min_dim) {
  PRECIS_CHECK_DTYPE(input.is_floating_point(), op, ": expected a floating input, got ", input.describe(),
                     "; convert it first, e.g. input.to(DType::f32)");
  PRECIS_CHECK_SHAPE(input.dim() >= min_dim, op, ": expected an input with at least ", min_dim,
                     " dims, got ", input.describe());
}

// A per-channel (or per-feature) operand: undefined, or floating of `shape` on input's device.
void check_param(const char* op, const char* what, const Tensor& p, const Shape& shape, const Tensor& input,
                 const char* shape_hint) {
  if (!p.defined()) return;
  PRECIS_CHECK_SHAPE(p.sizes() == shape, op, ": ", what, " ", p.describe(), " must have shape ", shape_str(shape),
                     " ", shape_hint, " for an input ", input.describe());
  PRECIS_CHECK_DTYPE(p.is_floating_point(), op, ": ", what, " ", p.describe(), " must be floating (input ",
                     input.describe(), ")");
  PRECIS_CHECK_DEVICE(p.device() == input.device(), op, ": ", what, " ", p.describe(),
                      " must be on the input's device (input ", input.describe(), ")");
}

// A parameter as the kernels want it: contiguous, in the statistics dtype, out of the graph.
Tensor kernel_param(const Tensor& p, DType acc) {
  if (!p.defined()) return Tensor();
  NoGradGuard no_grad;
  return p.detach().to(acc).contiguous();
}

// A parameter gradient computed in the statistics dtype, returned in the parameter's dtype.
Tensor param_grad(const Tensor& g, DType dtype) { return g.defined() && g.dtype() != dtype ? g.to(dtype) : g; }

int64_t prod(const Shape& s, size_t begin, size_t end) {
  int64_t p = 1;
  for (size_t i = begin; i < end; ++i) p *= s[i];
  return p;
}

// A channels-last (N, C, H, W) tensor as the kernels' (N, C, S) shape: strides (S·C, 1, C).
Tensor channels_last_rows(const Tensor& t4) {
  const int64_t n = t4.size(0), c = t4.size(1), s = t4.size(2) * t4.size(3);
  return t4.permute({0, 2, 3, 1}).view({n, s, c}).permute({0, 2, 1});
}
// An empty (N, C, S) tensor in that layout.
Tensor empty_channels_last_rows(const Shape& kshape, const TensorOptions& options) {
  return empty({kshape[0], kshape[2], kshape[1]}, options).permute({0, 2, 1});
}
// A (N, C, S) channels-last-rows tensor back as the 4-D (N, C, H, W) shape `sizes`.
Tensor from_channels_last_rows(const Tensor& t, const Shape& sizes) {
  return t.permute({0, 2, 1}).view({sizes[0], sizes[2], sizes[3], sizes[1]}).permute({0, 3, 1, 2});
}

// Whether batch_norm keeps a 4-D channels-last input in that layout (the CPU and CUDA kernels both
// take channels-last rows), so a channels-last network needs no transposes around its norms.
bool batch_norm_channels_last(const Tensor& input) {
  return suggest_memory_format(input) == MemoryFormat::ChannelsLast;
}

// The gradient in the kernel's shape: contiguous, or with channels_last the layout of
// channels_last_rows.
Tensor grad_as(const Tensor& g, const Tensor& like, const Shape& kernel_shape, bool channels_last) {
  const Tensor gc = g.dtype() == like.dtype() ? g : g.to(like.dtype());
  if (!channels_last) return gc.contiguous().view(kernel_shape);
  return channels_last_rows(contiguous(gc, MemoryFormat::ChannelsLast));
}

// What the backward shared by the three norms reads. x, w: the kernel's input view (shape kshape)
// and weight (statistics dtype); mean, rstd: the statistics the forward saved (and batch_norm's
// training flag, group_norm's group count) for the op's fused backward kernel. A gradient that is
// not needed is skipped. dx returns in the input's shape in_shape; dw / db (kshape[1] values,
// statistics dtype) in the parameter's dtype and param_shape. channels_last (batch_norm of a 4-D
// channels-last input): x, the gradient and dx are in channels_last_rows' layout, dx returns
// channels-last.
struct NormSaved {
  SavedTensor x, w;
  Tensor mean, rstd;
  bool training = false;
  int64_t num_groups = 0;
  bool need_dx = false, need_dw = false, need_db = false;
  Shape kshape, in_shape, param_shape;
  DType w_dtype = DType::f32, b_dtype = DType::f32, acc = DType::f32;
  bool channels_last = false;
};

// The saved state of a norm whose input, weight or bias needs a gradient, but the statistics.
NormSaved norm_saved(const Tensor& input, const Tensor& weight, const Tensor& bias, const Tensor& x, const Tensor& w,
                     const Shape& kshape, DType acc, const Shape& param_shape, bool channels_last = false) {
  NormSaved s;
  s.x = SavedTensor(x);
  s.w = SavedTensor(w);
  s.need_dx = input.requires_grad();
  s.need_dw = weight.defined() && weight.requires_grad();
  s.need_db = bias.defined() && bias.requires_grad();
  s.kshape = kshape;
  s.in_shape = input.sizes();
  s.param_shape = param_shape;
  s.w_dtype = weight.defined() ? weight.dtype() : acc;
  s.b_dtype = bias.defined() ? bias.dtype() : acc;
  s.acc = acc;
  s.channels_last = channels_last;
  return s;
}

// The backward of the three norms: `backward` runs the op's fused kernel as
// backward(dx, dw, db, g, x, w) (undefined dx / dw / db where not needed).
template <typename BackwardKernel>
TensorList norm_backward(const char* name, const NormSaved& s, const Tensor& grad, const BackwardKernel& backward) {
  const Tensor xv = s.x.unpack(name);
  const Tensor gv = grad_as(grad, xv, s.kshape, s.channels_last);
  const Shape cs{s.kshape[1]};
  const TensorOptions x_options{.dtype = xv.dtype(), .device = xv.device()};
  Tensor dx = s.need_dx
                  ? (s.channels_last ? empty_channels_last_rows(s.kshape, x_options) : empty(s.kshape, x_options))
                  : Tensor();
  Tensor dw = s.need_dw ? empty(cs, {.dtype = s.acc, .device = xv.device()}) : Tensor();
  Tensor db = s.need_db ? empty(cs, {.dtype = s.acc, .device = xv.device()}) : Tensor();
  backward(dx, dw, db, gv, xv, s.w.defined() ? s.w.unpack(name) : Tensor());
  const auto as_param = [&](const Tensor& d, DType dtype) {
    const Tensor p = param_grad(d, dtype);
    return p.defined() && p.sizes() != s.param_shape ? p.view(s.param_shape) : p;
  };
  const Tensor dx_in = !dx.defined()       ? dx
                       : s.channels_last ? from_channels_last_rows(dx, s.in_shape)
                                         : dx.view(s.in_shape);
  return {dx_in, as_param(dw, s.w_dtype), as_param(db, s.b_dtype)};
}

// Operands: input, weight, bias (both optional). The running statistics are parameters: buffers
// updated in place, which autocast never touches and no gradient reaches. Each op checks its
// operands itself (Domain::any): its errors say which shape or dtype a parameter must have.
struct NormOperands {
  static constexpr Domain domain = Domain::any;
  static constexpr const char* names[] = {"input", "weight", "bias"};
  static constexpr unsigned optional = 0b110;
  using Saved = NormSaved;
};

struct BatchNorm : NormOperands {
  static constexpr OpId id = OpId::batch_norm;
  static Tensor forward(OpContext<Saved>& ctx, const std::array<Tensor, 3>& in, const Tensor& running_mean,
                        const Tensor& running_var, bool training, double momentum, double eps) {
    const Tensor &input = in[0], &weight = in[1], &bias = in[2];
    check_input("batch_norm", input, 2);
    const int64_t N = input.size(0), C = input.size(1);
    const Shape cshape{C};
    const char* hint = "(C = input.size(1))";
    check_param("batch_norm", "weight", weight, cshape, input, hint);
    check_param("batch_norm", "bias", bias, cshape, input, hint);
    check_param("batch_norm", "running_mean", running_mean, cshape, input, hint);
    check_param("batch_norm", "running_var", running_var, cshape, input, hint);
    PRECIS_CHECK(training || (running_mean.defined() && running_var.defined()),
                 "batch_norm: eval mode (training = false) normalises with the running statistics, but running_mean ",
                 running_mean.defined() ? running_mean.describe() : "(undefined)", " and running_var ",
                 running_var.defined() ? running_var.describe() : "(undefined)",
                 " are not both given; pass them, or use training = true for batch statistics");
    PRECIS_CHECK(running_mean.defined() == running_var.defined(), "batch_norm: running_mean ",
                 running_mean.defined() ? running_mean.describe() : "(undefined)", " and running_var ",
                 running_var.defined() ? running_var.describe() : "(undefined)", " must be given together");
    const int64_t S = C == 0 || N == 0 ? 0 : input.numel() / (N * C);
    PRECIS_CHECK(!training || N * S > 1,
                 "batch_norm: expected more than 1 value per channel when training, got an input ", input.describe(),
                 "; use a batch of more than one sample (or eval mode)");
    const DType acc = acc_dtype(input.dtype());
    const Shape kshape{N, C, S};
    // A channels-last input stays so (its output too), as conv2d keeps it: no transposes between them.
    const bool channels_last = batch_norm_channels_last(input);
    const Tensor x = channels_last ? channels_last_rows(input.detach()) : input.detach().contiguous().view(kshape);
    const Tensor w = kernel_param(weight, acc), b = kernel_param(bias, acc);
    // Running statistics: updated in place by the kernel when they are contiguous fp32 (f64 for f64
    // inputs), else through a temporary copied back. They are buffers: no graph, but a version bump.
    Tensor rm, rv;
    // A checkpoint's recomputation normalises with the batch statistics again but leaves the
    // running statistics as the forward left them (one update per forward, as without it).
    const bool update = training && running_mean.defined() && !is_recomputing();
    if (running_mean.defined() && (update || !training)) {
      rm = kernel_param(running_mean, acc);
      rv = kernel_param(running_var, acc);
    }
    const TensorOptions out_options{.dtype = input.dtype(), .device = input.device()};
    Tensor out = channels_last ? empty_channels_last_rows(kshape, out_options) : empty(kshape, out_options);
    Tensor save_mean = empty(cshape, {.dtype = acc, .device = input.device()});
    Tensor save_rstd = empty(cshape, {.dtype = acc, .device = input.device()});
    kernel<kernels::BatchNormKernel>(OpId::batch_norm, input.device().type, input.dtype())(
        out, save_mean, save_rstd, x, w, b, rm, rv, training, momentum, eps);
    if (update) {
      NoGradGuard no_grad;
      for (auto [buffer, value] : {std::pair{running_mean, rm}, std::pair{running_var, rv}}) {
        if (value.data_ptr() == buffer.data_ptr() && value.dtype() == buffer.dtype())
          buffer.bump_version();  // written in place by the kernel
        else
          buffer.copy_(value);
      }
    }
    if (ctx.grad) {
      ctx.saved = norm_saved(input, weight, bias, x, w, kshape, acc, cshape, channels_last);
      ctx.saved.mean = std::move(save_mean);
      ctx.saved.rstd = std::move(save_rstd);
      ctx.saved.training = training;
    }
    return channels_last ? from_channels_last_rows(out, input.sizes()) : out.view(input.sizes());
  }
  static TensorList backward(const Saved& s, const TensorList& g) {
    return norm_backward("batch_norm", s, g[0],
                         [&s](const Tensor& dx, const Tensor& dw, const Tensor& db, const Tensor& gv, const Tensor& xv,
                              const Tensor& wv) {
                           kernel<kernels::BatchNormBackwardKernel>(OpId::batch_norm_backward, xv.device().type,
                                                                    xv.dtype())(dx, dw, db, gv, xv, wv, s.mean, s.rstd,
                                                                                s.training);
                         });
  }
};

struct LayerNorm : NormOperands {
  static constexpr OpId id = OpId::layer_norm;
  static Tensor forward(OpContext<Saved>& ctx, const std::array<Tensor, 3>& in, const Shape& normalized_shape,
                        double eps) {
    const Tensor &input = in[0], &weight = in[1], &bias = in[2];
    check_input("layer_norm", input, 0);
    const size_t k = normalized_shape.size();
    const size_t nd = static_cast<size_t>(input.dim());
    const auto matches = [&] {
      if (k == 0 || k > nd) return false;
      for (size_t i = 0; i < k; ++i)
        if (input.sizes()[nd - k + i] != normalized_shape[i]) return false;
      return true;
    };
    PRECIS_CHECK_SHAPE(matches(), "layer_norm: normalized_shape ", shape_str(normalized_shape),
                       " must be non-empty and equal the trailing dims of the input ", input.describe(),
                       " (e.g. normalized_shape = {input.size(-1)})");
    const char* hint = "(normalized_shape)";
    check_param("layer_norm", "weight", weight, normalized_shape, input, hint);
    check_param("layer_norm", "bias", bias, normalized_shape, input, hint);
    const int64_t M = prod(input.sizes(), 0, nd - k), D = prod(input.sizes(), nd - k, nd);
    const DType acc = acc_dtype(input.dtype());
    const Shape kshape{M, D};
    const Tensor x = input.detach().contiguous().view(kshape);
    const Tensor w = kernel_param(weight, acc), b = kernel_param(bias, acc);
    Tensor out = empty(kshape, {.dtype = input.dtype(), .device = input.device()});
    Tensor mean = empty({M}, {.dtype = acc, .device = input.device()});
    Tensor rstd = empty({M}, {.dtype = acc, .device = input.device()});
    kernel<kernels::LayerNormKernel>(OpId::layer_norm, input.device().type, input.dtype())(out, mean, rstd, x, w, b,
                                                                                          eps);
    if (ctx.grad) {
      ctx.saved = norm_saved(input, weight, bias, x, w, kshape, acc, normalized_shape);
      ctx.saved.mean = std::move(mean);
      ctx.saved.rstd = std::move(rstd);
    }
    return out.view(input.sizes());
  }
  static TensorList backward(const Saved& s, const TensorList& g) {
    return norm_backward("layer_norm", s, g[0],
                         [&s](const Tensor& dx, const Tensor& dw, const Tensor& db, const Tensor& gv, const Tensor& xv,
                              const Tensor& wv) {
                           kernel<kernels::LayerNormBackwardKernel>(OpId::layer_norm_backward, xv.device().type,
                                                                    xv.dtype())(dx, dw, db, gv, xv, wv, s.mean, s.rstd);
                         });
  }
};

struct GroupNorm : NormOperands {
  static constexpr OpId id = OpId::group_norm;
  static Tensor forward(OpContext<Saved>& ctx, const std::array<Tensor, 3>& in, int64_t num_groups, double eps) {
    const Tensor &input = in[0], &weight = in[1], &bias = in[2];
    check_input("group_norm", input, 2);
    const int64_t N = input.size(0), C = input.size(1);
    PRECIS_CHECK(num_groups > 0 && C % num_groups == 0, "group_norm: num_groups = ", num_groups,
                 " must be positive and divide the channel count C = ", C, " of the input ", input.describe());
    const Shape cshape{C};
    const char* hint = "(C = input.size(1))";
    check_param("group_norm", "weight", weight, cshape, input, hint);
    check_param("group_norm", "bias", bias, cshape, input, hint);
    const int64_t S = C == 0 || N == 0 ? 0 : input.numel() / (N * C);
    const DType acc = acc_dtype(input.dtype());
    const Shape kshape{N, C, S};
    // The kernels take contiguous (N, C, S) only (a group spans channels, which channels-last rows
    // interleave): a channels-last input is normalised as a contiguous copy, and its output
    // returned channels-last, as PyTorch keeps the layout.
    const bool channels_last = batch_norm_channels_last(input);
    const Tensor x = input.detach().contiguous().view(kshape);
    const Tensor w = kernel_param(weight, acc), b = kernel_param(bias, acc);
    Tensor out = empty(kshape, {.dtype = input.dtype(), .device = input.device()});
    Tensor mean = empty({N, num_groups}, {.dtype = acc, .device = input.device()});
    Tensor rstd = empty({N, num_groups}, {.dtype = acc, .device = input.device()});
    kernel<kernels::GroupNormKernel>(OpId::group_norm, input.device().type, input.dtype())(out, mean, rstd, x, w, b,
                                                                                          num_groups, eps);
    if (ctx.grad) {
      ctx.saved = norm_saved(input, weight, bias, x, w, kshape, acc, cshape);
      ctx.saved.mean = std::move(mean);
      ctx.saved.rstd = std::move(rstd);
      ctx.saved.num_groups = num_groups;
    }
    if (channels_last) return contiguous(out.view(input.sizes()), MemoryFormat::ChannelsLast);
    return out.view(input.sizes());
  }
  static TensorList backward(const Saved& s, const TensorList& g) {
    return norm_backward("group_norm", s, g[0],
                         [&s](const Tensor& dx, const Tensor& dw, const Tensor& db, const Tensor& gv, const Tensor& xv,
                              const Tensor& wv) {
                           kernel<kernels::GroupNormBackwardKernel>(OpId::group_norm_backward, xv.device().type,
                                                                    xv.dtype())(dx, dw, db, gv, xv, wv, s.mean, s.rstd,
                                                                                s.num_groups);
                         });
  }
};

}  // namespace

Tensor batch_norm(const Tensor& input, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight,
                  const Tensor& bias, bool training, double momentum, double eps) {
  return detail::call<BatchNorm>({input, weight, bias}, running_mean, running_var, training, momentum, eps);
}

Tensor layer_norm(const Tensor& input, const Shape& normalized_shape, const Tensor& weight, const Tensor& bias,
                  double eps) {
  return detail::call<LayerNorm>({input, weight, bias}, normalized_shape, eps);
}

Tensor group_norm(const Tensor& input, int64_t num_groups, const Tensor& weight, const Tensor& bias, double eps) {
  return detail::call<GroupNorm>({input, weight, bias}, num_groups, eps);
}

}  // namespace precis
