// CUDA kernels of the class-index losses: cross_entropy (forward, backward) and nll_loss
// (ops/cpu/loss.cpp on the CPU). One block per row of logits (row_blocks.cuh); the per-row math is
// ops/math/norm_math.h, shared with the host tests. A target out of range gives its row a NaN loss
// (the op's device-side check reports it, ops/device_asserts.h). Deterministic, no atomics.
#include <cmath>

#include "ops/cuda/norm_launch.h"
#include "ops/cuda/row_blocks.cuh"
#include "ops/math/norm_math.h"

namespace precis::cuda {

namespace {

using namespace precis::kernels;
using std::exp;
using std::log;

// ---- class-index losses ----------------------------------------------------------------------------

// scratch[0] = Σ_c w_c (C without weights), one block, a fixed tree.
template <typename A>
__global__ void weight_total_kernel(double* out, const A* w, int64_t C) {
  __shared__ double shared[32];
  double s = 0;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) s += w != nullptr ? static_cast<double>(w[c]) : 1.0;
  s = block_reduce(s, SumOp{}, shared);
  if (threadIdx.x == 0) out[0] = s;
}

// A cross-entropy target the op layer did not range-check (it reads no targets back from the
// device, ops/loss.cpp): outside [0, C) and not ignore_index, its row's loss, weight and gradient
// are NaN, so the loss shows it, and no class weight or logit is read out of bounds.
__device__ __forceinline__ bool target_out_of_range(int64_t t, int64_t C) { return t < 0 || t >= C; }

template <typename T>
__global__ void cross_entropy_kernel(opmath_t<T>* loss, opmath_t<T>* wrow, opmath_t<T>* stats, const T* __restrict__ x,
                                     const int64_t* target, const opmath_t<T>* w, const double* w_total, int64_t M,
                                     int64_t C, int64_t ignore_index, double label_smoothing, bool vec) {
  using A = opmath_t<T>;
  __shared__ A shared[32];
  const A eps = static_cast<A>(label_smoothing);
  for (int64_t r = blockIdx.x; r < M; r += gridDim.x) {
    const T* xr = x + r * C;
    A m = -INFINITY;
    row_for_each(xr, C, vec, [&](int64_t, A v) { m = v > m ? v : m; });
    m = block_reduce(m, MaxOp{}, shared);
    A s = 0;
    row_for_each(xr, C, vec, [&](int64_t, A v) { s += exp(v - m); });
    s = block_reduce(s, SumOp{}, shared);
    const A log_sum = log(s);
    const int64_t t = target[r];
    A gap = 0;
    if (eps != A(0) && t != ignore_index) {
      row_for_each(xr, C, vec, [&](int64_t j, A v) { gap += param_or(w, j, A(1)) * (m - v); });
      gap = block_reduce(gap, SumOp{}, shared);
    }
    if (threadIdx.x == 0) {
      stats[2 * r] = m;
      stats[2 * r + 1] = log_sum;
      if (t == ignore_index) {
        loss[r] = 0;
        wrow[r] = 0;
      } else if (target_out_of_range(t, C)) {
        loss[r] = A(NAN);
        wrow[r] = A(NAN);
      } else {
        const A wt = param_or(w, t, A(1));
        loss[r] = cross_entropy_row_loss(m, log_sum, load_op(xr[t]), wt, eps, C, static_cast<A>(w_total[0]), gap);
        wrow[r] = wt;
      }
    }
  }
}

template <typename T>
__global__ void cross_entropy_backward_kernel(T* grad_x, const T* __restrict__ x, const opmath_t<T>* stats,
                                              const int64_t* target, const opmath_t<T>* w, const opmath_t<T>* grad_rows,
                                              int64_t gr_stride, const double* w_total, int64_t M, int64_t C,
                                              int64_t ignore_index, double label_smoothing, bool vec) {
  using A = opmath_t<T>;
  const A eps = static_cast<A>(label_smoothing);
  for (int64_t r = blockIdx.x; r < M; r += gridDim.x) {
    const T* xr = x + r * C;
    T* out = grad_x + r * C;
    const int64_t t = target[r];
    if (t == ignore_index) {
      row_map<T>(out, xr, nullptr, C, vec, [](int64_t, A, A) { return A(0); });
      continue;
    }
    if (target_out_of_range(t, C)) {
      row_map<T>(out, xr, nullptr, C, vec, [](int64_t, A, A) { return A(NAN); });
      continue;
    }
    const A m = stats[2 * r];
    const CrossEntropyGradCoefs<A> k = cross_entropy_grad_coefs(grad_rows[r * gr_stride], param_or(w, t, A(1)), eps, C,
                                                                static_cast<A>(w_total[0]), stats[2 * r + 1]);
    row_map<T>(out, xr, nullptr, C, vec, [&](int64_t j, A v, A) {
      return cross_entropy_grad_element(v, m, k, param_or(w, j, A(1)), j == t);
    });
  }
}

template <typename T>
__global__ void nll_loss_kernel(opmath_t<T>* loss, opmath_t<T>* wrow, const T* __restrict__ x, int64_t s0, int64_t s1,
                                const int64_t* target, const opmath_t<T>* w, int64_t M, int64_t C,
                                int64_t ignore_index) {
  using A = opmath_t<T>;
  PRECIS_GRID_STRIDE_LOOP(r, M) {
    const int64_t t = target[r];
    if (t == ignore_index) {
      loss[r] = 0;
      wrow[r] = 0;
    } else if (target_out_of_range(t, C)) {  // reported by the op's device assert; never read x there
      loss[r] = A(NAN);
      wrow[r] = A(NAN);
    } else {
      const A wt = param_or(w, t, A(1));
      loss[r] = -wt * load_op(x[r * s0 + t * s1]);
      wrow[r] = wt;
    }
  }
}

}  // namespace

void launch_cross_entropy(DType dtype, void* loss_rows, void* weight_rows, void* row_stats, const void* x,
                          const int64_t* target, const void* weight, int64_t M, int64_t C, int64_t ignore_index,
                          double label_smoothing, double* scratch, cudaStream_t stream) {
  if (M == 0) return;
  visit_floating(dtype, [&]<typename T>() {
    using A = opmath_t<T>;
    const A* w = static_cast<const A*>(weight);
    weight_total_kernel<A><<<1, kThreads, 0, stream>>>(scratch, w, C);
    const bool vec = C % 4 == 0 && aligned4(x, sizeof(T));
    cross_entropy_kernel<T><<<grid_rows(M), row_threads(vec ? C / 4 : C), 0, stream>>>(
        static_cast<A*>(loss_rows), static_cast<A*>(weight_rows), static_cast<A*>(row_stats),
        static_cast<const T*>(x), target, w, scratch, M, C, ignore_index, label_smoothing, vec);
  });
  check_launch("cross_entropy", dtype);
}

void launch_cross_entropy_backward(DType dtype, void* grad_x, const void* x, const void* row_stats,
                                   const int64_t* target, const void* weight, const void* grad_rows,
                                   int64_t grad_rows_stride, int64_t M, int64_t C, int64_t ignore_index,
                                   double label_smoothing, double* scratch, cudaStream_t stream) {
  if (M == 0 || C == 0) return;
  visit_floating(dtype, [&]<typename T>() {
    using A = opmath_t<T>;
    const A* w = static_cast<const A*>(weight);
    weight_total_kernel<A><<<1, kThreads, 0, stream>>>(scratch, w, C);
    const bool vec = C % 4 == 0 && aligned4(x, sizeof(T)) && aligned4(grad_x, sizeof(T));
    cross_entropy_backward_kernel<T><<<grid_rows(M), row_threads(vec ? C / 4 : C), 0, stream>>>(
        static_cast<T*>(grad_x), static_cast<const T*>(x), static_cast<const A*>(row_stats), target, w,
        static_cast<const A*>(grad_rows), grad_rows_stride, scratch, M, C, ignore_index, label_smoothing, vec);
  });
  check_launch("cross_entropy_backward", dtype);
}

void launch_nll_loss(DType dtype, void* loss_rows, void* weight_rows, const void* x, int64_t s0, int64_t s1,
                     const int64_t* target, const void* weight, int64_t M, int64_t C, int64_t ignore_index,
                     cudaStream_t stream) {
  if (M == 0) return;
  visit_floating(dtype, [&]<typename T>() {
    using A = opmath_t<T>;
    nll_loss_kernel<T><<<grid_for(M), kThreads, 0, stream>>>(static_cast<A*>(loss_rows), static_cast<A*>(weight_rows),
                                                             static_cast<const T*>(x), s0, s1, target,
                                                             static_cast<const A*>(weight), M, C, ignore_index);
  });
  check_launch("nll_loss", dtype);
}

}  // namespace precis::cuda
