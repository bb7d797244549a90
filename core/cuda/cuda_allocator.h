#pragma once
// The CUDA memory allocators (internal to the CUDA backend): one stream-ordered caching allocator
// of device memory per device, and one of pinned host memory. Both are DeviceCachingAllocator
// (core/device_caching_allocator.h: best fit, splitting, stream/event gating, release and retry on
// out of memory) over a thin DeviceMemory of CUDA runtime calls:
//   - device memory: cudaMalloc/cudaFree on the device; a block belongs to the device's current
//     stream at allocation (cuda_context.h); events come from cudaEventRecord/Query;
//   - pinned memory: cudaHostAlloc/cudaFreeHost; every block belongs to one "host" stream, and a
//     block read by an asynchronous copy is recorded with the copy stream (record_stream), so it
//     is not handed out again until the copy has finished.
// With PRECIS_CUDA_ALLOCATOR=direct (core/cuda_allocator_mode.h) each device's registered allocator
// is instead a DirectDeviceAllocator (core/direct_device_allocator.h): one cudaMalloc per tensor,
// so that compute-sanitizer memcheck sees out-of-bounds accesses. Pinned memory stays caching in
// either mode: no kernel reads it (only asynchronous copies do), so memcheck, which checks kernels'
// accesses, would gain nothing from exact pinned blocks.
// No CUDA header here; streams are cudaStream_t as forward-declared in cuda_context.h.
#include <memory>

#include "core/allocator.h"
#include "core/cuda/cuda_context.h"
#include "core/device_caching_allocator.h"
#include "core/direct_device_allocator.h"
#include "core/side_stream.h"

namespace precis::cuda {

/// The caching allocator of visible device `index` (created on first use, never destroyed, so
/// that no cudaFree runs after the CUDA runtime has shut down at exit). It is the device's
/// allocator (allocator_for) unless PRECIS_CUDA_ALLOCATOR=direct.
DeviceCachingAllocator& caching_allocator(int index);

/// The direct allocator of visible device `index`, registered for the device when
/// PRECIS_CUDA_ALLOCATOR=direct (created on first use, never destroyed, like caching_allocator).
DirectDeviceAllocator& direct_allocator(int index);

/// A new direct allocator of visible device `index`, owned by the caller and independent of the
/// mode: for tests that check a direct allocator whatever PRECIS_CUDA_ALLOCATOR says. Free its
/// blocks before destroying it.
std::unique_ptr<DirectDeviceAllocator> make_direct_allocator(int index);

/// Free and total memory of a device, in bytes.
struct DeviceMemoryInfo {
  size_t free = 0;
  size_t total = 0;
};
/// cudaMemGetInfo of visible device `index` (for tests that check memory really went back to the
/// device, and for messages). Throws DeviceError when the call fails.
DeviceMemoryInfo device_memory_info(int index);

/// The caching allocator of pinned host memory (precis::pinned_allocator()). Throws DeviceError
/// when no CUDA device is visible.
DeviceCachingAllocator& pinned_allocator();

/// Marks the memory of `data` (a pointer into a live block of the CUDA allocator of cuda:`index`,
/// or of the pinned allocator when index is -1) as used by work queued on `stream`, so that the
/// block is not reused before that work has finished. PyTorch's Tensor.record_stream. Under
/// PRECIS_CUDA_ALLOCATOR=direct the device's direct allocator only checks that the block is live
/// (it waits for the whole device before every free).
void record_stream(const void* data, int index, cudaStream_t stream);

/// The StreamOrdering of cuda:`index` for enqueue_on_side_stream (core/side_stream.h): CUDA
/// events of that device, and record_stream with the device's caching allocator (owner = index)
/// or the pinned one (owner = -1).
StreamOrdering& stream_ordering(int index);

/// Registers, for every CUDA index precis addresses, the allocator of a visible device (caching, or
/// direct under PRECIS_CUDA_ALLOCATOR=direct) or an allocator that throws DeviceError explaining
/// that the device is missing. Called once, by allocator_for (core/allocator.cpp), on the first
/// request for a CUDA device; throws ValueError (and registers nothing) when PRECIS_CUDA_ALLOCATOR
/// has an invalid value, so every later request throws it again.
void register_allocators();

}  // namespace precis::cuda
