#pragma once
// The device allocator for memory checking (PRECIS_CUDA_ALLOCATOR=direct, core/cuda_allocator_mode.h):
// every allocate() is one device malloc of exactly the requested bytes, every deallocate() one
// free, with no rounding and no cache. compute-sanitizer memcheck tracks each cudaMalloc'd range,
// so a kernel that reads one byte past a tensor, or a tensor already freed, is reported; under the
// caching allocator (core/device_caching_allocator.h) both land inside a live segment and are not.
// Slow (a device synchronisation per free) and meant only for checking runs.
//
// Written against the same DeviceMemory as the caching allocator, so its bookkeeping is tested on
// the CPU with a fake device (tests/core/direct_device_allocator_test.cpp).
//
// Freeing: the allocator waits for all work queued on the device (DeviceMemory::synchronize_device)
// before giving the memory back. cudaFree usually synchronises the device by itself, but the driver
// API documents only that it "may perform implicit synchronization", so the wait is explicit. It
// covers every stream of the device, so a block announced with record_stream needs no event: the
// announcement is only checked (it must name a live block) and otherwise has nothing to do.
//
// Statistics have the caching allocator's meaning with nothing cached: allocated == reserved ==
// the exact bytes of live tensors, peak_allocated their peak, no cache hits; empty_cache() has
// nothing to give back.
#include <cstddef>
#include <map>
#include <memory>
#include <mutex>

#include "core/caching_allocator.h"
#include "core/device_caching_allocator.h"

namespace precis {

class DirectDeviceAllocator final : public Allocator {
 public:
  explicit DirectDeviceAllocator(std::unique_ptr<DeviceMemory> memory);
  /// Frees the bookkeeping only; live blocks stay with their owners (the CUDA instances are never
  /// destroyed, so no device call runs after the runtime has shut down).
  ~DirectDeviceAllocator() override = default;

  /// One device malloc of exactly nbytes (nullptr for 0). Throws OutOfMemoryError when the device
  /// has no room (there is no cache to release), DeviceError for other device failures.
  void* allocate(size_t nbytes) override;
  /// Waits for the device's queued work, then frees the block. Never throws (storage destructors
  /// call it): when the wait fails the block is kept (a leak, with a warning, rather than freeing
  /// memory a kernel may still use); a pointer not handed out here is ignored.
  void deallocate(void* ptr, size_t nbytes) override;
  AllocatorStats stats() const override;
  void reset_peak_stats() override;
  /// Nothing is cached: a no-op.
  void empty_cache() override {}
  Device device() const override;
  void copy_to_host(void* dst, const void* src, size_t nbytes) const override;

  /// Checks that `ptr` (any address inside a block) is in a live block; the stream needs no event
  /// (see the header comment). Throws ValueError otherwise, as DeviceCachingAllocator does.
  void record_stream(const void* ptr, StreamHandle stream);

  /// Blocks handed out and not yet freed.
  size_t live_block_count() const;

 private:
  std::unique_ptr<DeviceMemory> memory_;
  mutable std::mutex mutex_;
  CachingAllocatorStats book_;            // guarded by mutex_
  std::map<const char*, size_t> live_;    // block -> exact bytes; ordered for record_stream's lookup
};

}  // namespace precis
