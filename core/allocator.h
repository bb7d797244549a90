#pragma once
// Memory allocators. Every tensor's storage comes from the allocator of its device. The CPU one is
// a caching allocator: freed blocks are kept in size buckets and reused, because on the machines
// here the first touch of a fresh page costs ~10 µs (MACHINE.md) and a framework that hands memory
// back to the system every step spends its time in page faults.
#include <cstddef>
#include <cstdint>

#include "core/device.h"

namespace precis {

/// Byte counts of one allocator. `allocated`: bytes in live blocks handed out (rounded to the
/// block size); `reserved`: bytes held from the system (live + cached); `peak_allocated`: the
/// largest `allocated` seen since the last reset_peak_stats().
struct AllocatorStats {
  size_t allocated = 0;         ///< bytes in live blocks (rounded up to the block size)
  size_t reserved = 0;          ///< bytes held from the system: live plus cached
  size_t peak_allocated = 0;    ///< the largest `allocated` since the last reset_peak_stats()
  uint64_t num_allocs = 0;      ///< allocate() calls with a nonzero size
  uint64_t num_cache_hits = 0;  ///< allocate() calls served from the cache
  uint64_t num_cache_flushes = 0;  ///< times the cache was given back to retry a failed system allocation
};

/// The memory source of one device. Obtain one with cpu_allocator() or allocator_for(); they live
/// for the whole process. The caching implementations are thread-safe (one lock per allocator).
class Allocator {
 public:
  virtual ~Allocator() = default;
  /// Returns a block of at least nbytes, aligned to 64 bytes (nullptr for nbytes == 0).
  /// Throws OutOfMemoryError naming nbytes and the device when the memory cannot be had.
  virtual void* allocate(size_t nbytes) = 0;
  /// Returns a block obtained from allocate(nbytes) with the same nbytes.
  virtual void deallocate(void* ptr, size_t nbytes) = 0;
  /// A snapshot of the counters (a copy, consistent at the time of the call).
  virtual AllocatorStats stats() const = 0;
  /// Starts a new peak window: peak_allocated becomes the current allocated.
  virtual void reset_peak_stats() = 0;
  /// Gives every cached (free) block back to the system.
  virtual void empty_cache() = 0;
  virtual Device device() const = 0;  ///< the device whose memory this allocator hands out
  /// Copies nbytes from this allocator's memory at src to host memory at dst and waits for the
  /// copy (a plain memcpy for host memory). For layers below the kernels, e.g. a writer that
  /// streams a device tensor's bytes to a file.
  virtual void copy_to_host(void* dst, const void* src, size_t nbytes) const;
  /// True for an allocator of page-locked host memory (Tensor::is_pinned): the CUDA runtime
  /// copies from it to a device asynchronously, without a staging copy.
  virtual bool is_pinned() const { return false; }
};

/// The process-wide CPU caching allocator.
Allocator& cpu_allocator();

/// The process-wide caching allocator of pinned (page-locked) host memory, behind
/// Tensor::pin_memory(). Its blocks are CPU memory (device() is the CPU) that a CUDA device can
/// read with an asynchronous copy. Throws DeviceError when precis was built without CUDA or no
/// CUDA device is visible (pinning needs the CUDA runtime and a driver).
Allocator& pinned_allocator();
/// Whether pinned_allocator() can be had (a CUDA build and a visible device). Never throws.
bool pinned_memory_available();

/// The allocator for a device. A build with CUDA registers its CUDA allocators on the first request
/// for a CUDA device; asking for one without CUDA throws DeviceError.
Allocator& allocator_for(Device device);
/// Called by a backend's init to make its allocator reachable through allocator_for.
void register_allocator(DeviceType type, int index, Allocator* allocator);

}  // namespace precis
