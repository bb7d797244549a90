// The CUDA backend's write of a graph's random-offset base (core/cuda_backend.h write_u64_async):
// before each replay cuda::Graph stores the generator's current offset where the captured dropout
// kernels read it (core/cuda_graph.cpp). A one-thread kernel whose argument is the value: in
// stream order, no host wait, and no staging buffer that must outlive the copy.
#include <cuda_runtime.h>

#include <cstdint>

#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_context.h"
#include "core/cuda/cuda_graph.h"

namespace precis::cuda {

namespace {

__global__ void write_u64(uint64_t* dst, uint64_t value) { *dst = value; }

}  // namespace

void write_u64_async(int device, void* dst, uint64_t value) {
  DeviceGuard guard(device);
  write_u64<<<1, 1, 0, current_stream(device)>>>(static_cast<uint64_t*>(dst), value);
  PRECIS_CUDA_CHECK(cudaGetLastError(), "writing a CUDA graph's random-number offset on cuda:", device);
}

}  // namespace precis::cuda
