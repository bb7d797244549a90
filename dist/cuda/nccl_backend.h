#pragma once
// The NCCL backend's entry point. Free of <nccl.h> and CUDA headers: only dist/cuda/*.cpp (in the
// CUDA backend library; the NCCL code only when NCCL was found) sees them. dist/process_group.cpp
// looks the C symbol up in the loaded backend (core/cuda_backend.h).
#include <memory>

#include "dist/process_group.h"

namespace precis::dist::detail {

/// A group with `cpu`'s ranks that sends CUDA tensors to NCCL and everything else (CPU tensors,
/// barrier) to `cpu`. NCCL communicators are created per device on the first CUDA collective, the
/// unique id going from rank 0 to the others through `cpu` (MPI; a world of one needs none).
std::shared_ptr<ProcessGroup> make_nccl_routing_group(std::shared_ptr<ProcessGroup> cpu);

}  // namespace precis::dist::detail

/// *group = make_nccl_routing_group(*group), for dist/process_group.cpp.
extern "C" void precis_nccl_routing_group(std::shared_ptr<precis::dist::ProcessGroup>* group);
