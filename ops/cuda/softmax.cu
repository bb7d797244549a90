// CUDA kernels of softmax and log_softmax, forward and backward (ops/cpu/softmax.cpp on the CPU).
// The per-row math is ops/math/norm_math.h, shared with the host tests. Softmax over the last dim gets
// one block per row (row_blocks.cuh); over another dim one thread per (outer, inner) column,
// adjacent threads on adjacent columns. Deterministic, no atomics (ops/cuda/norm_launch.h).
#include <cmath>

#include "ops/cuda/norm_launch.h"
#include "ops/cuda/row_blocks.cuh"
#include "ops/math/norm_math.h"

namespace precis::cuda {

namespace {

using namespace precis::kernels;
using std::exp;
using std::log;

// ---- softmax ---------------------------------------------------------------------------------------

// Rows (inner == 1): one block per row: max, Σ exp(x − max), then the outputs.
template <typename T, bool kLog>
__global__ void softmax_rows_kernel(T* y, const T* __restrict__ x, int64_t rows, int64_t D, bool vec) {
  using A = opmath_t<T>;
  __shared__ A shared[32];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* xr = x + r * D;
    A m = -INFINITY;
    row_for_each(xr, D, vec, [&](int64_t, A v) { m = v > m ? v : m; });
    m = block_reduce(m, MaxOp{}, shared);
    A s = 0;
    row_for_each(xr, D, vec, [&](int64_t, A v) { s += exp(v - m); });
    s = block_reduce(s, SumOp{}, shared);
    if constexpr (kLog) {
      const A ls = log(s);
      row_map<T>(y + r * D, xr, nullptr, D, vec, [&](int64_t, A v, A) { return log_softmax_element(v, m, ls); });
    } else {
      const A inv = A(1) / s;
      row_map<T>(y + r * D, xr, nullptr, D, vec, [&](int64_t, A v, A) { return softmax_element(v, m, inv); });
    }
  }
}

// Columns (inner > 1): one thread per (outer, inner) position walks the dim (stride inner).
template <typename T, bool kLog>
__global__ void softmax_columns_kernel(T* y, const T* __restrict__ x, int64_t outer, int64_t D, int64_t inner) {
  using A = opmath_t<T>;
  PRECIS_GRID_STRIDE_LOOP(p, outer * inner) {
    const int64_t o = p / inner, j = p % inner;
    const T* xc = x + o * D * inner + j;
    T* yc = y + o * D * inner + j;
    A m = -INFINITY;
    for (int64_t d = 0; d < D; ++d) {
      const A v = load_op(xc[d * inner]);
      m = v > m ? v : m;
    }
    A s = 0;
    for (int64_t d = 0; d < D; ++d) s += exp(load_op(xc[d * inner]) - m);
    if constexpr (kLog) {
      const A ls = log(s);
      for (int64_t d = 0; d < D; ++d) yc[d * inner] = store_op<T>(log_softmax_element(load_op(xc[d * inner]), m, ls));
    } else {
      const A inv = A(1) / s;
      for (int64_t d = 0; d < D; ++d) yc[d * inner] = store_op<T>(softmax_element(load_op(xc[d * inner]), m, inv));
    }
  }
}

template <typename T, bool kLog>
__global__ void softmax_backward_rows_kernel(T* dx, const T* __restrict__ g, const T* __restrict__ y, int64_t rows,
                                             int64_t D, bool vec) {
  using A = opmath_t<T>;
  __shared__ A shared[32];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* gr = g + r * D;
    const T* yr = y + r * D;
    A acc = 0;
    if constexpr (kLog) {
      row_for_each(gr, D, vec, [&](int64_t, A v) { acc += v; });
    } else {
      // Σ g·y: y read alongside g (same ownership of elements as row_for_each).
      if (vec) {
        const Vec4<T>* vg = reinterpret_cast<const Vec4<T>*>(gr);
        const Vec4<T>* vy = reinterpret_cast<const Vec4<T>*>(yr);
        for (int64_t j = threadIdx.x; j < D / 4; j += blockDim.x) {
          const Vec4<T> qg = vg[j], qy = vy[j];
#pragma unroll
          for (int k = 0; k < 4; ++k) acc += load_op(qg.v[k]) * load_op(qy.v[k]);
        }
      } else {
        for (int64_t j = threadIdx.x; j < D; j += blockDim.x) acc += load_op(gr[j]) * load_op(yr[j]);
      }
    }
    acc = block_reduce(acc, SumOp{}, shared);
    row_map<T>(dx + r * D, gr, yr, D, vec, [&](int64_t, A gv, A yv) {
      if constexpr (kLog) return log_softmax_grad_element(gv, yv, acc);
      else return softmax_grad_element(gv, yv, acc);
    });
  }
}

template <typename T, bool kLog>
__global__ void softmax_backward_columns_kernel(T* dx, const T* __restrict__ g, const T* __restrict__ y,
                                                int64_t outer, int64_t D, int64_t inner) {
  using A = opmath_t<T>;
  PRECIS_GRID_STRIDE_LOOP(p, outer * inner) {
    const int64_t base = (p / inner) * D * inner + p % inner;
    A acc = 0;
    for (int64_t d = 0; d < D; ++d) {
      const int64_t i = base + d * inner;
      if constexpr (kLog) acc += load_op(g[i]);
      else acc += load_op(g[i]) * load_op(y[i]);
    }
    for (int64_t d = 0; d < D; ++d) {
      const int64_t i = base + d * inner;
      const A gv = load_op(g[i]), yv = load_op(y[i]);
      if constexpr (kLog) dx[i] = store_op<T>(log_softmax_grad_element(gv, yv, acc));
      else dx[i] = store_op<T>(softmax_grad_element(gv, yv, acc));
    }
  }
}

}  // namespace

void launch_softmax(DType dtype, bool log, void* y, const void* x, int64_t outer, int64_t D, int64_t inner,
                    cudaStream_t stream) {
  if (outer * D * inner == 0) return;
  visit_floating(dtype, [&]<typename T>() {
    T* py = static_cast<T*>(y);
    const T* px = static_cast<const T*>(x);
    if (inner == 1) {
      const bool vec = D % 4 == 0 && aligned4(x, sizeof(T)) && aligned4(y, sizeof(T));
      const int threads = row_threads(vec ? D / 4 : D);
      if (log) softmax_rows_kernel<T, true><<<grid_rows(outer), threads, 0, stream>>>(py, px, outer, D, vec);
      else softmax_rows_kernel<T, false><<<grid_rows(outer), threads, 0, stream>>>(py, px, outer, D, vec);
    } else {
      const unsigned int blocks = grid_for(outer * inner);
      if (log) softmax_columns_kernel<T, true><<<blocks, kThreads, 0, stream>>>(py, px, outer, D, inner);
      else softmax_columns_kernel<T, false><<<blocks, kThreads, 0, stream>>>(py, px, outer, D, inner);
    }
  });
  check_launch(log ? "log_softmax" : "softmax", dtype);
}

void launch_softmax_backward(DType dtype, bool log, void* dx, const void* grad, const void* y, int64_t outer,
                             int64_t D, int64_t inner, cudaStream_t stream) {
  if (outer * D * inner == 0) return;
  visit_floating(dtype, [&]<typename T>() {
    T* pd = static_cast<T*>(dx);
    const T* pg = static_cast<const T*>(grad);
    const T* py = static_cast<const T*>(y);
    if (inner == 1) {
      const bool vec =
          D % 4 == 0 && aligned4(dx, sizeof(T)) && aligned4(grad, sizeof(T)) && aligned4(y, sizeof(T));
      const int threads = row_threads(vec ? D / 4 : D);
      if (log) softmax_backward_rows_kernel<T, true><<<grid_rows(outer), threads, 0, stream>>>(pd, pg, py, outer, D, vec);
      else softmax_backward_rows_kernel<T, false><<<grid_rows(outer), threads, 0, stream>>>(pd, pg, py, outer, D, vec);
    } else {
      const unsigned int blocks = grid_for(outer * inner);
      if (log) softmax_backward_columns_kernel<T, true><<<blocks, kThreads, 0, stream>>>(pd, pg, py, outer, D, inner);
      else softmax_backward_columns_kernel<T, false><<<blocks, kThreads, 0, stream>>>(pd, pg, py, outer, D, inner);
    }
  });
  check_launch(log ? "log_softmax_backward" : "softmax_backward", dtype);
}

}  // namespace precis::cuda
