// scaled_fp8_cast on CUDA devices (ops/contracts/kernels.h, Fp8ScaledCastKernel): one grid-stride
// pass writing the fp8 codes by core/float8.h's saturating rule (the CPU kernel's, so both round
// alike) and reducing max |x| per block (warp shuffles, then one atomicMax per block).
//
// The amax is the maximum of the bit patterns of |x| as f32: for non-negative floats they order as
// the values do and every NaN (sign cleared) lies above +inf, so it is max() with NaN winning, and
// exact in any order: the result does not depend on the launch geometry or scheduling.
#include <algorithm>
#include <cstdint>

#include "core/float8.h"
#include "ops/cuda/device_math.cuh"

namespace precis::cuda {

namespace {

constexpr int kCastThreads = 256;
constexpr int kCastMaxBlocks = 2048;  // grid-stride beyond: 524 K threads cover an H100/H200 several times

__device__ __forceinline__ unsigned int warp_max(unsigned int m) {
  for (int offset = 16; offset > 0; offset >>= 1) m = max(m, __shfl_down_sync(0xffffffffu, m, offset));
  return m;
}

template <typename T>
__global__ void __launch_bounds__(kCastThreads)
    fp8_scaled_cast_kernel(uint8_t* __restrict__ out, unsigned int* __restrict__ amax_bits, const T* __restrict__ x,
                           int64_t n, const float* __restrict__ scale, Fp8Format format) {
  __shared__ unsigned int block_max[kCastThreads / 32];
  const float s = *scale;
  unsigned int m = 0;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kCastThreads;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * kCastThreads + threadIdx.x; i < n; i += stride) {
    // f64 is rounded to f32 first, as x.to(f32) would; the product is one f32 rounding.
    const float v = static_cast<float>(load_op(x[i]));
    m = max(m, __float_as_uint(v) & 0x7fffffffu);
    out[i] = precis::detail::float_to_f8_bits_saturating(__fmul_rn(v, s), format);
  }
  m = warp_max(m);
  if ((threadIdx.x & 31) == 0) block_max[threadIdx.x >> 5] = m;
  __syncthreads();
  if (threadIdx.x < 32) {
    m = warp_max(threadIdx.x < kCastThreads / 32 ? block_max[threadIdx.x] : 0u);
    if (threadIdx.x == 0) atomicMax(amax_bits, m);
  }
}

}  // namespace

void launch_fp8_scaled_cast(DType x_dtype, void* out, float* amax, const void* x, int64_t n, const float* scale,
                            bool e4m3, cudaStream_t stream) {
  // The amax starts at +0 (bits 0), the value of an empty x.
  PRECIS_CUDA_CHECK(cudaMemsetAsync(amax, 0, sizeof(float), stream), "clearing the fp8 cast's amax");
  if (n == 0) return;
  const int blocks = static_cast<int>(std::min<int64_t>((n + kCastThreads - 1) / kCastThreads, kCastMaxBlocks));
  const Fp8Format format = e4m3 ? Fp8Format::e4m3 : Fp8Format::e5m2;
  visit_floating_dtype<DeviceTypes>(x_dtype, [&]<typename T>() {
    fp8_scaled_cast_kernel<T><<<blocks, kCastThreads, 0, stream>>>(static_cast<uint8_t*>(out),
                                                               reinterpret_cast<unsigned int*>(amax),
                                                               static_cast<const T*>(x), n, scale, format);
  });
  PRECIS_CUDA_CHECK(cudaGetLastError(), "launching the fp8 cast kernel (", dtype_name(x_dtype), " input)");
}

}  // namespace precis::cuda
