// Losses: cross_entropy and nll_loss (class indices; kernels in ops/cpu/loss.cpp), the chunked
// linear_cross_entropy built on the linear, cross-entropy and matmul kernels, and the composite
// mse_loss, binary_cross_entropy_with_logits and binary_cross_entropy.
//
// Class-index losses bring the input to (M, C) rows with the class dim last (a K-dim input
// (N, C, d1, ...) is permuted, which copies) and the target to (M); the kernel writes per-row
// losses and weights in the accumulation type, and the reduction is taken here on those M values.
#include <algorithm>
#include <cmath>
#include <functional>
#include <string>

#include "autograd/grad_mode.h"
#include "ops/frontend.h"
#include "ops/device_asserts.h"
#include "ops/functional.h"
#include "ops/contracts/kernels.h"
#include "ops/contracts/kernels_loss.h"
#include "ops/op_table.h"
#include "ops/profiler.h"
#include "tensor/factory.h"

namespace precis {

using autograd::SavedTensor;
using autograd::TensorList;
using detail::Domain;
using detail::OpContext;

namespace {

DType acc_type(DType dt) { return dt == DType::f64 ? DType::f64 : DType::f32; }

std::string class_operands(const Tensor& input, const Tensor& target, const Tensor& weight) {
  std::string s = "input " + input.describe() + ", target " + target.describe();
  if (weight.defined()) s += ", weight " + weight.describe();
  return s;
}

// The layout the class-index kernels work on.
struct ClassRows {
  Tensor x;        // (M, C), contiguous when `contiguous` was asked
  Tensor target;   // (M) i64 contiguous
  Tensor weight;   // (C) accumulation type, contiguous, or undefined
  Shape out_shape;  // the shape of reduction none: target's
  int64_t classes = 0;
};

// input (N, C, d...) → (N·d..., C); input (C) → (1, C). A copy only for K-dim inputs (or when a
// contiguous layout is asked for and input is strided).
Tensor to_rows(const Tensor& input, bool contiguous) {
  if (input.dim() == 1) return contiguous ? input.contiguous().reshape({1, input.size(0)}) : input.unsqueeze(0);
  if (input.dim() == 2) return contiguous ? input.contiguous() : input;
  Shape perm{0};
  for (int64_t d = 2; d < input.dim(); ++d) perm.push_back(d);
  perm.push_back(1);
  return input.permute(perm).contiguous().reshape({-1, input.size(1)});
}

// The inverse of to_rows for a gradient of rows (M, C): back to input's shape.
Tensor from_rows(const Tensor& rows, const Shape& input_shape) {
  if (input_shape.size() <= 2) return rows.reshape(input_shape);
  Shape permuted{input_shape[0]};
  for (size_t d = 2; d < input_shape.size(); ++d) permuted.push_back(input_shape[d]);
  permuted.push_back(input_shape[1]);
  Shape perm{0, static_cast<int64_t>(input_shape.size()) - 1};
  for (size_t d = 1; d + 1 < input_shape.size(); ++d) perm.push_back(static_cast<int64_t>(d));
  return rows.reshape(permuted).permute(perm).contiguous();
}

ClassRows class_rows(const char* op, const Tensor& input, const Tensor& target, const Tensor& weight,
                     int64_t ignore_index, bool contiguous) {
  PRECIS_CHECK(input.defined() && target.defined(), op, ": input and target must be defined");
  PRECIS_CHECK_DTYPE(input.is_floating_point(), op, ": input must be floating (",
                     std::string(op) == "cross_entropy" ? "logits" : "log-probabilities", "), got ",
                     class_operands(input, target, weight));
  PRECIS_CHECK_DTYPE(target.dtype() == DType::i64, op, " expects class indices as i64, got ",
                     dtype_name(target.dtype()), " (", class_operands(input, target, weight),
                     "); convert indices with target.to(DType::i64) (probability targets are not supported)");
  PRECIS_CHECK_DEVICE(target.device() == input.device() && (!weight.defined() || weight.device() == input.device()),
                      op, ": all operands must be on one device, got ", class_operands(input, target, weight),
                      "; move them to one device with .to(device), e.g. target.to(input.device())");
  PRECIS_CHECK_SHAPE(input.dim() >= 1, op, ": input must be (N, C), (N, C, d1, ...) or (C), got ",
                     class_operands(input, target, weight));
  ClassRows r;
  r.classes = input.dim() == 1 ? input.size(0) : input.size(1);
  Shape expected;
  if (input.dim() >= 2) {
    expected.push_back(input.size(0));
    for (int64_t d = 2; d < input.dim(); ++d) expected.push_back(input.size(d));
  }
  PRECIS_CHECK_SHAPE(target.sizes() == expected, op, ": target must have shape ", shape_str(expected),
                     " (input's without the class dim 1), got ", class_operands(input, target, weight));
  if (weight.defined()) {
    PRECIS_CHECK_SHAPE(weight.dim() == 1 && weight.size(0) == r.classes, op, ": weight must have shape [",
                       r.classes, "] (one per class), got ", class_operands(input, target, weight));
    PRECIS_CHECK_DTYPE(weight.is_floating_point(), op, ": weight must be floating, got ",
                       class_operands(input, target, weight));
    r.weight = weight.detach().to(acc_type(input.dtype())).contiguous();
  }
  r.out_shape = target.sizes();
  r.target = target.detach().reshape({-1}).contiguous();
  // Reading device targets back would wait for everything queued before them (in a training
  // loop, the whole forward pass), so on a device the check stays there and is reported at the
  // next host read (ops/device_asserts.h); the kernels give such a row a NaN loss meanwhile.
  detail::check_index_range(r.target, r.classes, ignore_index,
                            [op, classes = r.classes, ignore_index, all = class_operands(input, target, weight)](
                                int64_t v) {
                              return detail::str_cat(op, ": target ", v, " is out of range for ", classes,
                                                     " classes (valid: 0 to ", classes - 1, ", or ignore_index ",
                                                     ignore_index, "); ", all);
                            });
  r.x = to_rows(input.detach(), contiguous);
  return r;
}

// The reduced loss in `dtype` from per-row values (accumulation type); `total` receives the
// divisor of the mean (Σ weight_rows), undefined otherwise.
Tensor reduce_rows(const Tensor& loss_rows, const Tensor& weight_rows, Reduction reduction, const Shape& out_shape,
                   DType dtype, Tensor* total) {
  switch (reduction) {
    case Reduction::none: return loss_rows.reshape(out_shape).to(dtype);
    case Reduction::sum: return sum(loss_rows).to(dtype);
    case Reduction::mean:
      *total = sum(weight_rows);
      return div(sum(loss_rows), *total).to(dtype);
  }
  return Tensor();
}

// The per-row gradient (M) in the accumulation type for an output gradient g of the reduction.
Tensor grad_rows(const Tensor& g, Reduction reduction, const Tensor& total, int64_t rows, DType acc) {
  Tensor ga = g.to(acc);
  switch (reduction) {
    case Reduction::none: return ga.reshape({rows}).contiguous();
    case Reduction::sum: return ga.reshape({1}).expand({rows});
    case Reduction::mean: return div(ga, total).reshape({1}).expand({rows});
  }
  return Tensor();
}

void check_reduction(const char* op, Reduction r) {
  PRECIS_CHECK(r == Reduction::none || r == Reduction::mean || r == Reduction::sum, op, ": unknown reduction ",
               static_cast<int>(r));
}

// Element-wise loss values reduced as asked (composite ops; differentiable).
Tensor reduce_elements(const Tensor& loss, Reduction reduction) {
  switch (reduction) {
    case Reduction::none: return loss;
    case Reduction::mean: return mean(loss);
    case Reduction::sum: return sum(loss);
  }
  return Tensor();
}

// t broadcastable to `shape` (trailing alignment, size 1 stretches) without growing it.
bool broadcasts_to(const Tensor& t, const Shape& shape) {
  if (t.dim() > static_cast<int64_t>(shape.size())) return false;
  for (int64_t i = 1; i <= t.dim(); ++i) {
    const int64_t a = t.sizes()[t.dim() - i], b = shape[shape.size() - i];
    if (a != b && a != 1) return false;
  }
  return true;
}

// The checks shared by the element-wise losses: floating input and target of one shape and
// device, optional extras broadcastable to input.
void check_elementwise(const char* op, const Tensor& input, const Tensor& target,
                       std::initializer_list<std::pair<const char*, const Tensor*>> extras) {
  PRECIS_CHECK(input.defined() && target.defined(), op, ": input and target must be defined");
  std::string all = "input " + input.describe() + ", target " + target.describe();
  for (const auto& [name, t] : extras)
    if (t->defined()) all += std::string(", ") + name + " " + t->describe();
  PRECIS_CHECK_DTYPE(input.is_floating_point() && target.is_floating_point(), op,
                     ": input and target must be floating, got ", all);
  PRECIS_CHECK_DEVICE(target.device() == input.device(), op, ": all operands must be on one device, got ", all,
                      "; move them to one device with .to(device), e.g. target.to(input.device())");
  PRECIS_CHECK_SHAPE(target.sizes() == input.sizes(), op, ": target must have input's shape, got ", all,
                     "; expand one explicitly if broadcasting is meant");
  for (const auto& [name, t] : extras) {
    if (!t->defined()) continue;
    PRECIS_CHECK_DTYPE(t->is_floating_point(), op, ": ", name, " must be floating, got ", all);
    PRECIS_CHECK_DEVICE(t->device() == input.device(), op, ": all operands must be on one device, got ", all,
                        "; move them to one device with .to(device)");
    PRECIS_CHECK_SHAPE(broadcasts_to(*t, input.sizes()), op, ": ", name, " must broadcast to input's shape ",
                       shape_str(input.sizes()), ", got ", all);
  }
}

// cross_entropy(input, target, weight): target and the options are parameters. Under autocast
// (FP32 category) f16/bf16 logits stay as they are: the kernels widen each element to fp32 as they
// read it, which is what the cast would do, minus a full pass over the (M, C) logits and their
// fp32 copy (and the cast's backward pass over the gradient). The loss then comes out in fp32, as
// for cast logits; the gradient in the logits' dtype, rounded once from fp32, as the cast's
// backward rounds it.
struct CrossEntropy {
  static constexpr OpId id = OpId::cross_entropy;
  static constexpr Domain domain = Domain::any;  // class_rows checks, naming every operand
  static constexpr const char* names[] = {"input", "weight"};
  static constexpr unsigned optional = 0b10;
  static constexpr bool widens_first_in_kernel = true;
  struct Saved {
    SavedTensor x;
    Tensor row_stats, target, weight, total;
    Reduction reduction = Reduction::mean;
    int64_t ignore_index = 0, rows = 0;
    double label_smoothing = 0.0;
    DType acc = DType::f32;
  };
  static Tensor forward(OpContext<Saved>& ctx, const std::array<Tensor, 2>& in, const Tensor& target,
                        int64_t ignore_index, Reduction reduction, double label_smoothing) {
    const Tensor &input = in[0], &weight = in[1];
    const DType out_dtype = ctx.first_widened ? DType::f32 : input.dtype();
    check_reduction("cross_entropy", reduction);
    PRECIS_CHECK(label_smoothing >= 0.0 && label_smoothing <= 1.0,
                 "cross_entropy: label_smoothing must be in [0, 1], got ", label_smoothing);
    ClassRows r = class_rows("cross_entropy", input, target, weight, ignore_index, /*contiguous=*/true);
    const int64_t rows = r.x.size(0);
    const DType acc = acc_type(input.dtype());
    const TensorOptions acc_opts{.dtype = acc, .device = input.device()};
    Tensor loss_rows = empty({rows}, acc_opts), weight_rows = empty({rows}, acc_opts),
           row_stats = empty({rows, 2}, acc_opts);
    kernel<kernels::CrossEntropyKernel>(OpId::cross_entropy, input.device().type, input.dtype())(
        loss_rows, weight_rows, row_stats, r.x, r.target, r.weight, ignore_index, label_smoothing);
    Tensor total;
    Tensor out;
    {
      NoGradGuard no_grad;
      out = reduce_rows(loss_rows, weight_rows, reduction, r.out_shape, out_dtype, &total);
    }
    if (ctx.grad) {
      ctx.saved = {SavedTensor(input), row_stats, r.target, r.weight, total, reduction, ignore_index, rows,
                   label_smoothing, acc};
    }
    return out;
  }
  static TensorList backward(const Saved& s, const TensorList& g) {
    const Tensor x = s.x.unpack("cross_entropy");
    const Tensor x_rows = to_rows(x, /*contiguous=*/true);
    const Tensor gr = grad_rows(g[0], s.reduction, s.total, s.rows, s.acc);
    Tensor grad = empty(x_rows.sizes(), {.dtype = x.dtype(), .device = x.device()});
    kernel<kernels::CrossEntropyBackwardKernel>(OpId::cross_entropy_backward, x.device().type, x.dtype())(
        grad, x_rows, s.row_stats, s.target, s.weight, gr, s.ignore_index, s.label_smoothing);
    // weight gets no gradient.
    return {from_rows(grad, x.sizes()), Tensor()};
  }
};

struct NllLoss {
  static constexpr OpId id = OpId::nll_loss;
  static constexpr Domain domain = Domain::any;  // class_rows checks, naming every operand
  static constexpr const char* names[] = {"input", "weight"};
  static constexpr unsigned optional = 0b10;
  struct Saved {
    Shape shape;
    DType dtype = DType::f32, acc = DType::f32;
    Device device;
    Tensor target, weight_rows, total;
    Reduction reduction = Reduction::mean;
    int64_t ignore_index = 0, rows = 0, classes = 0;
  };
  static Tensor forward(OpContext<Saved>& ctx, const std::array<Tensor, 2>& in, const Tensor& target,
                        int64_t ignore_index, Reduction reduction) {
    const Tensor &input = in[0], &weight = in[1];
    check_reduction("nll_loss", reduction);
    ClassRows r = class_rows("nll_loss", input, target, weight, ignore_index, /*contiguous=*/false);
    const int64_t rows = r.x.size(0);
    const DType acc = acc_type(input.dtype());
    const TensorOptions acc_opts{.dtype = acc, .device = input.device()};
    Tensor loss_rows = empty({rows}, acc_opts), weight_rows = empty({rows}, acc_opts);
    kernel<kernels::NllLossKernel>(OpId::nll_loss, input.device().type, input.dtype())(
        loss_rows, weight_rows, r.x, r.target, r.weight, ignore_index);
    Tensor total;
    Tensor out;
    {
      NoGradGuard no_grad;
      out = reduce_rows(loss_rows, weight_rows, reduction, r.out_shape, input.dtype(), &total);
    }
    if (ctx.grad) {
      ctx.saved = {input.sizes(), input.dtype(), acc, input.device(), r.target, weight_rows, total, reduction,
                   ignore_index, rows, r.classes};
    }
    return out;
  }
  // d loss / d x[i, t_i] = −g_i·w[t_i] (weight_rows is 0 on ignored rows), scattered into zeros
  // with public ops, so the gradient is itself differentiable. weight gets no gradient.
  static TensorList backward(const Saved& s, const TensorList& g) {
    const Tensor coef = neg(mul(grad_rows(g[0], s.reduction, s.total, s.rows, s.acc), s.weight_rows));
    const Tensor index = where(ne(s.target, s.ignore_index), s.target, 0).unsqueeze(1);
    const Tensor grad = scatter_add(zeros({s.rows, s.classes}, {.dtype = s.dtype, .device = s.device}), 1, index,
                                    coef.to(s.dtype).unsqueeze(1));
    return {from_rows(grad, s.shape), Tensor()};
  }
};

// The element-wise losses' declarations: composites of public ops (which record their own
// nodes), so no backward here; the front-end runs the hook and check_elementwise the checks.
struct MseLoss {
  static constexpr OpId id = OpId::mse_loss;
  static constexpr Domain domain = Domain::any;
  static Tensor forward(OpContext<detail::NoSaved>&, const std::array<Tensor, 2>& in, Reduction reduction) {
    const Tensor &input = in[0], &target = in[1];
    check_reduction("mse_loss", reduction);
    check_elementwise("mse_loss", input, target, {});
    const Tensor d = sub(input, target);
    return reduce_elements(mul(d, d), reduction);
  }
};

struct L1Loss {
  static constexpr OpId id = OpId::l1_loss;
  static constexpr Domain domain = Domain::any;
  static Tensor forward(OpContext<detail::NoSaved>&, const std::array<Tensor, 2>& in, Reduction reduction) {
    check_reduction("l1_loss", reduction);
    check_elementwise("l1_loss", in[0], in[1], {});
    return reduce_elements(abs(sub(in[0], in[1])), reduction);
  }
};

// where(z < t, quadratic(z), linear(z)) with each branch computed on z clamped to its own side of
// t (min(z, t) and max(z, t)): where's backward multiplies the branch it did not pick by a zero
// gradient, and an unclamped branch can be inf there (z = inf in the quadratic, delta = inf in the
// linear one) — 0·inf = NaN. min/max send no gradient across t, so nothing leaks.
Tensor piecewise(const Tensor& z, double t, const std::function<Tensor(const Tensor&)>& quadratic,
                 const std::function<Tensor(const Tensor&)>& linear) {
  return where(lt(z, t), quadratic(minimum(z, t)), linear(maximum(z, t)));
}

// PyTorch's formulas, in its order of operations: 0.5·d·d/beta below beta, d − 0.5·beta above.
struct SmoothL1Loss {
  static constexpr OpId id = OpId::smooth_l1_loss;
  static constexpr Domain domain = Domain::any;
  static Tensor forward(OpContext<detail::NoSaved>&, const std::array<Tensor, 2>& in, Reduction reduction,
                        double beta) {
    check_reduction("smooth_l1_loss", reduction);
    PRECIS_CHECK(beta >= 0.0, "smooth_l1_loss: beta must be >= 0, got ", beta);
    check_elementwise("smooth_l1_loss", in[0], in[1], {});
    const Tensor ad = abs(sub(in[0], in[1]));
    if (beta == 0.0) return reduce_elements(ad, reduction);  // PyTorch: l1_loss
    return reduce_elements(piecewise(ad, beta, [&](const Tensor& z) { return div(mul(mul(z, 0.5), z), beta); },
                                     [&](const Tensor& z) { return sub(z, 0.5 * beta); }),
                           reduction);
  }
};

struct HuberLoss {
  static constexpr OpId id = OpId::huber_loss;
  static constexpr Domain domain = Domain::any;
  static Tensor forward(OpContext<detail::NoSaved>&, const std::array<Tensor, 2>& in, Reduction reduction,
                        double delta) {
    check_reduction("huber_loss", reduction);
    PRECIS_CHECK(delta > 0.0, "huber_loss: delta must be > 0, got ", delta);
    check_elementwise("huber_loss", in[0], in[1], {});
    const Tensor ad = abs(sub(in[0], in[1]));
    return reduce_elements(piecewise(ad, delta, [](const Tensor& z) { return mul(mul(z, 0.5), z); },
                                     [&](const Tensor& z) { return mul(sub(z, 0.5 * delta), delta); }),
                           reduction);
  }
};

// softplus(−x) = log(1 + e^(−|x|)) + max(−x, 0): no overflow for any x.
Tensor softplus_neg(const Tensor& x) { return add(log(add(exp(neg(abs(x))), 1.0)), maximum(neg(x), 0.0)); }

struct BinaryCrossEntropyWithLogits {
  static constexpr OpId id = OpId::binary_cross_entropy_with_logits;
  static constexpr Domain domain = Domain::any;
  static constexpr unsigned optional = 0b1100;  // weight, pos_weight
  struct Saved {
    SavedTensor x, t;
    Tensor w, pw;
    Reduction reduction = Reduction::mean;
    Shape shape, target_shape;
    bool target_grad = false;  // whether the target takes a gradient (rarely: skip its formula)
  };
  static Tensor forward(OpContext<Saved>& ctx, const std::array<Tensor, 4>& in, Reduction reduction) {
    const Tensor &input = in[0], &target = in[1], &weight = in[2], &pos_weight = in[3];
    const char* op = "binary_cross_entropy_with_logits";
    check_reduction(op, reduction);
    check_elementwise(op, input, target, {{"weight", &weight}, {"pos_weight", &pos_weight}});
    const Tensor x = input.detach(), t = target.detach();
    const Tensor w = weight.defined() ? weight.detach() : Tensor();
    const Tensor pw = pos_weight.defined() ? pos_weight.detach() : Tensor();
    Tensor out;
    {
      NoGradGuard no_grad;
      Tensor loss = pw.defined() ? add(mul((1.0 - t), x), mul(add(mul(sub(pw, 1.0), t), 1.0), softplus_neg(x)))
                                 : add(sub(x, mul(x, t)), softplus_neg(x));
      if (w.defined()) loss = mul(loss, w);
      out = reduce_elements(loss, reduction);
    }
    if (ctx.grad)
      ctx.saved = {SavedTensor(input), SavedTensor(target), w, pw, reduction, input.sizes(), target.sizes(),
                   target.requires_grad()};
    return out;
  }
  // d/dx = w·((1 + (pw − 1)·t)·σ(x) − pw·t) (σ(x) − t without pos_weight), formed in one piece in
  // fp32 for f16/bf16: differentiating the forward's composite summed 1, −1 and σ(x)-sized terms in
  // x's dtype, so for a confident, correct logit the gradient cancelled to 0 (bf16 below x ≈ −5.5,
  // f32 below −17) where PyTorch's is σ(x). d/dt = w·((pw − 1)·softplus(−x) − x). weight and
  // pos_weight get no gradient (PyTorch does not differentiate them either).
  static TensorList backward(const Saved& s, const TensorList& g) {
    const char* op = "binary_cross_entropy_with_logits";
    const Tensor xv = s.x.unpack(op), tv = s.t.unpack(op);
    const DType wide = xv.dtype() == DType::f64 ? DType::f64 : DType::f32;
    const Tensor x = xv.to(wide), t = tv.to(wide);
    Tensor ge = g[0].to(wide);
    if (s.w.defined()) ge = mul(ge, s.w.to(wide));
    const Tensor pw = s.pw.defined() ? s.pw.to(wide) : Tensor();
    const Tensor sig = sigmoid(x);
    Tensor gx = mul(ge, pw.defined() ? sub(mul(add(mul(sub(pw, 1.0), t), 1.0), sig), mul(pw, t)) : sub(sig, t));
    Tensor gt;
    if (s.target_grad) gt = mul(ge, pw.defined() ? sub(mul(sub(pw, 1.0), softplus_neg(x)), x) : neg(x));
    if (s.reduction == Reduction::mean) {  // over the loss's elements: the operands' broadcast shape
      const auto n = static_cast<double>(std::max<int64_t>(1, gx.numel()));
      gx = div(gx, n);
      if (gt.defined()) gt = div(gt, n);
    }
    return {sum_to(gx, s.shape).to(xv.dtype()),
            gt.defined() ? sum_to(gt, s.target_shape).to(tv.dtype()) : Tensor(), Tensor(), Tensor()};
  }
};

// Banned under autocast: the hook throws there, naming binary_cross_entropy_with_logits.
struct BinaryCrossEntropy {
  static constexpr OpId id = OpId::binary_cross_entropy;
  static constexpr Domain domain = Domain::any;
  static constexpr unsigned optional = 0b100;  // weight
  struct Saved {
    SavedTensor p, t;
    Tensor w, log_p, log_1mp;
    Reduction reduction = Reduction::mean;
    Shape shape;
  };
  static Tensor forward(OpContext<Saved>& ctx, const std::array<Tensor, 3>& in, Reduction reduction) {
    const Tensor &input = in[0], &target = in[1], &weight = in[2];
    const char* op = "binary_cross_entropy";
    check_reduction(op, reduction);
    check_elementwise(op, input, target, {{"weight", &weight}});
    Tensor out, log_p, log_1mp;
    const Tensor p = input.detach(), t = target.detach(), w = weight.defined() ? weight.detach() : Tensor();
    {
      NoGradGuard no_grad;
      // PyTorch's CPU check (a NaN fails it too): a probability outside [0, 1] gave NaN losses
      // silently. On a GPU it would cost a host wait per call; there the loss is NaN instead.
      if (p.device().is_cpu()) {
        const int64_t inside = sum(mul(ge(p, 0.0).to(DType::i64), le(p, 1.0).to(DType::i64))).item<int64_t>();
        PRECIS_CHECK(inside == p.numel(), op, ": every element of the input ", input.describe(),
                     " must be a probability in [0, 1] (", p.numel() - inside, " are not, or are NaN); for "
                     "logits call binary_cross_entropy_with_logits, which also avoids log(0)");
      }
      // Logs clamped at −100 as PyTorch, so p = 0 or 1 gives a finite loss.
      log_p = maximum(log(p), -100.0);
      log_1mp = maximum(log((1.0 - p)), -100.0);
      Tensor loss = neg(add(mul(t, log_p), mul((1.0 - t), log_1mp)));
      if (w.defined()) loss = mul(loss, w);
      out = reduce_elements(loss, reduction);
    }
    if (ctx.grad) ctx.saved = {SavedTensor(input), SavedTensor(target), w, log_p, log_1mp, reduction, input.sizes()};
    return out;
  }
  // d/dp = w·(p − t) / max(p·(1 − p), 1e-12) (PyTorch's clamp keeps p = 0 or 1 finite);
  // d/dt = w·(log(1 − p) − log p) with the clamped logs. weight gets no gradient.
  static TensorList backward(const Saved& s, const TensorList& g) {
    const Tensor pv = s.p.unpack("binary_cross_entropy"), tv = s.t.unpack("binary_cross_entropy");
    Tensor ge = g[0];
    if (s.reduction == Reduction::mean) ge = div(ge, static_cast<double>(pv.numel()));
    if (s.w.defined()) ge = mul(ge, s.w);
    const Tensor gp = div(mul(ge, sub(pv, tv)), maximum(mul(pv, (1.0 - pv)), 1e-12));
    const Tensor gt = mul(ge, sub(s.log_1mp, s.log_p));
    return {sum_to(gp, s.shape), sum_to(gt, s.shape), Tensor()};
  }
};

}  // namespace

Tensor cross_entropy(const Tensor& input, const Tensor& target, const Tensor& weight, int64_t ignore_index,
                     Reduction reduction, double label_smoothing) {
  return detail::call<CrossEntropy>({input, weight}, target, ignore_index, reduction, label_smoothing);
}

Tensor nll_loss(const Tensor& input, const Tensor& target, const Tensor& weight, int64_t ignore_index,
                Reduction reduction) {
  return detail::call<NllLoss>({input, weight}, target, ignore_index, reduction);
}

Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction) {
  return detail::call<MseLoss>({input, target}, reduction);
}

Tensor l1_loss(const Tensor& input, const Tensor& target, Reduction reduction) {
  return detail::call<L1Loss>({input, target}, reduction);
}

Tensor smooth_l1_loss(const Tensor& input, const Tensor& target, Reduction reduction, double beta) {
  return detail::call<SmoothL1Loss>({input, target}, reduction, beta);
}

Tensor huber_loss(const Tensor& input, const Tensor& target, Reduction reduction, double delta) {
  return detail::call<HuberLoss>({input, target}, reduction, delta);
}

Tensor binary_cross_entropy_with_logits(const Tensor& input, const Tensor& target, const Tensor& weight,
                                        const Tensor& pos_weight, Reduction reduction) {
  return detail::call<BinaryCrossEntropyWithLogits>({input, target, weight, pos_weight}, reduction);
}

Tensor binary_cross_entropy(const Tensor& input, const Tensor& target, const Tensor& weight, Reduction reduction) {
  return detail::call<BinaryCrossEntropy>({input, target, weight}, reduction);
}

// Logits per chunk of linear_cross_entropy's generic path when the caller leaves it to us: 4 M
// elements (8 MB in bf16), so a chunk's logits stay in cache between the GEMM that makes them and
// the kernel that turns them into loss and gradient. At V = 30522 that is 137 rows; 512 and 2048
// rows measured no faster for BERT-mini (docs/design/losses-dropout-attention.md).
constexpr int64_t kLinearCrossEntropyChunk = int64_t{1} << 22;

// Written out: two algorithms (the backend's fused kernel, or chunks through the linear and
// cross-entropy kernels), each choosing at run time what its backward keeps.
Tensor linear_cross_entropy(const Tensor& input_in, const Tensor& weight_in, const Tensor& bias_in,
                            const Tensor& target, const LinearCrossEntropyOptions& options) {
  const char* op = "linear_cross_entropy";
  PRECIS_CHECK(input_in.defined() && weight_in.defined() && target.defined(), op,
               ": input, weight and target must be defined");
  const auto [input, weight, bias] = apply_precision(OpId::linear_cross_entropy, input_in, weight_in, bias_in);
  std::string all = "input " + input.describe() + ", weight " + weight.describe();
  if (bias.defined()) all += ", bias " + bias.describe();
  all += ", target " + target.describe();
  PRECIS_CHECK(options.reduction == Reduction::mean || options.reduction == Reduction::sum, op,
               ": reduction must be mean or sum; for per-position losses call cross_entropy(linear(input, weight, "
               "bias), target, {.reduction = Reduction::none})");
  PRECIS_CHECK(options.label_smoothing >= 0.0 && options.label_smoothing <= 1.0, op,
               ": label_smoothing must be in [0, 1], got ", options.label_smoothing);
  PRECIS_CHECK(options.chunk_rows >= 0, op, ": chunk_rows must be >= 0 (0: automatic), got ", options.chunk_rows);
  PRECIS_CHECK_DTYPE(input.is_floating_point() && input.dtype() == weight.dtype() &&
                         (!bias.defined() || bias.dtype() == input.dtype()),
                     op, ": input, weight and bias must share one floating dtype, got ", all,
                     "; convert with .to(DType::f32) or run under autocast");
  PRECIS_CHECK_DTYPE(target.dtype() == DType::i64, op, " expects class indices as i64, got ", all,
                     "; convert with target.to(DType::i64)");
  PRECIS_CHECK_DEVICE(weight.device() == input.device() && target.device() == input.device() &&
                          (!bias.defined() || bias.device() == input.device()),
                      op, ": all operands must be on one device, got ", all,
                      "; move them to one device with .to(device), e.g. target.to(input.device())");
  PRECIS_CHECK_SHAPE(input.dim() >= 1 && weight.dim() == 2 && input.size(-1) == weight.size(1), op,
                     ": expected input (*, K) and weight (V, K) with the same K, got ", all);
  const int64_t V = weight.size(0), K = weight.size(1);
  PRECIS_CHECK_SHAPE(!bias.defined() || (bias.dim() == 1 && bias.size(0) == V), op, ": bias must be (", V,
                     ") (one per class), got ", all);
  const Shape lead(input.sizes().begin(), input.sizes().end() - 1);
  PRECIS_CHECK_SHAPE(target.sizes() == lead, op, ": target must have input's shape without its last dim, ",
                     shape_str(lead), ", got ", all);
  const int64_t M = shape_numel(lead);
  const Tensor tgt = target.detach().reshape({-1}).contiguous();
  // On a device the check stays there until the next host read (ops/device_asserts.h), as
  // cross_entropy's does; the kernels give an out-of-range row a NaN loss meanwhile.
  detail::check_index_range(tgt, V, options.ignore_index, [op, V, ignore = options.ignore_index, all](int64_t v) {
    return precis::detail::str_cat(op, ": target ", v, " is out of range for ", V, " classes (valid: 0 to ", V - 1,
                                   ", or ignore_index ", ignore, "); ", all);
  });

  // The loss has the dtype cross_entropy gives for logits of input's dtype here: fp32 under
  // autocast (where the GEMMs run in f16/bf16), input's dtype otherwise. Asked of the policy, not
  // run through it: no cross_entropy call is made, so none is cast or audited.
  const bool loss_in_fp32 = is_low_precision(input.dtype()) &&
                            precision_category(OpId::cross_entropy, input.device().type) == Category::FP32;
  const DType out_dtype = loss_in_fp32 ? DType::f32 : input.dtype();
  const DType acc = acc_type(input.dtype());
  const Device device = input.device();
  const DeviceType dev = device.type;
  const TensorOptions acc_opts{.dtype = acc, .device = device}, x_opts{.dtype = input.dtype(), .device = device};
  const bool need_x = autograd::needs_grad({&input}), need_w = autograd::needs_grad({&weight}),
             need_b = bias.defined() && autograd::needs_grad({&bias});
  const bool need_grad = need_x || need_w || need_b;
  const int64_t chunk = std::max<int64_t>(
      1, std::min<int64_t>(M, options.chunk_rows > 0 ? options.chunk_rows : kLinearCrossEntropyChunk / std::max<int64_t>(V, 1)));

  // The gradients for an output gradient of 1, formed in forward: each row's loss gradient is 1
  // over the mean's divisor (1 for sum), as cross_entropy's backward gives its kernel, so the logit
  // gradient is rounded exactly where the unfused pair rounds it; backward multiplies by the
  // output gradient. (All rows ignored: 1/0, which the kernel never uses — it writes 0 there.)
  // The divisor is counted on the targets' device: reading it on the host would wait for a GPU.
  // 1/count in the accumulation type is the correctly rounded reciprocal, the value that
  // 1.0/count in double rounded to it gives (division rounded twice, 53 >= 2·24 + 2 bits).
  const bool mean = options.reduction == Reduction::mean;
  Tensor counted, grad_row;  // rows not ignored (i64, 0-dim); the row gradient (1), acc
  {
    NoGradGuard no_grad;
    if (mean) counted = sum(ne(tgt, options.ignore_index));
    grad_row = full({1}, 1.0, acc_opts);
    if (mean) grad_row = grad_row / counted.to(acc);
  }

  // The backend's own kernel where it has one (CPU with oneDNN, f32 and bf16: row chunks whose
  // gradient products are formed at once, no (M, V) tensor at all; ops/contracts/kernels_loss.h).
  // It reads the row gradient on its device; its gradients come out in fp32, for backward to scale
  // and round once.
  if (M > 0 && K > 0 && V > 0 && find_fused_kernel(OpId::linear_cross_entropy, dev, input.dtype()) != nullptr) {
    Tensor gx, gw, gb, total_rows, result;
    bool ran = false;
    {
      NoGradGuard no_grad;
      const Tensor x2 = input.detach().reshape({M, K}).contiguous(), w = weight.detach().contiguous();
      const Tensor b = bias.defined() ? bias.detach().contiguous() : Tensor();
      const TensorOptions f32{.dtype = DType::f32, .device = device};
      const Tensor loss_rows = empty({M}, f32), weight_rows = empty({M}, f32);
      if (need_x) gx = empty({M, K}, f32);
      if (need_w) gw = empty({V, K}, f32);
      if (need_b) gb = empty({V}, f32);
      if (profiler::counting_flops())  // the nominal GEMMs: logits, and with gradients x's and W's
        profiler::add_flops(OpId::linear_cross_entropy, 2.0 * static_cast<double>(M) * static_cast<double>(K) *
                                                            static_cast<double>(V) * (1 + need_x + need_w));
      ran = kernel<kernels::LinearCrossEntropyKernel>(OpId::linear_cross_entropy, dev, input.dtype())(
          loss_rows, weight_rows, gx, gw, gb, x2, w, b, tgt, grad_row, options.ignore_index,
          options.label_smoothing, options.chunk_rows);
      if (ran) result = reduce_rows(loss_rows, weight_rows, options.reduction, {}, out_dtype, &total_rows);
    }
    if (ran) {
      if (need_grad) {
        autograd::record(OpId::linear_cross_entropy, {input, weight, bias}, {result},
                         [gx, gw, gb, dtype = input.dtype(), in_shape = input.sizes()](const TensorList& g) -> TensorList {
                           // The fp32 gradients times the output gradient, rounded once to the inputs' dtype.
                           const Tensor s = g[0].to(DType::f32);
                           auto scaled = [&](const Tensor& t) { return t.defined() ? mul(t, s).to(dtype) : Tensor(); };
                           const Tensor x_grad = scaled(gx);
                           return {x_grad.defined() ? x_grad.reshape(in_shape) : x_grad, scaled(gw), scaled(gb)};
                         });
      }
      return result;
    }
  }

  // f16's range is too narrow for the logit gradient to be formed before the output gradient is
  // known: a loss scaler's 65536 scales it in backward, after (p − y)/count has been rounded to f16
  // (underflowing where the scale exists to prevent it) and x·65536 overflows. For f16 the logits
  // are kept instead and the gradient formed in backward with the output gradient in it, as the
  // unfused pair (linear, then cross_entropy) does; bf16, f32 and f64 have the range.
  const bool grad_in_backward = need_grad && input.dtype() == DType::f16;
  Tensor x2, w, dlogits, kept_logits, row_stats, total, out;
  {
    NoGradGuard no_grad;
    x2 = input.detach().reshape({M, K}).contiguous();
    w = weight.detach().contiguous();
    const Tensor b = bias.defined() ? bias.detach().contiguous() : Tensor();
    Tensor loss_rows = empty({M}, acc_opts), weight_rows = empty({M}, acc_opts);
    row_stats = empty({M, 2}, acc_opts);
    if (grad_in_backward) kept_logits = empty({M, V}, x_opts);
    else if (need_grad) dlogits = empty({M, V}, x_opts);
    if (profiler::counting_flops())  // the logits' GEMM; backward's two are matmuls, counted there
      profiler::add_flops(OpId::linear_cross_entropy,
                          2.0 * static_cast<double>(M) * static_cast<double>(K) * static_cast<double>(V));
    const Tensor logits =
        grad_in_backward ? Tensor() : empty({std::min(chunk, std::max<int64_t>(M, 1)), V}, x_opts);
    const Tensor grad_rows = grad_row.expand({chunk});
    const auto linear_kernel =
        kernel<kernels::LinearKernel>(OpId::linear, dev, input.dtype()).timed_as(OpId::linear_cross_entropy);
    const auto ce_kernel = kernel<kernels::CrossEntropyKernel>(OpId::cross_entropy, dev, input.dtype());
    const auto ce_backward =
        kernel<kernels::CrossEntropyBackwardKernel>(OpId::cross_entropy_backward, dev, input.dtype());
    // With gradients, the backend's cross_entropy_with_grad where it has one (CPU: one exp per
    // logit instead of the pair's two; the same row stats and loss, the logit gradient within a
    // few fp32 ulps); else (CUDA for now) the forward and backward kernels one after the other.
    const bool fused = need_grad && find_fused_kernel(OpId::cross_entropy_with_grad, dev, input.dtype()) != nullptr;
    for (int64_t r0 = 0; r0 < M; r0 += chunk) {
      const int64_t n = std::min(chunk, M - r0);
      const Tensor lc = grad_in_backward ? kept_logits.narrow(0, r0, n) : logits.narrow(0, 0, n);
      const Tensor t = tgt.narrow(0, r0, n), stats = row_stats.narrow(0, r0, n);
      linear_kernel(lc, x2.narrow(0, r0, n), w, b);
      if (!need_grad || grad_in_backward) {
        ce_kernel(loss_rows.narrow(0, r0, n), weight_rows.narrow(0, r0, n), stats, lc, t, Tensor(),
                  options.ignore_index, options.label_smoothing);
        continue;
      }
      const Tensor dl = dlogits.narrow(0, r0, n);
      if (fused) {
        kernel<kernels::CrossEntropyWithGradKernel>(OpId::cross_entropy_with_grad, dev, input.dtype())(
            loss_rows.narrow(0, r0, n), weight_rows.narrow(0, r0, n), stats, dl, lc, t, Tensor(),
            grad_rows.narrow(0, 0, n), options.ignore_index, options.label_smoothing);
      } else {
        ce_kernel(loss_rows.narrow(0, r0, n), weight_rows.narrow(0, r0, n), stats, lc, t, Tensor(),
                  options.ignore_index, options.label_smoothing);
        ce_backward(dl, lc, stats, t, Tensor(), grad_rows.narrow(0, 0, n), options.ignore_index,
                    options.label_smoothing);
      }
    }
    out = reduce_rows(loss_rows, weight_rows, options.reduction, {}, out_dtype, &total);
  }
  if (need_grad) {
    autograd::record(
        OpId::linear_cross_entropy, {input, weight, bias}, {out},
        [dlogits, kept_logits, row_stats, tgt, total, x2, w, need_x, need_w, need_b, in_shape = input.sizes(), acc,
         chunk, dev, reduction = options.reduction, ignore = options.ignore_index,
         smoothing = options.label_smoothing](const TensorList& g) -> TensorList {
          Tensor gx, gw, gb;
          if (kept_logits.defined()) {
            // f16: cross_entropy's backward on the kept logits, chunk by chunk, with its row
            // gradient (the output gradient over the divisor), then linear's backward.
            const int64_t rows = kept_logits.size(0);
            const Tensor rows_grad = grad_rows(g[0], reduction, total, 1, acc);
            const Tensor dl =
                empty(kept_logits.sizes(), {.dtype = kept_logits.dtype(), .device = kept_logits.device()});
            const auto ce_backward =
                kernel<kernels::CrossEntropyBackwardKernel>(OpId::cross_entropy_backward, dev, kept_logits.dtype());
            for (int64_t r0 = 0; r0 < rows; r0 += chunk) {
              const int64_t n = std::min(chunk, rows - r0);
              ce_backward(dl.narrow(0, r0, n), kept_logits.narrow(0, r0, n), row_stats.narrow(0, r0, n),
                          tgt.narrow(0, r0, n), Tensor(), rows_grad.expand({n}), ignore, smoothing);
            }
            if (need_x) gx = matmul(dl, w).reshape(in_shape);
            if (need_w) gw = matmul(dl.t(), x2);
            if (need_b) gb = sum(dl, {0});
            return {gx, gw, gb};
          }
          // x's and W's gradients are whole-matrix GEMMs on the logit gradient: a chunk's x
          // gradient (rows × K over K = V) ran ~20 % slower than one (M, V)·(V, K) GEMM. Each
          // gradient is multiplied by the output gradient in fp32 and rounded once to its dtype:
          // exact for 1 and for a loss scaler's power of two.
          const Tensor s = g[0].to(acc);
          if (need_x) gx = mul(matmul(dlogits, w).to(acc), s).to(dlogits.dtype()).reshape(in_shape);
          if (need_w) gw = matmul(dlogits.t(), mul(x2.to(acc), s).to(x2.dtype()));
          if (need_b) gb = mul(sum(dlogits, {0}).to(acc), s).to(dlogits.dtype());
          return {gx, gw, gb};
        });
  }
  return out;
}

}  // namespace precis
