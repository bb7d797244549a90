#pragma once
// Device building blocks of the row-wise CUDA kernels — normalisation (norm.cu), softmax
// (softmax.cu) and the class-index losses (loss.cu): vector loads, the block reduction in a fixed
// tree, the per-row loops and launch geometry. Deterministic: every reduction's order depends on
// the block size and the shape only (ops/cuda/norm_launch.h).
#include <cstdint>
#include <type_traits>

#include "ops/cuda/device_math.cuh"

namespace precis::cuda {

template <typename T>
struct alignas(sizeof(T) * 4) Vec4 {
  T v[4];
};

inline bool aligned4(const void* p, size_t elem) {
  return p == nullptr || reinterpret_cast<uintptr_t>(p) % (elem * 4) == 0;
}

struct SumOp {
  template <typename V>
  __device__ V operator()(V a, V b) const { return a + b; }
};
struct MaxOp {
  template <typename V>
  __device__ V operator()(V a, V b) const { return b > a ? b : a; }
};

// The value of v combined over the block in a fixed tree (warp shuffles, then the warps' results
// by warp 0), returned to every thread. blockDim.x: a multiple of 32, at most 1024. `shared`: 32
// values. Deterministic: the tree depends on the block size only.
template <typename V, typename Op>
__device__ V block_reduce(V v, Op op, V* shared) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
#pragma unroll
  for (int o = 16; o > 0; o /= 2) v = op(v, __shfl_down_sync(0xffffffffu, v, o));
  __syncthreads();  // shared may still be read by a previous call
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < warps ? shared[lane] : shared[0];
    // Lanes past `warps` hold a copy of warp 0's value; they are never combined below.
    for (int o = 16; o > 0; o /= 2) {
      const V other = __shfl_down_sync(0xffffffffu, v, o);
      if (lane + o < warps) v = op(v, other);
    }
    if (lane == 0) shared[0] = v;
  }
  __syncthreads();
  return shared[0];
}

// Threads per block for a row of n elements: enough for about 8 elements each, 32 to 256.
inline int row_threads(int64_t n) {
  int t = 32;
  while (t < 256 && t * 8 < n) t *= 2;
  return t;
}

inline unsigned int grid_rows(int64_t rows) { return static_cast<unsigned int>(rows < (1 << 20) ? rows : (1 << 20)); }

// Calls f(j, x_j as A) for the elements of row [0, n) this thread owns: strided by the block,
// four at a time when vec (n % 4 == 0 and the row 4-aligned).
template <typename T, typename F>
__device__ __forceinline__ void row_for_each(const T* row, int64_t n, bool vec, F&& f) {
  if (vec) {
    const Vec4<T>* v = reinterpret_cast<const Vec4<T>*>(row);
    for (int64_t j = threadIdx.x; j < n / 4; j += blockDim.x) {
      const Vec4<T> q = v[j];
#pragma unroll
      for (int k = 0; k < 4; ++k) f(4 * j + k, load_op(q.v[k]));
    }
  } else {
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) f(j, load_op(row[j]));
  }
}

// out_j = f(j, a_j, b_j) over the row (b may be null: f then gets 0), vectorised as above.
template <typename T, typename F>
__device__ __forceinline__ void row_map(T* out, const T* a, const T* b, int64_t n, bool vec, F&& f) {
  using A = opmath_t<T>;
  if (vec) {
    Vec4<T>* o = reinterpret_cast<Vec4<T>*>(out);
    const Vec4<T>* va = reinterpret_cast<const Vec4<T>*>(a);
    const Vec4<T>* vb = reinterpret_cast<const Vec4<T>*>(b);
    for (int64_t j = threadIdx.x; j < n / 4; j += blockDim.x) {
      const Vec4<T> qa = va[j];
      Vec4<T> qb;
      if (b != nullptr) qb = vb[j];
      Vec4<T> r;
#pragma unroll
      for (int k = 0; k < 4; ++k) r.v[k] = store_op<T>(f(4 * j + k, load_op(qa.v[k]), b ? load_op(qb.v[k]) : A(0)));
      o[j] = r;
    }
  } else {
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x)
      out[j] = store_op<T>(f(j, load_op(a[j]), b ? load_op(b[j]) : A(0)));
  }
}

template <typename A>
__device__ __forceinline__ A param_or(const A* p, int64_t i, A fallback) {
  return p != nullptr ? p[i] : fallback;
}

// Calls f.template operator()<T>() for the floating dtypes only (the kernels' registrations).
template <typename F>
void visit_floating(DType dtype, F&& f) {
  visit_device_dtype(dtype, [&]<typename T>() {
    if constexpr (std::is_floating_point_v<opmath_t<T>>) f.template operator()<T>();
  });
}

inline void check_launch(const char* what, DType dtype) {
  PRECIS_CUDA_CHECK(cudaGetLastError(), "launching the ", what, " kernels (", dtype_name(dtype), ")");
}

}  // namespace precis::cuda
