// The CUDA backend's side of cuda::Graph (core/cuda_graph.h): stream capture on the calling
// thread's current stream, the capture's allocations routed to a private pool of the device's
// caching allocator, instantiation, launch and teardown (core/cuda_backend.h's graph hooks).
#include "core/cuda/cuda_graph.h"

#include <cuda_runtime_api.h>

#include <memory>

#include "core/cuda/cuda_allocator.h"
#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_context.h"
#include "core/cuda_allocator_mode.h"
#include "core/error.h"
#include "core/sync_debug.h"

namespace precis::cuda {

namespace {

struct CapturedGraph {
  int device = 0;
  uint64_t pool = 0;
  cudaStream_t stream = nullptr;
  bool routed = false;  // the allocator still routes the stream's allocations to the pool
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
};

// Frees what a capture made and hands its pool to the shared cache. Never throws.
void discard(CapturedGraph* g) noexcept {
  try {
    DeviceCachingAllocator& a = caching_allocator(g->device);
    if (g->routed) a.end_allocate_to_pool(g->pool);
    a.release_pool(g->pool);
  } catch (...) {  // the pool stays private: a leak, never a reuse of memory a replay may write
  }
  if (g->exec != nullptr) cudaGraphExecDestroy(g->exec);
  if (g->graph != nullptr) cudaGraphDestroy(g->graph);
  delete g;
}

}  // namespace

void* graph_begin(int device, uint64_t pool) {
  check_device_index(device, "cuda::Graph");
  PRECIS_CHECK_DEVICE(cuda_allocator_mode() == CudaAllocatorMode::caching, "cuda::Graph: ",
                      kCudaAllocatorVariable, "=direct gives every tensor a cudaMalloc of its own, which a graph "
                      "capture cannot hold; unset it to capture graphs");
  DeviceGuard guard(device);
  auto g = std::make_unique<CapturedGraph>();
  g->device = device;
  g->pool = pool;
  g->stream = current_stream(device);
  caching_allocator(device).begin_allocate_to_pool(pool, g->stream);
  g->routed = true;
  // Thread-local mode: another thread's unsafe calls (a cudaMalloc) do not break this capture.
  const cudaError_t e = cudaStreamBeginCapture(g->stream, cudaStreamCaptureModeThreadLocal);
  if (e != cudaSuccess) {
    discard(g.release());
    PRECIS_CUDA_CHECK(e, "beginning a CUDA graph capture on cuda:", device);
  }
  return g.release();
}

void graph_end(void* handle) {
  auto* g = static_cast<CapturedGraph*>(handle);
  DeviceGuard guard(g->device);
  cudaError_t e = cudaStreamEndCapture(g->stream, &g->graph);
  caching_allocator(g->device).end_allocate_to_pool(g->pool);
  g->routed = false;
  if (e == cudaSuccess) e = cudaGraphInstantiate(&g->exec, g->graph, 0);
  if (e != cudaSuccess) {
    const int device = g->device;
    discard(g);
    PRECIS_CUDA_CHECK(e, "ending the CUDA graph capture on cuda:", device,
                      " (work inside the region could not be captured: a call on another stream without an event "
                      "joining it back, or a library call that synchronises)");
  }
}

void graph_abandon(void* handle) noexcept {
  auto* g = static_cast<CapturedGraph*>(handle);
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(g->stream, &status) == cudaSuccess && status != cudaStreamCaptureStatusNone) {
    cudaGraph_t partial = nullptr;
    if (cudaStreamEndCapture(g->stream, &partial) == cudaSuccess && partial != nullptr) cudaGraphDestroy(partial);
  }
  cudaGetLastError();  // an invalidated capture leaves its error as the last error: clear it
  discard(g);
}

void graph_replay(void* handle) {
  auto* g = static_cast<CapturedGraph*>(handle);
  DeviceGuard guard(g->device);
  PRECIS_CUDA_CHECK(cudaGraphLaunch(g->exec, current_stream(g->device)), "replaying a CUDA graph on cuda:", g->device);
}

void graph_destroy(void* handle) noexcept {
  auto* g = static_cast<CapturedGraph*>(handle);
  // The pool's blocks go back to the shared cache, tied to the capture stream, so later work there
  // is ordered after the replays; the graph itself is destroyed once they have run.
  try {
    DeviceGuard guard(g->device);
    precis::detail::note_host_sync("destroying a CUDA graph (waiting for its replays)", false);
    cudaDeviceSynchronize();
  } catch (...) {
  }
  discard(g);
}

}  // namespace precis::cuda
