#pragma once
// The stream-ordered caching allocator of CUDA device memory (internal to the CUDA backend).
//
// cudaMalloc/cudaFree are slow and cudaFree synchronises the whole device, so freed blocks are
// kept and reused. Sizes are rounded to buckets (512 B steps up to 1 MiB, 2 MiB steps above: the
// granularity cudaMalloc itself uses for large blocks, so rounding costs no device memory) and a
// request is served from a cached block of exactly its bucket.
//
// Stream ordering: every block is tagged with the stream it was freed on and is only handed out
// again for that stream. With the one-stream-per-device model (cuda_context.h), a block freed on
// the host while kernels that use it are still queued can be reused immediately: any kernel that
// receives it is enqueued later on the same stream, so it runs after them. Using a block on a
// second stream would require recording an event at free time and waiting on it before reuse.
//
// When cudaMalloc fails, the cache is released (after a device synchronisation) and the
// allocation retried once; a second failure throws DeviceError with the requested size and the
// allocator's statistics.
#include "core/allocator.h"

namespace precis::cuda {

/// Block size a request of nbytes is rounded to.
size_t round_block_size(size_t nbytes);

/// The caching allocator of visible device `index` (created on first use, never destroyed, so
/// that no cudaFree runs after the CUDA runtime has shut down at exit).
Allocator& caching_allocator(int index);

/// Registers, for every CUDA index precis addresses, the caching allocator of a visible device or
/// an allocator that throws DeviceError explaining that the device is missing. Called once, by
/// allocator_for (core/allocator.cpp), on the first request for a CUDA device.
void register_allocators();

}  // namespace precis::cuda
