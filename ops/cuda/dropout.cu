// Dropout on CUDA devices: the CPU's mask (ops/math/dropout_math.h, Philox from core/philox.h) for the
// same seed and offset, so a model trained on either backend drops the same elements. One thread
// per Philox block, i.e. per four consecutive elements in row-major order.
#include "ops/cuda/device_math.cuh"
#include "ops/cuda/index_pool_kernels.h"
#include "ops/math/dropout_math.h"

namespace precis::cuda {

namespace {

template <typename T>
__global__ void dropout_kernel(T* __restrict__ out, const T* __restrict__ x, uint32_t threshold, opmath_t<T> scale,
                               uint64_t seed, uint64_t offset, const uint64_t* offset_base,
                               const ElementwiseLaunch l) {
  using C = opmath_t<T>;
  offset = kernels::philox_offset(offset, offset_base);  // a captured graph's base: read when it runs
  const int64_t blocks = (l.numel + 3) / 4;
  PRECIS_GRID_STRIDE_LOOP(b, blocks) {
    const PhiloxBlock bits = kernels::dropout_block(seed, offset, b);
#pragma unroll
    for (int lane = 0; lane < 4; ++lane) {
      const int64_t i = b * 4 + lane;
      if (i >= l.numel) break;
      int64_t xo = i;
      if (!l.contiguous) {
        int64_t off[2];
        compute_offsets<2>(l.calc, i, off);
        xo = off[1];
      }
      out[i] = kernels::dropout_keep(bits.v[lane], threshold)
                   ? store_op<T>(kernels::dropout_scaled(load_op(x[xo]), scale))
                   : store_op<T>(C(0));
    }
  }
}

}  // namespace

void launch_dropout(DType dtype, void* out, const void* x, uint32_t threshold, double scale, uint64_t seed,
                    uint64_t offset, const uint64_t* offset_base, const ElementwiseLaunch& l) {
  if (l.numel == 0) return;
  const int64_t blocks = (l.numel + 3) / 4;
  visit_device_dtype(dtype, [&]<typename T>() {
    if constexpr (std::is_floating_point_v<opmath_t<T>>) {
      dropout_kernel<T><<<grid_for(blocks), kThreads, 0, l.stream>>>(static_cast<T*>(out), static_cast<const T*>(x),
                                                                      threshold, static_cast<opmath_t<T>>(scale), seed,
                                                                      offset, offset_base, l);
    } else {
      PRECIS_INTERNAL_ASSERT(false, "dropout: no CUDA kernel for ", dtype_name(dtype));
    }
  });
  PRECIS_CUDA_CHECK(cudaGetLastError(), "launching the dropout kernel (", dtype_name(dtype), ", ", l.numel,
                    " elements)");
}

}  // namespace precis::cuda
