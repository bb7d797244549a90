#pragma once
// What the CPU and CUDA caching allocators share: the lock and the statistics bookkeeping
// (allocate/free counters, cache hits, reserved bytes, peak), so that both report AllocatorStats
// with the same meaning. The block handling itself (size classes, free lists, system calls)
// stays in each allocator.
//
// Typical use inside a derived allocator (every call with mutex_ held):
//   book_.count_request();
//   if (cached) book_.cache_hit(size); else book_.fresh_block(size);
//   ...                                        // later, in deallocate:
//   book_.freed(size);                         // live -> cached
//   book_.released(size);                      // cached -> given back to the system
#include <cstddef>
#include <mutex>

#include "core/allocator.h"

namespace precis {

/// Byte and call counts of one caching allocator. Not thread-safe: the owner's lock guards it.
class CachingAllocatorStats {
 public:
  /// One allocate() call, counted whether or not it then succeeds.
  void count_request() { ++stats_.num_allocs; }
  /// A cached block of `block` bytes handed out again.
  void cache_hit(size_t block) {
    ++stats_.num_cache_hits;
    add_live(block);
  }
  /// A new block of `block` bytes obtained from the system and handed out.
  void fresh_block(size_t block) {
    stats_.reserved += block;
    add_live(block);
  }
  /// A segment of `bytes` obtained from the system and kept in the cache, none of it live yet
  /// (allocators that split segments into blocks; hand_out then counts the blocks).
  void reserve(size_t bytes) { stats_.reserved += bytes; }
  /// A block of `block` bytes cut from reserved memory and handed out; from_cache: it was cached
  /// before this request (a hit), not cut from a segment reserved for this request.
  void hand_out(size_t block, bool from_cache) {
    if (from_cache) ++stats_.num_cache_hits;
    add_live(block);
  }
  /// The cache was given back to the system to retry an allocation that failed.
  void cache_flush() { ++stats_.num_cache_flushes; }
  /// A live block returned to the cache. Throws InternalError when more bytes are freed than
  /// are live (a double free or a wrong size).
  void freed(size_t block);
  /// Cached blocks of `bytes` in all given back to the system. Throws InternalError when more
  /// bytes are released than are reserved.
  void released(size_t bytes);
  /// Starts a new peak window at the current live byte count.
  void reset_peak() { stats_.peak_allocated = stats_.allocated; }
  const AllocatorStats& get() const { return stats_; }

 private:
  void add_live(size_t block) {
    stats_.allocated += block;
    if (stats_.allocated > stats_.peak_allocated) stats_.peak_allocated = stats_.allocated;
  }

  AllocatorStats stats_;
};

/// Base of the caching allocators: implements stats() and reset_peak_stats() over the shared
/// bookkeeping. Derived classes take mutex_ around every use of book_ and of their own caches.
class CachingAllocatorBase : public Allocator {
 public:
  AllocatorStats stats() const final {
    std::lock_guard<std::mutex> lock(mutex_);
    return book_.get();
  }
  void reset_peak_stats() final {
    std::lock_guard<std::mutex> lock(mutex_);
    book_.reset_peak();
  }

 protected:
  mutable std::mutex mutex_;
  CachingAllocatorStats book_;  // guarded by mutex_
};

}  // namespace precis
