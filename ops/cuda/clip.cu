// Gradient norms and clipping on CUDA devices (grad_norms, clip_grad_norm, clip_grad_value;
// ops/contracts/kernels_optim.h), multi-tensor apply as the unscale pass (unscale.cu): a launch covers many
// gradients of one dtype, each block one chunk of kClipChunk elements of one gradient, named by
// the block table passed by value in the kernel parameters. The element math is
// ops/math/optim_math.h, shared with the CPU kernels.
//
// grad_norms: each block accumulates its elements' power sum in f64 (each thread a strided subset
// in order, then a fixed shared-memory tree) and writes one partial; a single-block kernel adds
// each gradient's partials in chunk order. No atomics: the same result on every run (it differs
// from the CPU's, whose blocks are 8192 contiguous elements, in the last bits only).
// clip_grad_norm: one thread combines the power sums in order (as the CPU does), writes the total
// and the coefficient to device memory; the scaling kernel reads them, so the host never waits.
#include <cstdint>
#include <limits>
#include <vector>

#include "ops/cuda/device_math.cuh"
#include "ops/math/optim_math.h"

namespace precis::cuda {

namespace {

using kernels::NormKind;
using kernels::visit_norm_kind;

constexpr int kClipThreads = 512;  // 128 elements per thread per chunk
constexpr int kMaxTensors = 48;
constexpr int kMaxBlocks = 320;
constexpr int kFinishThreads = 256;

struct TensorArg {
  void* data;
  int64_t numel;
  int64_t partial_base;  // index of its first partial (grad_norms only)
  int32_t index;         // position in the call's gradient list
  int32_t chunks;
};

struct LaunchArgs {
  TensorArg t[kMaxTensors];
  uint8_t block_tensor[kMaxBlocks];
  int32_t block_chunk[kMaxBlocks];
};
static_assert(sizeof(LaunchArgs) + 64 <= 4096, "clip kernel parameters exceed 4 KiB");

/// Every gradient takes at least one block, so that its grad_norms partial range is written.
int64_t chunks_of(int64_t numel) { return numel == 0 ? 1 : (numel + kClipChunk - 1) / kClipChunk; }

struct ChunkRange {
  int64_t begin, end;
};
__device__ __forceinline__ ChunkRange chunk_range(const LaunchArgs& a, const TensorArg& t) {
  const int64_t begin = static_cast<int64_t>(a.block_chunk[blockIdx.x]) * kClipChunk;
  return {begin, begin + kClipChunk < t.numel ? begin + kClipChunk : t.numel};
}

// g: (numel,) contiguous, one chunk per block. partials: one per block of every gradient;
// ranges[2 i], ranges[2 i + 1]: gradient i's first partial and partial count.
template <typename T, NormKind K>
__global__ void __launch_bounds__(kClipThreads)
    norm_partial_kernel(const LaunchArgs a, double p, double* __restrict__ partials, int64_t* __restrict__ ranges) {
  __shared__ double shared[kClipThreads];
  const TensorArg& t = a.t[a.block_tensor[blockIdx.x]];
  const ChunkRange r = chunk_range(a, t);
  const T* g = static_cast<const T*>(t.data);
  double acc = 0.0;
  for (int64_t i = r.begin + threadIdx.x; i < r.end; i += kClipThreads)
    acc = kernels::norm_accumulate<K>(acc, static_cast<double>(load_op(g[i])), p);
  const int tid = static_cast<int>(threadIdx.x);
  shared[tid] = acc;
  __syncthreads();
  for (int s = kClipThreads / 2; s > 0; s >>= 1) {
    if (tid < s) shared[tid] = kernels::norm_combine(shared[tid], shared[tid + s], K);
    __syncthreads();
  }
  if (tid == 0) {
    const int64_t chunk = a.block_chunk[blockIdx.x];
    partials[t.partial_base + chunk] = shared[0];
    if (chunk == 0) {
      ranges[2 * t.index] = t.partial_base;
      ranges[2 * t.index + 1] = t.chunks;
    }
  }
}

// One block: out[i] = gradient i's partials combined in chunk order.
__global__ void __launch_bounds__(kFinishThreads)
    norm_finish_kernel(const double* __restrict__ partials, const int64_t* __restrict__ ranges, int count,
                       NormKind kind, double* __restrict__ out) {
  for (int i = static_cast<int>(threadIdx.x); i < count; i += kFinishThreads) {
    const double* q = partials + ranges[2 * i];
    const int64_t n = ranges[2 * i + 1];
    double acc = 0.0;
    for (int64_t c = 0; c < n; ++c) acc = kernels::norm_combine(acc, q[c], kind);
    out[i] = acc;
  }
}

// One thread: the total norm from the power sums, in order (as the CPU kernel), and the clip
// decisions: coef[0] = the f32 factor, coef[1] = 1 when the f32/f16/bf16 gradients are to be
// scaled, else 0; coef[2], coef[3] the same for the f64 gradients (their factor is f64).
// total_out: float, or double when total_f64.
template <typename S>
__global__ void clip_total_kernel(const S* __restrict__ sums, int count, NormKind kind, double p, double max_norm,
                                  void* __restrict__ total_out, bool total_f64, double* __restrict__ coef) {
  if (blockIdx.x != 0 || threadIdx.x != 0) return;
  double acc = 0.0;
  for (int i = 0; i < count; ++i) {
    double v = static_cast<double>(sums[i]);
    if (v < 0) v = std::numeric_limits<double>::quiet_NaN();  // not a power sum: no clip, a NaN norm
    acc = kernels::norm_combine(acc, v, kind);
  }
  const double total = kernels::norm_root(acc, kind, p);
  if (total_f64)
    *static_cast<double*>(total_out) = total;
  else
    *static_cast<float*>(total_out) = static_cast<float>(total);
  const float c = kernels::clip_coefficient<float>(total, max_norm);
  coef[0] = static_cast<double>(c);
  coef[1] = kernels::clip_scales(total, c) ? 1.0 : 0.0;
  const double c64 = kernels::clip_coefficient<double>(total, max_norm);
  coef[2] = c64;
  coef[3] = kernels::clip_scales(total, c64) ? 1.0 : 0.0;
}

// g *= its factor (coef[0], or coef[2] for f64) in g's compute type, when coef[1] (coef[3]) says
// so. g: (numel,), one chunk per block.
template <typename T>
__global__ void __launch_bounds__(kClipThreads) clip_scale_kernel(const LaunchArgs a, const double* __restrict__ coef) {
  using C = opmath_t<T>;
  constexpr int k = std::is_same_v<T, double> ? 2 : 0;
  if (coef[k + 1] == 0.0) return;
  const C c = static_cast<C>(coef[k]);  // exact: coef[0] holds a float
  const TensorArg& t = a.t[a.block_tensor[blockIdx.x]];
  const ChunkRange r = chunk_range(a, t);
  T* g = static_cast<T*>(t.data);
  for (int64_t i = r.begin + threadIdx.x; i < r.end; i += kClipThreads) g[i] = store_op<T>(static_cast<C>(load_op(g[i]) * c));
}

// g clamped to [-clip_value, clip_value]; elements inside keep their bits. g: (numel,).
template <typename T>
__global__ void __launch_bounds__(kClipThreads) clip_value_kernel(const LaunchArgs a, double clip_value) {
  using C = opmath_t<T>;
  const C hi = static_cast<C>(clip_value);
  const TensorArg& t = a.t[a.block_tensor[blockIdx.x]];
  const ChunkRange r = chunk_range(a, t);
  T* g = static_cast<T*>(t.data);
  for (int64_t i = r.begin + threadIdx.x; i < r.end; i += kClipThreads) {
    const C x = load_op(g[i]);
    if (x > hi || x < -hi) g[i] = store_op<T>(kernels::clip_value_element(x, hi));
  }
}

/// Calls launch.template operator()<T>(args, nblocks) for the chunks of every gradient of
/// `dtype` (T its device type), kMaxTensors gradients / kMaxBlocks chunks at a time. bases: each
/// gradient's first partial (null when the kernel writes none).
template <typename Launch>
void for_each_launch(const GradBuffer* grads, int count, DType dtype, const int64_t* bases, Launch&& launch) {
  visit_floating_dtype<DeviceTypes>(dtype, [&]<typename T>() {
    LaunchArgs args;
    int ntensors = 0, nblocks = 0;
    auto flush = [&] {
      if (nblocks > 0) launch.template operator()<T>(args, nblocks);
      ntensors = nblocks = 0;
    };
    for (int i = 0; i < count; ++i) {
      if (grads[i].dtype != dtype) continue;
      const int64_t chunks = chunks_of(grads[i].numel);
      const TensorArg arg{grads[i].data, grads[i].numel, bases ? bases[i] : 0, i, static_cast<int32_t>(chunks)};
      if (ntensors == kMaxTensors) flush();
      args.t[ntensors++] = arg;
      for (int64_t c = 0; c < chunks; ++c) {
        if (nblocks == kMaxBlocks) {
          flush();
          args.t[ntensors++] = arg;
        }
        args.block_tensor[nblocks] = static_cast<uint8_t>(ntensors - 1);
        args.block_chunk[nblocks] = static_cast<int32_t>(c);
        ++nblocks;
      }
    }
    flush();
  });
}

constexpr DType kFloating[] = {DType::f32, DType::f16, DType::bf16, DType::f64};

}  // namespace

size_t grad_norms_scratch_bytes(const GradBuffer* grads, int count) {
  int64_t chunks = 0;
  for (int i = 0; i < count; ++i) chunks += chunks_of(grads[i].numel);
  return static_cast<size_t>(chunks) * sizeof(double) + static_cast<size_t>(count) * 2 * sizeof(int64_t);
}

void launch_grad_norms(const GradBuffer* grads, int count, kernels::NormKind kind, double p, double* out,
                       void* scratch, cudaStream_t stream) {
  if (count == 0) return;
  std::vector<int64_t> bases(static_cast<size_t>(count));
  int64_t total = 0;
  for (int i = 0; i < count; ++i) {
    PRECIS_INTERNAL_ASSERT(chunks_of(grads[i].numel) <= INT32_MAX, "launch_grad_norms: gradient too large");
    bases[i] = total;
    total += chunks_of(grads[i].numel);
  }
  auto* partials = static_cast<double*>(scratch);
  auto* ranges = reinterpret_cast<int64_t*>(partials + total);
  for (DType dt : kFloating) {
    visit_norm_kind(kind, [&]<NormKind K>() {
      for_each_launch(grads, count, dt, bases.data(), [&]<typename T>(const LaunchArgs& a, int blocks) {
        norm_partial_kernel<T, K><<<blocks, kClipThreads, 0, stream>>>(a, p, partials, ranges);
      });
    });
    PRECIS_CUDA_CHECK(cudaGetLastError(), "launching the grad_norms kernel (", dtype_name(dt), " gradients)");
  }
  norm_finish_kernel<<<1, kFinishThreads, 0, stream>>>(partials, ranges, count, kind, out);
  PRECIS_CUDA_CHECK(cudaGetLastError(), "launching the grad_norms finish kernel (", count, " gradients)");
}

void launch_clip_grad_norm(const GradBuffer* grads, int count, const void* power_sums, bool sums_f64,
                           kernels::NormKind kind, double p, double max_norm, void* total_out, bool total_f64,
                           double* coef, cudaStream_t stream) {
  if (sums_f64) {
    clip_total_kernel<double><<<1, 1, 0, stream>>>(static_cast<const double*>(power_sums), count, kind, p, max_norm,
                                                   total_out, total_f64, coef);
  } else {
    clip_total_kernel<float><<<1, 1, 0, stream>>>(static_cast<const float*>(power_sums), count, kind, p, max_norm,
                                                  total_out, total_f64, coef);
  }
  PRECIS_CUDA_CHECK(cudaGetLastError(), "launching the clip_grad_norm total kernel (", count, " gradients)");
  for (DType dt : kFloating) {
    for_each_launch(grads, count, dt, nullptr, [&]<typename T>(const LaunchArgs& a, int blocks) {
      clip_scale_kernel<T><<<blocks, kClipThreads, 0, stream>>>(a, coef);
    });
    PRECIS_CUDA_CHECK(cudaGetLastError(), "launching the clip_grad_norm scaling kernel (", dtype_name(dt),
                      " gradients)");
  }
}

void launch_clip_grad_value(const GradBuffer* grads, int count, double clip_value, cudaStream_t stream) {
  for (DType dt : kFloating) {
    for_each_launch(grads, count, dt, nullptr, [&]<typename T>(const LaunchArgs& a, int blocks) {
      clip_value_kernel<T><<<blocks, kClipThreads, 0, stream>>>(a, clip_value);
    });
    PRECIS_CUDA_CHECK(cudaGetLastError(), "launching the clip_grad_value kernel (", dtype_name(dt), " gradients)");
  }
}

}  // namespace precis::cuda
