// Tensor unpacking and registration of the CUDA dropout kernel (device code in dropout.cu): the
// CPU's Philox mask for the same (seed, offset), floating dtypes.
#include "core/cuda/cuda_context.h"
#include "ops/cuda/cuda_backend.h"
#include "ops/cuda/index_pool_kernels.h"
#include "ops/math/dropout_math.h"
#include "ops/contracts/kernels_loss.h"
#include "ops/op_table.h"

namespace precis::cuda {

namespace {

// out: contiguous; x: out's shape, any strides; 0 <= p < 1 (ops/dropout.cpp handles p = 0 and 1).
void dropout_kernel(const Tensor& out, const Tensor& x, double p, const PhiloxDraw& rng) {
  PRECIS_CHECK_DTYPE(out.dtype() == x.dtype() && is_floating(x.dtype()),
                     "dropout: the CUDA kernel expects floating x and out of its dtype; got out ", out.describe(),
                     ", x ", x.describe());
  PRECIS_CHECK(p >= 0.0 && p < 1.0, "dropout: the kernel expects p in [0, 1), got ", p, " (x ", x.describe(), ")");
  PRECIS_INTERNAL_ASSERT(out.is_contiguous(), "dropout: out ", out.describe(), " must be contiguous");
  const ElementwiseLaunch l = make_elementwise_launch("dropout", {&out, &x});
  if (l.numel == 0) return;
  DeviceGuard guard(out.device().index);
  launch_dropout(x.dtype(), out.data_ptr(), x.data_ptr(), kernels::dropout_keep_threshold(p), 1.0 / (1.0 - p), rng.seed,
                 rng.offset, rng.offset_base, l);
}

}  // namespace

void register_dropout_kernels() {
  for (DType dt : {DType::f32, DType::f64, DType::f16, DType::bf16})
    register_kernel<kernels::DropoutKernel>(OpId::dropout, DeviceType::cuda, dt, &dropout_kernel);
}

}  // namespace precis::cuda
