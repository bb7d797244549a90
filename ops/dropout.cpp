// dropout: a Philox mask drawn from (seed, offset) reserved on the generator. Backward runs the
// same kernel on the gradient with the saved (seed, offset), which regenerates the mask instead of
// storing it: a mask tensor would cost a write in forward and a read in backward plus memory
// held for the whole step, while regenerating costs one Philox block (10 multiply rounds) per 4
// elements, drawn 16 blocks at a time on the CPU (ops/cpu/philox_vec.h): ~0.2 ns per element
// with AVX-512, against ~1.6 ns for the scalar rounds.
#include <cmath>

#include "ops/precision.h"
#include "autograd/record.h"
#include "core/rng.h"
#include "ops/functional.h"
#include "ops/kernels_loss.h"
#include "ops/op_table.h"
#include "ops/random_draw.h"
#include "tensor/factory.h"

namespace precis {

using autograd::TensorList;

namespace {

// out = x with the mask of the draw applied and scaled; p in (0, 1).
Tensor apply_mask(const Tensor& x, double p, const PhiloxDraw& rng) {
  Tensor out = empty(x.sizes(), {.dtype = x.dtype(), .device = x.device()});
  kernel<kernels::DropoutKernel>(OpId::dropout, x.device().type, x.dtype())(out, x, p, rng);
  return out;
}

// Differentiable: backward applies the same mask to the gradient (itself differentiable).
Tensor masked(const Tensor& x, double p, const PhiloxDraw& rng) {
  Tensor out = apply_mask(x.detach(), p, rng);
  if (autograd::needs_grad({&x}))
    autograd::record(OpId::dropout, {x}, {out}, [p, rng](const TensorList& g) -> TensorList {
      return {masked(g[0], p, rng)};
    });
  return out;
}

}  // namespace

Tensor dropout(const Tensor& x_in, double p, bool training, Generator* generator) {
  const Tensor x = apply_precision(OpId::dropout, x_in)[0];
  PRECIS_CHECK(x.defined(), "dropout: the input tensor is undefined");
  PRECIS_CHECK(p >= 0.0 && p <= 1.0, "dropout: p must be in [0, 1], got ", p, " (input ", x.describe(), ")");
  PRECIS_CHECK_DTYPE(x.is_floating_point(), "dropout: expected a floating tensor, got ", x.describe());
  if (!training || p == 0.0) return x;
  if (p == 1.0) {
    // Nothing survives: zeros, and a zero gradient.
    Tensor out = zeros(x.sizes(), {.dtype = x.dtype(), .device = x.device()});
    if (autograd::needs_grad({&x}))
      autograd::record(OpId::dropout, {x}, {out}, [](const TensorList& g) -> TensorList { return {mul(g[0], 0.0)}; });
    return out;
  }
  Generator& gen = generator != nullptr ? *generator : default_generator();
  const uint64_t blocks = (static_cast<uint64_t>(x.numel()) + 3) / 4;
  return masked(x, p, detail::draw_for(gen, blocks, x.device(), "dropout"));
}

}  // namespace precis
