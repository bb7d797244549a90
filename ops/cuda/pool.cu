// 2-D pooling kernels on CUDA devices: max (with indices), average and adaptive average, and
// their backward passes. One thread per output element running the window math of
// ops/math/pool_math.h (the functions the CPU tests check against the CPU kernels); the backward passes
// gather each input element's gradient from the windows covering it, so nothing is added by two
// threads: deterministic, no atomics, and equal to the CPU's bit for bit.
#include "ops/cuda/device_math.cuh"
#include "ops/cuda/index_pool_kernels.h"

namespace precis::cuda {

namespace {

using kernels::PoolGeometry;

// Forward: out (planes, ho, wo) from x (planes, h, w).
template <PoolOp Op, typename T>
__global__ void pool_forward_kernel(T* __restrict__ out, int64_t* __restrict__ indices, const T* __restrict__ x,
                                    int64_t planes, const PoolGeometry g) {
  const int64_t per_plane = g.ho * g.wo;
  PRECIS_GRID_STRIDE_LOOP(i, planes * per_plane) {
    const int64_t plane = i / per_plane, o = i % per_plane;
    const int64_t oh = o / g.wo, ow = o % g.wo;
    const T* xp = x + plane * g.h * g.w;
    if constexpr (Op == PoolOp::max) {
      const auto r = kernels::max_pool2d_window(xp, g, oh, ow);
      out[i] = store_op<T>(r.value);
      if (indices != nullptr) indices[i] = r.index;
    } else if constexpr (Op == PoolOp::avg) {
      out[i] = store_op<T>(kernels::avg_pool2d_window(xp, g, oh, ow));
    } else {
      out[i] = store_op<T>(kernels::adaptive_avg_pool2d_window(xp, g, oh, ow));
    }
  }
}

// Backward: grad_x (planes, h, w) from grad_out (planes, ho, wo) (and the max's indices).
template <PoolOp Op, typename T>
__global__ void pool_backward_kernel(T* __restrict__ grad_x, const T* __restrict__ grad_out,
                                     const int64_t* __restrict__ indices, int64_t planes, const PoolGeometry g) {
  const int64_t per_plane = g.h * g.w;
  PRECIS_GRID_STRIDE_LOOP(i, planes * per_plane) {
    const int64_t plane = i / per_plane, e = i % per_plane;
    const int64_t ih = e / g.w, iw = e % g.w;
    const T* gp = grad_out + plane * g.ho * g.wo;
    if constexpr (Op == PoolOp::max_backward) {
      grad_x[i] = store_op<T>(kernels::max_pool2d_backward_at(gp, indices + plane * g.ho * g.wo, g, ih, iw));
    } else if constexpr (Op == PoolOp::avg_backward) {
      grad_x[i] = store_op<T>(kernels::avg_pool2d_backward_at(gp, g, ih, iw));
    } else {
      grad_x[i] = store_op<T>(kernels::adaptive_avg_pool2d_backward_at(gp, g, ih, iw));
    }
  }
}

template <typename T>
void run(PoolOp op, T* out, int64_t* out_indices, const T* in, const int64_t* in_indices, int64_t planes,
         const PoolGeometry& g, cudaStream_t s) {
  const int64_t fwd = planes * g.ho * g.wo, bwd = planes * g.h * g.w;
  switch (op) {
    case PoolOp::max:
      pool_forward_kernel<PoolOp::max, T><<<grid_for(fwd), kThreads, 0, s>>>(out, out_indices, in, planes, g);
      break;
    case PoolOp::avg:
      pool_forward_kernel<PoolOp::avg, T><<<grid_for(fwd), kThreads, 0, s>>>(out, nullptr, in, planes, g);
      break;
    case PoolOp::adaptive_avg:
      pool_forward_kernel<PoolOp::adaptive_avg, T><<<grid_for(fwd), kThreads, 0, s>>>(out, nullptr, in, planes, g);
      break;
    case PoolOp::max_backward:
      pool_backward_kernel<PoolOp::max_backward, T><<<grid_for(bwd), kThreads, 0, s>>>(out, in, in_indices, planes, g);
      break;
    case PoolOp::avg_backward:
      pool_backward_kernel<PoolOp::avg_backward, T><<<grid_for(bwd), kThreads, 0, s>>>(out, in, nullptr, planes, g);
      break;
    case PoolOp::adaptive_avg_backward:
      pool_backward_kernel<PoolOp::adaptive_avg_backward, T><<<grid_for(bwd), kThreads, 0, s>>>(out, in, nullptr,
                                                                                                planes, g);
      break;
  }
}

}  // namespace

void launch_pool2d(PoolOp op, DType dtype, void* out, int64_t* out_indices, const void* in, const int64_t* in_indices,
                   int64_t planes, const kernels::PoolGeometry& g, cudaStream_t stream) {
  const bool backward = op == PoolOp::max_backward || op == PoolOp::avg_backward || op == PoolOp::adaptive_avg_backward;
  if (planes * (backward ? g.h * g.w : g.ho * g.wo) == 0) return;
  switch (dtype) {
    case DType::f32: run(op, static_cast<float*>(out), out_indices, static_cast<const float*>(in), in_indices, planes, g, stream); break;
    case DType::f64: run(op, static_cast<double*>(out), out_indices, static_cast<const double*>(in), in_indices, planes, g, stream); break;
    case DType::f16: run(op, static_cast<__half*>(out), out_indices, static_cast<const __half*>(in), in_indices, planes, g, stream); break;
    case DType::bf16:
      run(op, static_cast<__nv_bfloat16*>(out), out_indices, static_cast<const __nv_bfloat16*>(in), in_indices, planes,
          g, stream);
      break;
    default: PRECIS_INTERNAL_ASSERT(false, "pool2d: no CUDA kernel for ", dtype_name(dtype));
  }
  PRECIS_CUDA_CHECK(cudaGetLastError(), "launching the pooling kernel (", dtype_name(dtype), ", ", planes,
                    " planes of ", g.h, "x", g.w, " -> ", g.ho, "x", g.wo, ")");
}

}  // namespace precis::cuda
