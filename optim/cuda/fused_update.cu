// CUDA multi-tensor-apply kernels for the fused optimizer updates. One launch covers many
// parameters: each block processes one chunk of kChunk elements of one tensor, named by the
// launch's block table. The element math is optim/fused_update.h, shared with the CPU kernels
// (nvcc may contract the remaining multiply-adds into FMA: CUDA results agree with the CPU's to
// rounding, not bit for bit).
//
// found_inf is read by every block (a skipped step touches nothing) and the per-parameter step
// counters are read by the update kernel and bumped by a second kernel queued after all of a
// call's update launches, so no host synchronisation is needed.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "core/cuda/cuda_context.h"
#include "core/error.h"
#include "optim/cuda/fused_update_cuda.h"

namespace precis::optim::detail {
namespace {

constexpr int kMaxTensors = 24;    // keeps the kernel parameter block under 4 KiB
constexpr int kMaxBlocks = 320;
constexpr int64_t kChunk = 65536;  // elements per block
constexpr int kThreads = 512;
constexpr int kMaxSteps = 384;

template <typename Args>
struct LaunchArgs {
  Args t[kMaxTensors];
  unsigned char block_tensor[kMaxBlocks];
  int block_chunk[kMaxBlocks];
};

struct StepArgs {
  float* step[kMaxSteps];
  int count;
};

// Storage tags for the element types; f16/bf16 move as raw 16-bit patterns.
struct F16 {};
struct BF16 {};
template <typename T> struct StorageOf { using type = T; };
template <> struct StorageOf<F16> { using type = uint16_t; };
template <> struct StorageOf<BF16> { using type = uint16_t; };
template <typename T> using storage_t = typename StorageOf<T>::type;
template <typename T> constexpr bool kLow = false;
template <> constexpr bool kLow<F16> = true;
template <> constexpr bool kLow<BF16> = true;
template <typename P> struct ComputeOf { using type = float; };
template <> struct ComputeOf<double> { using type = double; };
template <typename P> using compute_t = typename ComputeOf<P>::type;

template <typename T, typename C>
__device__ __forceinline__ C load_as(storage_t<T> v) {
  if constexpr (std::is_same_v<T, F16>) {
    return static_cast<C>(__half2float(__ushort_as_half(v)));
  } else if constexpr (std::is_same_v<T, BF16>) {
    return static_cast<C>(__bfloat162float(__ushort_as_bfloat16(v)));
  } else {
    return static_cast<C>(v);
  }
}

template <typename T>
__device__ __forceinline__ uint16_t round_low(float v) {
  if constexpr (std::is_same_v<T, F16>) {
    return __half_as_ushort(__float2half_rn(v));
  } else {
    return __bfloat16_as_ushort(__float2bfloat16_rn(v));
  }
}

__device__ __forceinline__ bool skipped(const ScalerArgs& sc) { return sc.found_inf != nullptr && *sc.found_inf != 0.0f; }

// param, grad, momentum buffer of one chunk: (kChunk,)
template <typename P, typename G>
__global__ void sgd_kernel(LaunchArgs<SgdTensor> a, SgdHyper h, ScalerArgs sc) {
  using C = compute_t<P>;
  if (skipped(sc)) return;
  const SgdTensor& t = a.t[a.block_tensor[blockIdx.x]];
  const int64_t begin = static_cast<int64_t>(a.block_chunk[blockIdx.x]) * kChunk;
  const int64_t end = begin + kChunk < t.numel ? begin + kChunk : t.numel;
  const bool first = t.step != nullptr && *t.step == 0.0f;
  const SgdScalars<C> s = make_sgd_scalars<C>(h);
  const bool scaled = sc.grad_scale != nullptr;
  const C inv = scaled ? static_cast<C>(inverse_scale(*sc.grad_scale)) : C(1);
  auto* param = static_cast<storage_t<P>*>(t.param);
  const auto* grad = static_cast<const storage_t<G>*>(t.grad);
  C* buf = static_cast<C*>(t.momentum_buffer);
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    C g = load_as<G, C>(grad[i]);
    if (scaled) g = g * inv;
    C p;
    if constexpr (kLow<P>) p = t.master[i]; else p = param[i];
    sgd_element<C>(p, g, buf ? buf + i : nullptr, first, s);
    if constexpr (kLow<P>) {
      t.master[i] = p;
      param[i] = round_low<P>(p);
    } else {
      param[i] = p;
    }
  }
}

// param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq of one chunk: (kChunk,)
template <typename P, typename G>
__global__ void adam_kernel(LaunchArgs<AdamTensor> a, AdamHyper h, ScalerArgs sc) {
  using C = compute_t<P>;
  if (skipped(sc)) return;
  const AdamTensor& t = a.t[a.block_tensor[blockIdx.x]];
  const int64_t begin = static_cast<int64_t>(a.block_chunk[blockIdx.x]) * kChunk;
  const int64_t end = begin + kChunk < t.numel ? begin + kChunk : t.numel;
  // The bias corrections (two pow in double) once per block.
  __shared__ AdamScalars<C> shared_s;
  if (threadIdx.x == 0) shared_s = make_adam_scalars<C>(h, static_cast<double>(*t.step + 1.0f));
  __syncthreads();
  const AdamScalars<C> s = shared_s;
  const bool scaled = sc.grad_scale != nullptr;
  const C inv = scaled ? static_cast<C>(inverse_scale(*sc.grad_scale)) : C(1);
  auto* param = static_cast<storage_t<P>*>(t.param);
  const auto* grad = static_cast<const storage_t<G>*>(t.grad);
  C* m = static_cast<C*>(t.exp_avg);
  C* v = static_cast<C*>(t.exp_avg_sq);
  C* vmax = static_cast<C*>(t.max_exp_avg_sq);
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    C g = load_as<G, C>(grad[i]);
    if (scaled) g = g * inv;
    C p;
    if constexpr (kLow<P>) p = t.master[i]; else p = param[i];
    C mi = m[i], vi = v[i];
    adam_element<C>(p, g, mi, vi, vmax ? vmax + i : nullptr, s);
    m[i] = mi;
    v[i] = vi;
    if constexpr (kLow<P>) {
      t.master[i] = p;
      param[i] = round_low<P>(p);
    } else {
      param[i] = p;
    }
  }
}

__global__ void bump_steps_kernel(StepArgs a, ScalerArgs sc) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < a.count && !skipped(sc)) *a.step[i] += 1.0f;
}

void check_launch(const char* what) {
  const cudaError_t err = cudaGetLastError();
  PRECIS_CHECK_T(::precis::Error, err == cudaSuccess, what, ": CUDA launch failed: ", cudaGetErrorString(err));
}

/// Splits the tensors into launches of at most kMaxTensors tensors / kMaxBlocks chunks, then bumps
/// every step counter once all updates are queued.
template <typename Args, typename Launch>
void multi_tensor_apply(const Args* tensors, int count, const ScalerArgs& sc, const char* what, cudaStream_t stream,
                        Launch&& launch) {
  LaunchArgs<Args> args;
  int ntensors = 0, nblocks = 0;
  auto flush = [&] {
    if (nblocks > 0) {
      launch(args, nblocks);
      check_launch(what);
    }
    ntensors = nblocks = 0;
  };
  for (int i = 0; i < count; ++i) {
    const Args& t = tensors[i];
    if (t.numel == 0) continue;
    const int64_t chunks = (t.numel + kChunk - 1) / kChunk;
    for (int64_t c = 0; c < chunks; ++c) {
      if (c == 0 || nblocks == 0) {
        if (ntensors == kMaxTensors) flush();
        args.t[ntensors++] = t;
      }
      args.block_tensor[nblocks] = static_cast<unsigned char>(ntensors - 1);
      args.block_chunk[nblocks] = static_cast<int>(c);
      if (++nblocks == kMaxBlocks) flush();
    }
  }
  flush();
  StepArgs steps;
  steps.count = 0;
  for (int i = 0; i < count; ++i) {
    if (tensors[i].step == nullptr || tensors[i].numel == 0) continue;
    steps.step[steps.count++] = tensors[i].step;
    if (steps.count == kMaxSteps) {
      bump_steps_kernel<<<(steps.count + 127) / 128, 128, 0, stream>>>(steps, sc);
      check_launch(what);
      steps.count = 0;
    }
  }
  if (steps.count > 0) {
    bump_steps_kernel<<<(steps.count + 127) / 128, 128, 0, stream>>>(steps, sc);
    check_launch(what);
  }
}

template <typename F>
void visit_pair(int param_dtype, int grad_dtype, F&& f) {
  if (param_dtype == grad_dtype) {
    switch (param_dtype) {
      case kF32: return f.template operator()<float, float>();
      case kF64: return f.template operator()<double, double>();
      case kF16: return f.template operator()<F16, F16>();
      case kBF16: return f.template operator()<BF16, BF16>();
    }
  } else if (grad_dtype == kF32) {
    if (param_dtype == kF16) return f.template operator()<F16, float>();
    if (param_dtype == kBF16) return f.template operator()<BF16, float>();
  }
  PRECIS_INTERNAL_ASSERT(false, "unchecked (param, grad) dtype pair ", param_dtype, ", ", grad_dtype);
}

}  // namespace

void sgd_update_cuda(int device, const SgdTensor* tensors, int count, int param_dtype, int grad_dtype,
                     const SgdHyper& h, const ScalerArgs& s) {
  cuda::DeviceGuard guard(device);
  cudaStream_t stream = cuda::device_stream(device);
  visit_pair(param_dtype, grad_dtype, [&]<typename P, typename G>() {
    multi_tensor_apply(tensors, count, s, "SGD.step", stream, [&](const LaunchArgs<SgdTensor>& a, int blocks) {
      sgd_kernel<P, G><<<blocks, kThreads, 0, stream>>>(a, h, s);
    });
  });
}

void adam_update_cuda(int device, const AdamTensor* tensors, int count, int param_dtype, int grad_dtype,
                      const AdamHyper& h, const ScalerArgs& s) {
  cuda::DeviceGuard guard(device);
  cudaStream_t stream = cuda::device_stream(device);
  visit_pair(param_dtype, grad_dtype, [&]<typename P, typename G>() {
    multi_tensor_apply(tensors, count, s, "Adam.step", stream, [&](const LaunchArgs<AdamTensor>& a, int blocks) {
      adam_kernel<P, G><<<blocks, kThreads, 0, stream>>>(a, h, s);
    });
  });
}

}  // namespace precis::optim::detail
