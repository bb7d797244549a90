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
// generator use. Declared for the op front-end (ops/frontend.h).
#include "core/rng.h"
#include "ops/detail/broadcast.h"
#include "ops/frontend.h"
#include "ops/functional.h"
#include "ops/contracts/kernels_loss.h"
#include "ops/op_table.h"
#include "ops/detail/random_draw.h"
#include "tensor/factory.h"

namespace precis {

using autograd::TensorList;

using detail::Domain;
using detail::OpContext;

namespace {

// keep ? g·scale : 0 in out_dtype, rounded once (the kernel without a residual). Differentiable:
// its gradient is the same mask applied to the incoming gradient, in g's dtype. It runs from
// backward on a gradient, which the precision hook has never seen: no hook.
struct MaskedGrad {
  static constexpr OpId id = OpId::dropout_add;
  static constexpr Domain domain = Domain::any;
  static constexpr bool precision_hook = false;
  struct Saved {
    double p = 0.0;
    PhiloxDraw rng{};
    DType dtype = DType::f32;  // g's
  };
  static Tensor forward(OpContext<Saved>& ctx, const std::array<Tensor, 1>& in, DType out_dtype, double p,
                        const PhiloxDraw& rng) {
    const Tensor& g_in = in[0];
    // The kernel computes in out's compute type; a gradient of the other family (f64 beside f32)
    // is cast first. Not reached by dropout_add's own fast path, whose operands share one family.
    const bool wide = out_dtype == DType::f64;
    const Tensor g = (g_in.dtype() == DType::f64) == wide ? g_in : g_in.to(wide ? DType::f64 : DType::f32);
    Tensor out = empty(g.sizes(), {.dtype = out_dtype, .device = g.device()});
    kernel<kernels::DropoutAddKernel>(OpId::dropout_add, g.device().type, out_dtype)(out, g.detach(), Tensor(), p, rng);
    if (ctx.grad) ctx.saved = {p, rng, g_in.dtype()};
    return out;
  }
  static TensorList backward(const Saved& s, const TensorList& gg) {
    return {detail::call<MaskedGrad>({gg[0]}, s.dtype, s.p, s.rng)};
  }
};

Tensor masked_grad(const Tensor& g, DType out_dtype, double p, const PhiloxDraw& rng) {
  return detail::call<MaskedGrad>({g}, out_dtype, p, rng);
}

// Its own checks (Domain::any): p first, and errors that name both operands.
struct DropoutAdd {
  static constexpr OpId id = OpId::dropout_add;
  static constexpr Domain domain = Domain::any;
  static constexpr const char* names[] = {"x", "residual"};
  // Promote, except that an f16/bf16 x beside an fp32 residual stays as it is: the kernel widens
  // it as it reads it, which gives what x.to(f32) would without that pass. ctx.first_widened is
  // not read: the kernel computes in fp32 for any f16/bf16/f32 mix anyway.
  static constexpr bool widens_first_in_kernel = true;
  struct Saved {
    double p = 0.0;
    PhiloxDraw rng{};
    bool need_x = false, need_r = false;
    DType x_dtype = DType::f32, r_dtype = DType::f32;
  };
  static Tensor forward(OpContext<Saved>& ctx, const std::array<Tensor, 2>& in, double p, bool training,
                        Generator* generator) {
    const char* op = "dropout_add";
    const Tensor &x = in[0], &residual = in[1];
    const std::string all = "x " + x.describe() + ", residual " + residual.describe();
    PRECIS_CHECK(p >= 0.0 && p <= 1.0, op, ": p must be in [0, 1], got ", p, " (", all, ")");
    PRECIS_CHECK_DTYPE(x.is_floating_point() && residual.is_floating_point(), op,
                       ": expected floating tensors, got ", all, "; convert with .to(DType::f32)");
    PRECIS_CHECK_DEVICE(x.device() == residual.device(), op, ": x and residual must be on one device, got ", all,
                        "; move residual with .to(", x.device().str(), ")");
    (void)broadcast_shapes(op, {&x, &residual}, {"x", "residual"});  // ShapeError naming both
    // The composite paths below record their own ops' nodes: none for dropout_add.
    if (!training || p == 0.0) {
      ctx.grad = false;
      return add(x, residual);
    }

    const DType out_dtype = promote_types(x.dtype(), residual.dtype());
    const DeviceType dev = x.device().type;
    const bool one_family = (x.dtype() == DType::f64) == (residual.dtype() == DType::f64);
    if (p == 1.0 || x.sizes() != residual.sizes() || !one_family ||
        find_fused_kernel(OpId::dropout_add, dev, out_dtype) == nullptr) {
      ctx.grad = false;
      // An f16/bf16 x beside an fp32 residual is widened first, as the fused kernel reads it:
      // x·scale rounded to x's dtype would be an ulp off what x.to(f32) gives.
      const bool widen = is_low_precision(x.dtype()) && out_dtype == DType::f32;
      return add(dropout(widen ? x.to(DType::f32) : x, p, training, generator), residual);
    }

    // Dropout's draw: one Philox block per 4 elements, reserved from the generator.
    Generator& gen = generator != nullptr ? *generator : default_generator();
    const PhiloxDraw rng = detail::draw_for(gen, (static_cast<uint64_t>(x.numel()) + 3) / 4, x.device(), op);
    Tensor out = empty(x.sizes(), {.dtype = out_dtype, .device = x.device()});
    kernel<kernels::DropoutAddKernel>(OpId::dropout_add, dev, out_dtype)(out, x.detach(), residual.detach(), p, rng);
    if (ctx.grad)
      ctx.saved = {p, rng, x.requires_grad(), residual.requires_grad(), x.dtype(), residual.dtype()};
    return out;
  }
  static TensorList backward(const Saved& s, const TensorList& g) {
    Tensor gx, gr;
    if (s.need_x) gx = masked_grad(g[0], s.x_dtype, s.p, s.rng);
    if (s.need_r) gr = g[0].dtype() == s.r_dtype ? g[0] : g[0].to(s.r_dtype);
    return {gx, gr};
  }
};

}  // namespace

Tensor dropout_add(const Tensor& x, const Tensor& residual, double p, bool training, Generator* generator) {
  return detail::call<DropoutAdd>({x, residual}, p, training, generator);
}

}  // namespace precis
