#pragma once
// The device storage types of f16 and bf16 (CUDA's __half, __nv_bfloat16) in the shared opmath
// header's terms (core/opmath.h): computed in float, loaded exactly, stored rounded to nearest
// even by the CUDA conversion intrinsics; a double goes through float first, as on the host (and
// in PyTorch), so an f64 → f16/bf16 copy or an f16 mean rounds as the CPU's does. And DeviceTypes,
// the map visit_dtype (core/dtype_visit.h) uses to hand these types to device code. Included by
// nvcc-compiled files only (ops/cuda/device_math.cuh).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "core/opmath.h"

namespace precis {

template <>
struct ElementTraits<__half> {
  using compute = float;
  static constexpr bool reduced_float = true;
  static __host__ __device__ __forceinline__ float load(__half v) { return __half2float(v); }
  template <typename U>
  static __host__ __device__ __forceinline__ __half store(U v) {
    return __float2half_rn(static_cast<float>(v));
  }
};

template <>
struct ElementTraits<__nv_bfloat16> {
  using compute = float;
  static constexpr bool reduced_float = true;
  static __host__ __device__ __forceinline__ float load(__nv_bfloat16 v) { return __bfloat162float(v); }
  template <typename U>
  static __host__ __device__ __forceinline__ __nv_bfloat16 store(U v) {
    return __float2bfloat16_rn(static_cast<float>(v));
  }
};

namespace cuda {
/// The device storage types of the 16-bit floats, for visit_dtype<DeviceTypes> (core/dtype_visit.h).
struct DeviceTypes {
  using f16 = __half;
  using bf16 = __nv_bfloat16;
};
}  // namespace cuda

}  // namespace precis
