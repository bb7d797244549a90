#pragma once
// The CUDA backend's graph hooks (core/cuda_backend.h, core/cuda_graph.h); internal.
#include <cstdint>

namespace precis::cuda {

void* graph_begin(int device, uint64_t pool);
void graph_end(void* graph);
void graph_abandon(void* graph) noexcept;
void graph_replay(void* graph);
void graph_destroy(void* graph) noexcept;

}  // namespace precis::cuda
