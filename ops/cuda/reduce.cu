// Reductions on CUDA devices: sum and mean (one set of kernels; mean scales on store) and max
// with the index of the first maximum. Accumulation: fp32 for f32/f16/bf16, f64 for f64, i64 for
// integers and bool.
//
// Deterministic, with no atomics: every output is reduced in an order fixed by the shape alone.
// Either one thread walks an output's elements in index order (short reductions, or many
// outputs), or `chunks` blocks each reduce a chunk of an output (each thread sums a strided
// subset in order, then a fixed shared-memory tree), write their partials to scratch, and a
// second kernel combines each output's partials in chunk order.
#include <limits>

#include "ops/cuda/device_math.cuh"
#include "ops/cuda/norm_launch.h"

namespace precis::cuda {

namespace {

template <typename T> struct SumAccOf { using type = int64_t; };  // integers and bool
template <> struct SumAccOf<float> { using type = float; };
template <> struct SumAccOf<double> { using type = double; };
template <> struct SumAccOf<__half> { using type = float; };
template <> struct SumAccOf<__nv_bfloat16> { using type = float; };

template <typename M>
struct MaxAcc {
  M value;
  int64_t index;  // -1: no element yet
};

// Sum (and mean): Out is T for floating inputs, i64 otherwise.
template <typename T>
struct SumReducer {
  using Acc = typename SumAccOf<T>::type;
  using Out = std::conditional_t<std::is_floating_point_v<opmath_t<T>>, T, int64_t>;
  __device__ Acc identity() const { return Acc(0); }
  __device__ Acc load(T v, int64_t, int64_t) const { return static_cast<Acc>(load_op(v)); }
  __device__ Acc combine(Acc a, Acc b) const { return a + b; }
  // scale: 1/N for mean (applied in f64 and rounded once), 0 for a plain sum.
  __device__ void store(void* out, int64_t*, int64_t o, Acc acc, double scale) const {
    if constexpr (std::is_floating_point_v<Acc>) {
      if (scale != 0.0) {
        static_cast<Out*>(out)[o] = store_op<Out>(static_cast<double>(acc) * scale);
        return;
      }
    }
    static_cast<Out*>(out)[o] = store_op<Out>(acc);
  }
};

// Max with the first index of the maximum; NaN wins (the first NaN). combine is a total order on
// (NaN, value, -index), so it is associative and commutative: any tree gives the same answer.
template <typename T>
struct MaxReducer {
  using M = opmath_t<T>;
  using Acc = MaxAcc<M>;
  __device__ Acc identity() const { return {M(0), -1}; }
  __device__ Acc load(T v, int64_t r, int64_t) const { return {load_op(v), r}; }
  __device__ Acc combine(Acc a, Acc b) const {
    if (a.index < 0) return b;
    if (b.index < 0) return a;
    if constexpr (std::is_floating_point_v<M>) {
      const bool an = a.value != a.value, bn = b.value != b.value;
      if (an || bn) {
        if (an && bn) return a.index < b.index ? a : b;
        return an ? a : b;
      }
    }
    if (a.value > b.value) return a;
    if (b.value > a.value) return b;
    return a.index < b.index ? a : b;
  }
  __device__ void store(void* out, int64_t* indices, int64_t o, Acc acc, double) const {
    static_cast<T*>(out)[o] = store_op<T>(acc.value);
    indices[o] = acc.index;
  }
};

// var's first pass: the mean of each output into an acc-typed buffer (floating T only).
template <typename T>
struct MeanToBufferReducer : SumReducer<T> {
  using Acc = typename SumReducer<T>::Acc;
  __device__ void store(void* out, int64_t*, int64_t o, Acc acc, double scale) const {
    static_cast<Acc*>(out)[o] = static_cast<Acc>(static_cast<double>(acc) * scale);
  }
};

// var's second pass: Σ (x − mean_o)² / denom, the mean read from the first pass's buffer.
template <typename T>
struct SquaredDeviationReducer : SumReducer<T> {
  using Acc = typename SumReducer<T>::Acc;
  const Acc* mean;
  double denom;
  __device__ Acc load(T v, int64_t, int64_t o) const {
    const Acc d = static_cast<Acc>(load_op(v)) - mean[o];
    return d * d;
  }
  __device__ void store(void* out, int64_t*, int64_t o, Acc acc, double) const {
    static_cast<T*>(out)[o] = store_op<T>(static_cast<opmath_t<T>>(static_cast<double>(acc) / denom));
  }
};

// Operand 0's offset for linear index i; one dim (the common case) without a division.
__device__ __forceinline__ int64_t offset_of(const OffsetCalc& c, int64_t i) {
  if (c.ndim == 1) return i * c.strides[0][0];
  int64_t off[1];
  compute_offsets<1>(c, i, off);
  return off[0];
}

// x: reduced to out (num_out,) per l; one thread per output, elements in index order.
template <typename R, typename T>
__global__ void reduce_per_thread_kernel(const R red, void* out, int64_t* indices, const T* __restrict__ x,
                                         const ReduceLaunch l, double scale) {
  PRECIS_GRID_STRIDE_LOOP(o, l.num_out) {
    const T* base = x + offset_of(l.kept, o);
    typename R::Acc acc = red.identity();
    for (int64_t r = 0; r < l.red_numel; ++r) acc = red.combine(acc, red.load(base[offset_of(l.red, r)], r, o));
    red.store(out, indices, o, acc, scale);
  }
}

// Block b reduces chunk (b % chunks) of output (b / chunks): partials[b], or out directly when
// chunks == 1. Partials: (num_out, chunks).
template <typename R, typename T>
__global__ void reduce_block_kernel(const R red, void* out, int64_t* indices, const T* __restrict__ x,
                                    typename R::Acc* __restrict__ partials, const ReduceLaunch l, double scale) {
  using Acc = typename R::Acc;
  __shared__ Acc shared[kThreads];
  const int tid = static_cast<int>(threadIdx.x);
  const int64_t total = l.num_out * l.chunks;
  for (int64_t b = blockIdx.x; b < total; b += gridDim.x) {
    const int64_t o = b / l.chunks, c = b % l.chunks;
    const T* base = x + offset_of(l.kept, o);
    const int64_t begin = c * l.chunk;
    const int64_t end = begin + l.chunk < l.red_numel ? begin + l.chunk : l.red_numel;
    Acc acc = red.identity();
    for (int64_t r = begin + tid; r < end; r += kThreads) acc = red.combine(acc, red.load(base[offset_of(l.red, r)], r, o));
    shared[tid] = acc;
    __syncthreads();
    for (int s = kThreads / 2; s > 0; s >>= 1) {
      if (tid < s) shared[tid] = red.combine(shared[tid], shared[tid + s]);
      __syncthreads();
    }
    if (tid == 0) {
      if (l.chunks == 1) red.store(out, indices, o, shared[0], scale);
      else partials[b] = shared[0];
    }
    __syncthreads();  // shared is rewritten by the next block-stride iteration
  }
}

// out[o] = the partials of output o combined in chunk order. partials: (num_out, chunks).
template <typename R>
__global__ void reduce_finish_kernel(const R red, void* out, int64_t* indices, const typename R::Acc* __restrict__ partials,
                                     int64_t num_out, int64_t chunks, double scale) {
  PRECIS_GRID_STRIDE_LOOP(o, num_out) {
    const typename R::Acc* p = partials + o * chunks;
    typename R::Acc acc = p[0];
    for (int64_t c = 1; c < chunks; ++c) acc = red.combine(acc, p[c]);
    red.store(out, indices, o, acc, scale);
  }
}

template <typename R, typename T>
void run(const R& red, void* out, int64_t* indices, const T* x, void* scratch, const ReduceLaunch& l, double scale) {
  static_assert(sizeof(typename R::Acc) <= kReducePartialBytes);
  if (l.per_thread) {
    reduce_per_thread_kernel<R, T><<<grid_for(l.num_out), kThreads, 0, l.stream>>>(red, out, indices, x, l, scale);
    return;
  }
  auto* partials = static_cast<typename R::Acc*>(scratch);
  const int64_t total = l.num_out * l.chunks;
  const unsigned int blocks = static_cast<unsigned int>(total < (1 << 18) ? total : (1 << 18));
  reduce_block_kernel<R, T><<<blocks, kThreads, 0, l.stream>>>(red, out, indices, x, partials, l, scale);
  if (l.chunks > 1)
    reduce_finish_kernel<R><<<grid_for(l.num_out), kThreads, 0, l.stream>>>(red, out, indices, partials, l.num_out,
                                                                           l.chunks, scale);
}

}  // namespace

void reduce_geometry(ReduceLaunch& l) {
  const int64_t n = l.red_numel;
  // Short reductions, or enough outputs to fill the GPU with one thread each.
  if (n <= 32 || (l.num_out >= 8192 && n <= 2048)) {
    l.per_thread = true;
    l.chunk = n;
    l.chunks = 1;
    return;
  }
  l.per_thread = false;
  // 16 elements per thread per chunk, at most 1024 chunks per output (the finish kernel walks
  // them serially).
  constexpr int64_t kMaxChunks = 1024;
  l.chunk = kThreads * 16;
  l.chunks = (n + l.chunk - 1) / l.chunk;
  if (l.chunks > kMaxChunks) {
    const int64_t per = (n + kMaxChunks - 1) / kMaxChunks;
    l.chunk = (per + kThreads - 1) / kThreads * kThreads;
    l.chunks = (n + l.chunk - 1) / l.chunk;
  }
}

void launch_reduce(ReduceOp op, DType dtype, void* out, int64_t* indices, const void* x, void* scratch,
                   const ReduceLaunch& l) {
  if (l.num_out == 0) return;
  visit_device_dtype(dtype, [&]<typename T>() {
    const T* px = static_cast<const T*>(x);
    if (op == ReduceOp::max) {
      run(MaxReducer<T>{}, out, indices, px, scratch, l, 0.0);
    } else {
      // mean of an empty reduction is NaN (0 · NaN), as on the CPU.
      const double scale = op == ReduceOp::sum ? 0.0 : (l.red_numel == 0 ? std::numeric_limits<double>::quiet_NaN()
                                                                  : 1.0 / static_cast<double>(l.red_numel));
      run(SumReducer<T>{}, out, nullptr, px, scratch, l, scale);
    }
  });
  PRECIS_CUDA_CHECK(cudaGetLastError(), "launching the reduction kernel (", dtype_name(dtype), ", ", l.num_out,
                    " outputs of ", l.red_numel, " elements)");
}

void launch_var(DType dtype, void* out, const void* x, void* means, void* scratch, const ReduceLaunch& l,
                int64_t correction) {
  if (l.num_out == 0) return;
  visit_device_dtype(dtype, [&]<typename T>() {
    if constexpr (std::is_floating_point_v<opmath_t<T>>) {
      using Acc = typename SumReducer<T>::Acc;
      const T* px = static_cast<const T*>(x);
      const double n = static_cast<double>(l.red_numel);
      // An empty reduction is NaN, as on the CPU; N − correction <= 0 gives inf/NaN by division.
      if (l.red_numel == 0) {
        ReduceLaunch empty = l;
        run(SumReducer<T>{}, out, nullptr, px, scratch, empty, std::numeric_limits<double>::quiet_NaN());
        return;
      }
      run(MeanToBufferReducer<T>{}, means, nullptr, px, scratch, l, 1.0 / n);
      SquaredDeviationReducer<T> sq;
      sq.mean = static_cast<const Acc*>(means);
      sq.denom = n - static_cast<double>(correction);
      run(sq, out, nullptr, px, scratch, l, 0.0);
    }
  });
  PRECIS_CUDA_CHECK(cudaGetLastError(), "launching the var kernels (", dtype_name(dtype), ", ", l.num_out,
                    " outputs of ", l.red_numel, " elements)");
}

}  // namespace precis::cuda
