#pragma once
// Device-side helpers shared by the .cu files: the dtype visitor over device storage types,
// offsets and launch geometry. The compute types and conversions (opmath_t, load_op, store_op,
// convert) are core/opmath.h, shared with the CPU kernels, with core/cuda/device_types.cuh for
// the device's 16-bit float types.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>
#include <utility>

#include "core/cuda/cuda_check.h"
#include "core/cuda/device_types.cuh"
#include "core/dtype_visit.h"
#include "core/opmath.h"
#include "ops/cuda/cuda_kernels.h"

namespace precis::cuda {

/// Calls f.template operator()<T>() with T the device storage type of `dtype`. opmath_t,
/// load_op, store_op and convert for these types are core/opmath.h's, shared with the CPU (the
/// device types' traits are in core/cuda/device_types.cuh).
template <typename F>
void visit_device_dtype(DType dtype, F&& f) {
  visit_dtype<DeviceTypes>(dtype, std::forward<F>(f));
}

/// Element offsets of the first N operands for linear index i (innermost dim varies fastest).
template <int N>
__device__ __forceinline__ void compute_offsets(const OffsetCalc& c, int64_t i, int64_t (&off)[N]) {
#pragma unroll
  for (int k = 0; k < N; ++k) off[k] = 0;
  for (int d = c.ndim - 1; d >= 0; --d) {
    const int64_t size = c.sizes[d];
    const int64_t idx = i % size;
    i /= size;
#pragma unroll
    for (int k = 0; k < N; ++k) off[k] += idx * c.strides[k][d];
  }
}

inline constexpr int kThreads = 256;

/// Blocks for a grid-stride loop over n elements: enough to fill the GPU, capped because each
/// thread loops over the rest.
inline unsigned int grid_for(int64_t n) {
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned int>(blocks < 65536 ? blocks : 65536);
}

#define PRECIS_GRID_STRIDE_LOOP(i, n)                                                      \
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); \
       i += static_cast<int64_t>(blockDim.x) * gridDim.x)

}  // namespace precis::cuda
