// CUDA multi-tensor-apply kernels for the fused optimizer updates (sgd_step, adam_step;
// ops/contracts/kernels_optim.h). One launch covers many parameters: each block processes one chunk of
// kChunk elements of one tensor, named by the launch's block table. The element math is
// ops/math/optim_math.h, shared with the CPU kernels (nvcc may contract the remaining multiply-adds
// into FMA: CUDA results agree with the CPU's to rounding, not bit for bit).
//
// found_inf is read by every block (a skipped step touches nothing), as are a capturable
// optimizer's scheduled lr and momentum, and the per-parameter step counters are read by the
// update kernel and bumped by a second kernel queued after all of a call's update launches, so no
// host synchronisation is needed.
#include <cstdint>
#include <type_traits>

#include "ops/cuda/device_math.cuh"
#include "ops/math/optim_math.h"

namespace precis::cuda {
namespace {

using kernels::AdamHyper;
using kernels::AdamTensor;
using kernels::StepInputs;
using kernels::SgdHyper;
using kernels::SgdTensor;

constexpr int kMaxTensors = 24;  // keeps the kernel parameter block under 4 KiB
constexpr int kMaxBlocks = 320;
constexpr int64_t kChunk = 65536;  // elements per block
constexpr int kUpdateThreads = 512;
constexpr int kMaxSteps = 384;

template <typename Args>
struct LaunchArgs {
  Args t[kMaxTensors];
  unsigned char block_tensor[kMaxBlocks];
  int block_chunk[kMaxBlocks];
};
static_assert(sizeof(LaunchArgs<AdamTensor>) + sizeof(AdamHyper) + sizeof(StepInputs) <= 4096,
              "optimizer kernel parameters exceed 4 KiB");

struct StepArgs {
  float* step[kMaxSteps];
  int count;
};

__device__ __forceinline__ bool skipped(const StepInputs& sc) { return sc.found_inf != nullptr && *sc.found_inf != 0.0f; }

// param, grad, momentum buffer of one chunk: (kChunk,). P, G: device storage types; the update
// runs in opmath_t<P> (f64 for f64 parameters, fp32 otherwise, on the master for f16/bf16).
template <typename P, typename G>
__global__ void sgd_kernel(LaunchArgs<SgdTensor> a, SgdHyper host_hyper, StepInputs sc) {
  using C = opmath_t<P>;
  if (skipped(sc)) return;
  const SgdHyper h = kernels::apply_scheduled(host_hyper, sc);
  const SgdTensor& t = a.t[a.block_tensor[blockIdx.x]];
  const int64_t begin = static_cast<int64_t>(a.block_chunk[blockIdx.x]) * kChunk;
  const int64_t end = begin + kChunk < t.numel ? begin + kChunk : t.numel;
  const bool first = t.step != nullptr && *t.step == 0.0f;
  C* buf = static_cast<C*>(t.momentum_buffer);
  kernels::SgdScalars<C> s = kernels::make_sgd_scalars<C>(h);
  // The buffer exists when the optimizer's own momentum is nonzero; a scheduled momentum (read on
  // the device) cannot add one: without it the step is plain SGD, as on the CPU.
  s.has_momentum = s.has_momentum && buf != nullptr;
  const bool scaled = sc.grad_scale != nullptr;
  const C inv = scaled ? static_cast<C>(kernels::inverse_scale(*sc.grad_scale)) : C(1);
  P* param = static_cast<P*>(t.param);
  const G* grad = static_cast<const G*>(t.grad);
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    C g = static_cast<C>(load_op(grad[i]));
    if (scaled) g = g * inv;
    C p;
    if constexpr (is_reduced_float_v<P>) p = t.master[i]; else p = param[i];
    kernels::sgd_element<C>(p, g, buf ? buf + i : nullptr, first, s);
    if constexpr (is_reduced_float_v<P>) {
      t.master[i] = p;
      param[i] = store_op<P>(p);
    } else {
      param[i] = p;
    }
  }
}

// param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq of one chunk: (kChunk,)
template <typename P, typename G>
__global__ void adam_kernel(LaunchArgs<AdamTensor> a, AdamHyper host_hyper, StepInputs sc) {
  using C = opmath_t<P>;
  if (skipped(sc)) return;
  const AdamTensor& t = a.t[a.block_tensor[blockIdx.x]];
  const int64_t begin = static_cast<int64_t>(a.block_chunk[blockIdx.x]) * kChunk;
  const int64_t end = begin + kChunk < t.numel ? begin + kChunk : t.numel;
  // The bias corrections (two pow in double) once per block.
  __shared__ kernels::AdamScalars<C> shared_s;
  if (threadIdx.x == 0)
    shared_s = kernels::make_adam_scalars<C>(kernels::apply_scheduled(host_hyper, sc), static_cast<double>(*t.step + 1.0f));
  __syncthreads();
  const kernels::AdamScalars<C> s = shared_s;
  const bool scaled = sc.grad_scale != nullptr;
  const C inv = scaled ? static_cast<C>(kernels::inverse_scale(*sc.grad_scale)) : C(1);
  P* param = static_cast<P*>(t.param);
  const G* grad = static_cast<const G*>(t.grad);
  C* m = static_cast<C*>(t.exp_avg);
  C* v = static_cast<C*>(t.exp_avg_sq);
  C* vmax = static_cast<C*>(t.max_exp_avg_sq);
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    C g = static_cast<C>(load_op(grad[i]));
    if (scaled) g = g * inv;
    C p;
    if constexpr (is_reduced_float_v<P>) p = t.master[i]; else p = param[i];
    C mi = m[i], vi = v[i];
    kernels::adam_element<C>(p, g, mi, vi, vmax ? vmax + i : nullptr, s);
    m[i] = mi;
    v[i] = vi;
    if constexpr (is_reduced_float_v<P>) {
      t.master[i] = p;
      param[i] = store_op<P>(p);
    } else {
      param[i] = p;
    }
  }
}

__global__ void bump_steps_kernel(StepArgs a, StepInputs sc) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < a.count && !skipped(sc)) *a.step[i] += 1.0f;
}

/// Splits the tensors into launches of at most kMaxTensors tensors / kMaxBlocks chunks, then bumps
/// every step counter once all updates are queued.
template <typename Args, typename Launch>
void multi_tensor_apply(const Args* tensors, int count, const StepInputs& sc, const char* what, cudaStream_t stream,
                        Launch&& launch) {
  LaunchArgs<Args> args;
  int ntensors = 0, nblocks = 0;
  auto flush = [&] {
    if (nblocks > 0) {
      launch(args, nblocks);
      PRECIS_CUDA_CHECK(cudaGetLastError(), "launching the ", what, " kernel");
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
  auto flush_steps = [&] {
    if (steps.count == 0) return;
    bump_steps_kernel<<<(steps.count + 127) / 128, 128, 0, stream>>>(steps, sc);
    PRECIS_CUDA_CHECK(cudaGetLastError(), "launching the ", what, " step-counter kernel");
    steps.count = 0;
  };
  for (int i = 0; i < count; ++i) {
    if (tensors[i].step == nullptr) continue;  // an empty parameter's counter counts too, as on the CPU
    steps.step[steps.count++] = tensors[i].step;
    if (steps.count == kMaxSteps) flush_steps();
  }
  flush_steps();
}

/// Calls f.template operator()<P, G>() for the device types of an accepted (param, grad) dtype
/// pair: the same dtype, or an f32 gradient for an f16/bf16 parameter (checked by the caller).
template <typename F>
void visit_param_grad(DType param_dtype, DType grad_dtype, F&& f) {
  visit_floating_dtype<DeviceTypes>(param_dtype, [&]<typename P>() {
    if (grad_dtype == param_dtype) {
      f.template operator()<P, P>();
    } else if constexpr (is_reduced_float_v<P>) {
      f.template operator()<P, float>();
    }
  });
}

}  // namespace

void launch_sgd_step(DType param_dtype, DType grad_dtype, const SgdTensor* tensors, int count, const SgdHyper& h,
                     const StepInputs& s, cudaStream_t stream) {
  visit_param_grad(param_dtype, grad_dtype, [&]<typename P, typename G>() {
    multi_tensor_apply(tensors, count, s, "sgd_step", stream, [&](const LaunchArgs<SgdTensor>& a, int blocks) {
      sgd_kernel<P, G><<<blocks, kUpdateThreads, 0, stream>>>(a, h, s);
    });
  });
}

void launch_adam_step(DType param_dtype, DType grad_dtype, const AdamTensor* tensors, int count, const AdamHyper& h,
                      const StepInputs& s, cudaStream_t stream) {
  visit_param_grad(param_dtype, grad_dtype, [&]<typename P, typename G>() {
    multi_tensor_apply(tensors, count, s, "adam_step", stream, [&](const LaunchArgs<AdamTensor>& a, int blocks) {
      adam_kernel<P, G><<<blocks, kUpdateThreads, 0, stream>>>(a, h, s);
    });
  });
}

}  // namespace precis::cuda
