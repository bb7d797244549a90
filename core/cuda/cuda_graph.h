#pragma once
// The CUDA backend's graph hooks (core/cuda_backend.h, core/cuda_graph.h); internal.
#include <cstdint>

namespace precis::cuda {

void* graph_begin(int device, uint64_t pool);
void graph_end(void* graph);
void graph_abandon(void* graph) noexcept;
void graph_replay(void* graph);
void graph_destroy(void* graph) noexcept;
void write_u64_async(int device, void* dst, uint64_t value);  // core/cuda/graph_rng.cu

}  // namespace precis::cuda
