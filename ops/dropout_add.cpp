// dropout_add: add(dropout(x), residual) as one pass forward and one backward, for the residual
// blocks of a transformer (LayerNorm(dropout(dense(h)) + h)). Under bf16 autocast the pair writes
// a bf16 dropout output, casts it to fp32 and writes the sum; its backward casts the fp32
// gradient to bf16 and masks it in a second pass. Here the kernel (kernels::DropoutAddKernel)
// reads x and the residual once and writes the sum, and backward writes x's gradient in one pass
// that regenerates dropout's mask from the saved (seed, offset); the residual's gradient is the
// output gradient itself. The mask, its draw from the generator and the scale are dropout's
// (ops/dropout.cpp), so swapping the pair for this op changes no random stream.
//
// Where the backend has no kernel (CUDA for now), or the shapes broadcast, or f64 meets a narrower
// floating dtype, the op runs the pair itself: the same values up to x's rounding, the same
// generator use.
#include "autograd/record.h"
#include "ops/broadcast.h"
#include "core/rng.h"
#include "ops/functional.h"
#include "ops/kernels_loss.h"
#include "ops/op_table.h"
#include "ops/precision.h"
#include "ops/random_draw.h"
#include "tensor/factory.h"

namespace precis {

using autograd::TensorList;

namespace {

// keep ? g·scale : 0 in out_dtype, rounded once (the kernel without a residual). Differentiable:
// its gradient is the same mask applied to the incoming gradient, in g's dtype.
Tensor masked_grad(const Tensor& g_in, DType out_dtype, double p, const PhiloxDraw& rng) {
  // The kernel computes in out's compute type; a gradient of the other family (f64 beside f32)
  // is cast first. Not reached by dropout_add's own fast path, whose operands share one family.
  const bool wide = out_dtype == DType::f64;
  const Tensor g = (g_in.dtype() == DType::f64) == wide ? g_in : g_in.to(wide ? DType::f64 : DType::f32);
  Tensor out = empty(g.sizes(), {.dtype = out_dtype, .device = g.device()});
  kernel<kernels::DropoutAddKernel>(OpId::dropout_add, g.device().type, out_dtype)(out, g.detach(), Tensor(), p, rng);
  if (autograd::needs_grad({&g_in}))
    autograd::record(OpId::dropout_add, {g_in}, {out},
                     [p, rng, dt = g_in.dtype()](const TensorList& gg) -> TensorList {
                       return {masked_grad(gg[0], dt, p, rng)};
                     });
  return out;
}

}  // namespace

Tensor dropout_add(const Tensor& x_in, const Tensor& residual_in, double p, bool training, Generator* generator) {
  const char* op = "dropout_add";
  PRECIS_CHECK(x_in.defined() && residual_in.defined(), op, ": x and residual must be defined, got an undefined tensor");
  // Promote, except that an f16/bf16 x beside an fp32 residual stays as it is: the kernel widens
  // it as it reads it, which gives what x.to(f32) would without that pass.
  bool x_widened_in_kernel = false;
  const auto [x, residual] =
      apply_precision_widening_in_kernel(OpId::dropout_add, &x_widened_in_kernel, x_in, residual_in);
  (void)x_widened_in_kernel;  // the kernel computes in fp32 for any f16/bf16/f32 mix anyway
  const std::string all = "x " + x.describe() + ", residual " + residual.describe();
  PRECIS_CHECK(p >= 0.0 && p <= 1.0, op, ": p must be in [0, 1], got ", p, " (", all, ")");
  PRECIS_CHECK_DTYPE(x.is_floating_point() && residual.is_floating_point(), op,
                     ": expected floating tensors, got ", all, "; convert with .to(DType::f32)");
  PRECIS_CHECK_DEVICE(x.device() == residual.device(), op, ": x and residual must be on one device, got ", all,
                      "; move residual with .to(", x.device().str(), ")");
  (void)broadcast_shapes(op, {&x, &residual}, {"x", "residual"});  // ShapeError naming both
  if (!training || p == 0.0) return add(x, residual);

  const DType out_dtype = promote_types(x.dtype(), residual.dtype());
  const DeviceType dev = x.device().type;
  const bool one_family = (x.dtype() == DType::f64) == (residual.dtype() == DType::f64);
  if (p == 1.0 || x.sizes() != residual.sizes() || !one_family ||
      find_fused_kernel(OpId::dropout_add, dev, out_dtype) == nullptr)
    return add(dropout(x, p, training, generator), residual);

  // Dropout's draw: one Philox block per 4 elements, reserved from the generator.
  Generator& gen = generator != nullptr ? *generator : default_generator();
  const PhiloxDraw rng = detail::draw_for(gen, (static_cast<uint64_t>(x.numel()) + 3) / 4, x.device(), op);
  Tensor out = empty(x.sizes(), {.dtype = out_dtype, .device = x.device()});
  kernel<kernels::DropoutAddKernel>(OpId::dropout_add, dev, out_dtype)(out, x.detach(), residual.detach(), p, rng);
  const bool need_x = autograd::needs_grad({&x}), need_r = autograd::needs_grad({&residual});
  if (need_x || need_r)
    autograd::record(OpId::dropout_add, {x, residual}, {out},
                     [p, rng, need_x, need_r, x_dtype = x.dtype(),
                      r_dtype = residual.dtype()](const TensorList& g) -> TensorList {
                       Tensor gx, gr;
                       if (need_x) gx = masked_grad(g[0], x_dtype, p, rng);
                       if (need_r) gr = g[0].dtype() == r_dtype ? g[0] : g[0].to(r_dtype);
                       return {gx, gr};
                     });
  return out;
}

}  // namespace precis
