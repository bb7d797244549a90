// dropout: a Philox mask drawn from (seed, offset) reserved on the generator. Backward runs the
// same kernel on the gradient with the saved (seed, offset), which regenerates the mask instead of
// storing it: a mask tensor would cost a write in forward and a read in backward plus memory
// held for the whole step, while regenerating costs one Philox block (10 multiply rounds) per 4
// elements, drawn 16 blocks at a time on the CPU (ops/cpu/philox_vec.h): ~0.2 ns per element
// with AVX-512, against ~1.6 ns for the scalar rounds. Declared for the op front-end
// (ops/frontend.h).
#include <cmath>

#include "core/rng.h"
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

// out = x with the mask of the draw applied and scaled; p in (0, 1).
Tensor apply_mask(const Tensor& x, double p, const PhiloxDraw& rng) {
  Tensor out = empty(x.sizes(), {.dtype = x.dtype(), .device = x.device()});
  kernel<kernels::DropoutKernel>(OpId::dropout, x.device().type, x.dtype())(out, x, p, rng);
  return out;
}

// What dropout's backward reads: p and the draw; p == 1 (nothing survives) draws nothing.
struct DropoutSaved {
  double p = 0.0;
  PhiloxDraw rng{};
};

// A draw's mask applied to the gradient: dropout's backward, differentiable (its backward applies
// the same mask again). It runs from backward on a gradient, which the precision hook has never
// seen: no hook.
struct DropoutMask {
  static constexpr OpId id = OpId::dropout;
  static constexpr Domain domain = Domain::any;
  static constexpr bool precision_hook = false;
  using Saved = DropoutSaved;
  static Tensor forward(OpContext<Saved>& ctx, const std::array<Tensor, 1>& in, double p, const PhiloxDraw& rng) {
    if (ctx.grad) ctx.saved = {p, rng};
    return apply_mask(in[0].detach(), p, rng);
  }
  static TensorList backward(const Saved& s, const TensorList& g) {
    return {detail::call<DropoutMask>({g[0]}, s.p, s.rng)};
  }
};

// Its own checks (Domain::any): p first, then the dtype.
struct Dropout {
  static constexpr OpId id = OpId::dropout;
  static constexpr Domain domain = Domain::any;
  using Saved = DropoutSaved;
  static Tensor forward(OpContext<Saved>& ctx, const std::array<Tensor, 1>& in, double p, bool training,
                        Generator* generator) {
    const Tensor& x = in[0];
    PRECIS_CHECK(p >= 0.0 && p <= 1.0, "dropout: p must be in [0, 1], got ", p, " (input ", x.describe(), ")");
    PRECIS_CHECK_DTYPE(x.is_floating_point(), "dropout: expected a floating tensor, got ", x.describe());
    if (!training || p == 0.0) {
      ctx.grad = false;  // x itself: no node
      return x;
    }
    if (p == 1.0) {
      // Nothing survives: zeros, and a zero gradient.
      if (ctx.grad) ctx.saved = {1.0, {}};
      return zeros(x.sizes(), {.dtype = x.dtype(), .device = x.device()});
    }
    Generator& gen = generator != nullptr ? *generator : default_generator();
    const uint64_t blocks = (static_cast<uint64_t>(x.numel()) + 3) / 4;
    const PhiloxDraw rng = detail::draw_for(gen, blocks, x.device(), "dropout");
    if (ctx.grad) ctx.saved = {p, rng};
    return apply_mask(x.detach(), p, rng);
  }
  static TensorList backward(const Saved& s, const TensorList& g) {
    if (s.p == 1.0) return {mul(g[0], 0.0)};
    return {detail::call<DropoutMask>({g[0]}, s.p, s.rng)};
  }
};

}  // namespace

Tensor dropout(const Tensor& x, double p, bool training, Generator* generator) {
  return detail::call<Dropout>({x}, p, training, generator);
}

}  // namespace precis
