#pragma once
// Device-side helpers shared by the element-wise .cu files: storage types per dtype, fp32 "opmath"
// for f16/bf16, conversions, offsets and launch geometry.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "core/cuda/cuda_check.h"
#include "ops/cuda/cuda_kernels.h"

namespace precis::cuda {

/// Calls f.template operator()<T>() with T the device storage type of `dtype`.
template <typename F>
void visit_device_dtype(DType dtype, F&& f) {
  switch (dtype) {
    case DType::f32: f.template operator()<float>(); return;
    case DType::f64: f.template operator()<double>(); return;
    case DType::f16: f.template operator()<__half>(); return;
    case DType::bf16: f.template operator()<__nv_bfloat16>(); return;
    case DType::i64: f.template operator()<int64_t>(); return;
    case DType::i32: f.template operator()<int32_t>(); return;
    case DType::boolean: f.template operator()<bool>(); return;
  }
  throw InternalError("visit_device_dtype: unknown dtype");
}

/// The type arithmetic on T is done in: fp32 for f16/bf16, T otherwise.
template <typename T> struct OpMath { using type = T; };
template <> struct OpMath<__half> { using type = float; };
template <> struct OpMath<__nv_bfloat16> { using type = float; };
template <typename T> using opmath_t = typename OpMath<T>::type;

template <typename T>
__device__ __forceinline__ opmath_t<T> load_op(T v) {
  if constexpr (std::is_same_v<T, __half>) return __half2float(v);
  else if constexpr (std::is_same_v<T, __nv_bfloat16>) return __bfloat162float(v);
  else return v;
}

/// Rounds (to nearest even for f16/bf16) or converts v into storage type T.
template <typename T, typename U>
__device__ __forceinline__ T store_op(U v) {
  if constexpr (std::is_same_v<T, U>) return v;
  else if constexpr (std::is_same_v<T, bool>) return v != U(0);
  else if constexpr (std::is_same_v<T, __half>) {
    if constexpr (std::is_same_v<U, double>) return __double2half(v);
    else return __float2half_rn(static_cast<float>(v));
  } else if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    if constexpr (std::is_same_v<U, double>) return __double2bfloat16(v);
    else return __float2bfloat16_rn(static_cast<float>(v));
  } else {
    return static_cast<T>(v);
  }
}

template <typename Dst, typename Src>
__device__ __forceinline__ Dst convert(Src v) {
  if constexpr (std::is_same_v<Dst, Src>) return v;
  else return store_op<Dst>(load_op(v));
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
