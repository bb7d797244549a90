// erf (kernel: ops/cpu/erf.cpp) and its backward 2/√π·exp(−x²), from public ops.
#include "ops/precision.h"
#include "autograd/record.h"
#include "ops/functional.h"
#include "ops/kernels.h"
#include "ops/op_table.h"
#include "tensor/factory.h"

namespace precis {

using autograd::SavedTensor;
using autograd::TensorList;

Tensor erf(const Tensor& x_in) {
  const Tensor x = apply_precision(OpId::erf, x_in)[0];
  PRECIS_CHECK(x.defined(), "erf: the input tensor is undefined");
  PRECIS_CHECK_DTYPE(x.is_floating_point(), "erf: expected a floating tensor, got ", x.describe(),
                     "; convert it first, e.g. erf(x.to(DType::f32))");
  Tensor out = empty(x.sizes(), {.dtype = x.dtype(), .device = x.device()});
  kernel<kernels::UnaryKernel>(OpId::erf, x.device().type, x.dtype())(out, x.detach(), 0.0);
  if (autograd::needs_grad({&x})) {
    autograd::record(OpId::erf, {x}, {out}, [sx = SavedTensor(x)](const TensorList& g) -> TensorList {
      constexpr double kTwoOverSqrtPi = 1.12837916709551257390;
      const Tensor xv = sx.unpack("erf");
      return {mul(g[0], mul(exp(neg(mul(xv, xv))), kTwoOverSqrtPi))};
    });
  }
  return out;
}

}  // namespace precis
