#pragma once
// The NCCL backend's entry point for dist/process_group.cpp. Free of <nccl.h> and CUDA headers:
// only dist/cuda/*.cpp (compiled with CUDA on; the NCCL code only when NCCL was found) sees them.
#include <memory>

#include "dist/process_group.h"

namespace precis::dist::detail {

/// A group with `cpu`'s ranks that sends CUDA tensors to NCCL and everything else (CPU tensors,
/// barrier) to `cpu`. NCCL communicators are created per device on the first CUDA collective, the
/// unique id going from rank 0 to the others through `cpu` (MPI; a world of one needs none).
std::shared_ptr<ProcessGroup> make_nccl_routing_group(std::shared_ptr<ProcessGroup> cpu);

}  // namespace precis::dist::detail
