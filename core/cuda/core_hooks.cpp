// The CUDA backend's side of core/cuda_backend.h: what libprecis's core calls once it has loaded
// this library.
#include <cuda_runtime_api.h>

#include "core/cuda/cuda_allocator.h"
#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_context.h"
#include "core/cuda/cuda_graph.h"
#include "core/cuda_backend.h"

namespace {

precis::Allocator& pinned() { return precis::cuda::pinned_allocator(); }

int compute_capability(int index) {
  precis::cuda::check_device_index(index, "cuda_compute_capability");
  int major = 0, minor = 0;
  PRECIS_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, index),
                    "reading the compute capability of cuda:", index);
  PRECIS_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, index),
                    "reading the compute capability of cuda:", index);
  return major * 10 + minor;
}

constexpr precis::detail::CudaCoreHooks kHooks{
    .device_count = &precis::cuda::device_count,
    .unavailable_reason = &precis::cuda::unavailable_reason,
    .register_allocators = &precis::cuda::register_allocators,
    .pinned_allocator = &pinned,
    .synchronize_device = &precis::cuda::synchronize_device,
    .compute_capability = &compute_capability,
    .graph_begin = &precis::cuda::graph_begin,
    .graph_end = &precis::cuda::graph_end,
    .graph_abandon = &precis::cuda::graph_abandon,
    .graph_replay = &precis::cuda::graph_replay,
    .graph_destroy = &precis::cuda::graph_destroy,
    .write_u64_async = &precis::cuda::write_u64_async,
    .set_device = &precis::cuda::set_home_device,
};

}  // namespace

extern "C" const precis::detail::CudaCoreHooks* precis_cuda_core_hooks() { return &kHooks; }
