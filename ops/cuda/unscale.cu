// The loss scaler's fused unscale pass on CUDA devices (multi-tensor apply): one launch covers
// many gradients of one dtype; each block handles one chunk of kUnscaleChunk elements of one
// gradient, named by the launch's block table (passed by value in the kernel parameters, with
// the gradients' pointers), so the host uploads nothing and never waits.
//
// Per element: u = g · inv_scale (fp32 for f32/f16/bf16, f64 for f64), written back when asked,
// counted when non-finite, u² summed in f64. Each block reduces its sums in a fixed
// shared-memory tree and writes one partial; a second kernel (one block) adds each gradient's
// partials in chunk order, writes counts and squared norms and raises found_inf. No atomics:
// the result is the same on every run.
#include <cstdint>
#include <vector>

#include "ops/cuda/device_math.cuh"

namespace precis::cuda {

namespace {

constexpr int kUnscaleThreads = 512;  // 128 elements per thread per chunk
constexpr int kMaxTensors = 48;
constexpr int kMaxBlocks = 320;
constexpr int kFinishThreads = 256;

struct TensorArg {
  void* data;
  int64_t numel;
  int64_t partial_base;  // index of its first partial
  int32_t index;         // position in the call's gradient list
  int32_t chunks;
};

// 48 · 32 + 320 · 5 = 3136 bytes: with the other parameters, under the 4 KiB parameter limit.
struct LaunchArgs {
  TensorArg t[kMaxTensors];
  uint8_t block_tensor[kMaxBlocks];
  int32_t block_chunk[kMaxBlocks];
};
static_assert(sizeof(LaunchArgs) + 64 <= 4096, "unscale kernel parameters exceed 4 KiB");

struct Partial {
  double sq;
  int64_t nonfinite;
};

int64_t chunks_of(int64_t numel) { return numel == 0 ? 1 : (numel + kUnscaleChunk - 1) / kUnscaleChunk; }

// g: (numel,) contiguous, one chunk per block. partials: one per block of every gradient;
// ranges[2 i], ranges[2 i + 1]: gradient i's first partial and partial count.
template <typename T>
__global__ void __launch_bounds__(kUnscaleThreads)
    unscale_kernel(const LaunchArgs a, const float* __restrict__ inv_scale, bool write, Partial* __restrict__ partials,
                   int64_t* __restrict__ ranges) {
  using C = opmath_t<T>;  // fp32 for f16/bf16/f32, f64 for f64
  __shared__ double shared_sq[kUnscaleThreads];
  __shared__ int shared_bad[kUnscaleThreads];
  const TensorArg& t = a.t[a.block_tensor[blockIdx.x]];
  const int64_t chunk = a.block_chunk[blockIdx.x];
  const int64_t begin = chunk * kUnscaleChunk;
  const int64_t end = begin + kUnscaleChunk < t.numel ? begin + kUnscaleChunk : t.numel;
  const C inv = static_cast<C>(*inv_scale);
  T* g = static_cast<T*>(t.data);
  double sq = 0;
  int bad = 0;
  for (int64_t i = begin + threadIdx.x; i < end; i += kUnscaleThreads) {
    const C u = static_cast<C>(load_op(g[i])) * inv;
    bad += !isfinite(u);
    sq += static_cast<double>(u) * static_cast<double>(u);
    if (write) g[i] = store_op<T>(u);
  }
  const int tid = static_cast<int>(threadIdx.x);
  shared_sq[tid] = sq;
  shared_bad[tid] = bad;
  __syncthreads();
  for (int s = kUnscaleThreads / 2; s > 0; s >>= 1) {
    if (tid < s) {
      shared_sq[tid] += shared_sq[tid + s];
      shared_bad[tid] += shared_bad[tid + s];
    }
    __syncthreads();
  }
  if (tid == 0) {
    partials[t.partial_base + chunk] = {shared_sq[0], shared_bad[0]};
    if (chunk == 0) {
      ranges[2 * t.index] = t.partial_base;
      ranges[2 * t.index + 1] = t.chunks;
    }
  }
}

// One block: gradient i's partials added in chunk order -> counts[i], sq_norms[i]; found_inf = 1
// when any gradient has a non-finite element (a single block, so a single writer).
template <typename N>
__global__ void __launch_bounds__(kFinishThreads)
    unscale_finish_kernel(const Partial* __restrict__ partials, const int64_t* __restrict__ ranges, int count,
                          float* __restrict__ counts, N* __restrict__ sq_norms, float* __restrict__ found_inf) {
  int any = 0;
  for (int i = static_cast<int>(threadIdx.x); i < count; i += kFinishThreads) {
    const Partial* p = partials + ranges[2 * i];
    const int64_t n = ranges[2 * i + 1];
    double sq = 0;
    int64_t bad = 0;
    for (int64_t c = 0; c < n; ++c) {
      sq += p[c].sq;
      bad += p[c].nonfinite;
    }
    counts[i] = static_cast<float>(bad);
    sq_norms[i] = static_cast<N>(sq);
    any |= bad > 0;
  }
  if (__syncthreads_or(any) && threadIdx.x == 0) *found_inf = 1.0f;
}

// Launches the chunks of every gradient of dtype T, kMaxTensors gradients / kMaxBlocks chunks at
// a time.
template <typename T>
void launch_dtype(const GradBuffer* grads, int count, DType dtype, const int64_t* bases, const float* inv_scale,
                  bool write, Partial* partials, int64_t* ranges, cudaStream_t stream) {
  LaunchArgs args;
  int ntensors = 0, nblocks = 0;
  auto flush = [&] {
    if (nblocks > 0) unscale_kernel<T><<<nblocks, kUnscaleThreads, 0, stream>>>(args, inv_scale, write, partials, ranges);
    ntensors = nblocks = 0;
  };
  for (int i = 0; i < count; ++i) {
    if (grads[i].dtype != dtype) continue;
    const int64_t chunks = chunks_of(grads[i].numel);
    if (ntensors == kMaxTensors) flush();
    args.t[ntensors++] = {grads[i].data, grads[i].numel, bases[i], i, static_cast<int32_t>(chunks)};
    for (int64_t c = 0; c < chunks; ++c) {
      if (nblocks == kMaxBlocks) {
        flush();
        args.t[ntensors++] = {grads[i].data, grads[i].numel, bases[i], i, static_cast<int32_t>(chunks)};
      }
      args.block_tensor[nblocks] = static_cast<uint8_t>(ntensors - 1);
      args.block_chunk[nblocks] = static_cast<int32_t>(c);
      ++nblocks;
    }
  }
  flush();
}

}  // namespace

size_t unscale_scratch_bytes(const GradBuffer* grads, int count) {
  int64_t chunks = 0;
  for (int i = 0; i < count; ++i) chunks += chunks_of(grads[i].numel);
  return static_cast<size_t>(chunks) * sizeof(Partial) + static_cast<size_t>(count) * 2 * sizeof(int64_t);
}

void launch_unscale(const GradBuffer* grads, int count, const float* inv_scale, bool write, float* found_inf,
                    float* counts, void* sq_norms, bool sq_norms_f64, void* scratch, cudaStream_t stream) {
  if (count == 0) return;
  std::vector<int64_t> bases(static_cast<size_t>(count));
  int64_t total = 0;
  for (int i = 0; i < count; ++i) {
    PRECIS_INTERNAL_ASSERT(chunks_of(grads[i].numel) <= INT32_MAX, "launch_unscale: gradient too large");
    bases[i] = total;
    total += chunks_of(grads[i].numel);
  }
  auto* partials = static_cast<Partial*>(scratch);
  auto* ranges = reinterpret_cast<int64_t*>(partials + total);
  for (DType dt : {DType::f32, DType::f16, DType::bf16, DType::f64}) {
    visit_floating_dtype<DeviceTypes>(dt, [&]<typename T>() {
      launch_dtype<T>(grads, count, dt, bases.data(), inv_scale, write, partials, ranges, stream);
    });
    PRECIS_CUDA_CHECK(cudaGetLastError(), "launching the unscale kernel (", dtype_name(dt), " gradients)");
  }
  if (sq_norms_f64) {
    unscale_finish_kernel<double><<<1, kFinishThreads, 0, stream>>>(partials, ranges, count, counts,
                                                                    static_cast<double*>(sq_norms), found_inf);
  } else {
    unscale_finish_kernel<float><<<1, kFinishThreads, 0, stream>>>(partials, ranges, count, counts,
                                                                   static_cast<float*>(sq_norms), found_inf);
  }
  PRECIS_CUDA_CHECK(cudaGetLastError(), "launching the unscale finish kernel (", count, " gradients)");
}

}  // namespace precis::cuda
