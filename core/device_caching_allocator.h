#pragma once
// The stream-ordered caching allocator of device memory, written against an abstract device
// (DeviceMemory: malloc/free, streams, events) so that all of its bookkeeping — best fit,
// splitting and merging, stream/event gating, the out-of-memory release — runs and is tested on
// the CPU with a fake device (tests/core/device_caching_allocator_test.cpp). The CUDA backend
// instantiates it over cudaMalloc (one per device) and over cudaHostAlloc (pinned host memory);
// see core/cuda/cuda_allocator.h and docs/design/cuda-backend.md.
//
// Sizes. A request is rounded up to a multiple of 512 B (its block size). Blocks are cut from
// segments obtained from the device: a request of at most 1 MiB ("small") comes from a 2 MiB
// segment shared by many small blocks; a larger one from a 20 MiB segment when it is under
// 10 MiB, or from a segment of its own size rounded up to 2 MiB. A free block is found by best
// fit (the smallest cached block of the same pool and stream that is large enough) and split
// when the rest is worth keeping (at least 512 B in the small pool, more than 1 MiB in the large
// one: a smaller rest stays with the block, so a large block is never cut into slivers). A freed
// block merges with free neighbours of its segment, so variable shapes reuse memory instead of
// calling the device's malloc (which synchronises) every step.
//
// Streams. A block belongs to the stream current when it was allocated and is reused only for
// that stream: work queued there later runs after the work that used it, so no wait is needed.
// A block used on another stream must be announced with record_stream (PyTorch's
// Tensor.record_stream); freeing it then records an event on each such stream, and the block
// becomes reusable only once every event has completed (events are queried at the start of each
// allocation; the host never waits for them except when memory runs out). While a graph capture
// routes allocations to a private pool, events are neither queried nor recorded (both are illegal
// in a capture): blocks freed then get their events when the capture ends.
//
// Private pools. While a stream allocates to a private pool (begin_allocate_to_pool), its blocks
// come from segments of that pool only, and freed they return to it: nothing outside the pool
// ever receives them, and empty_cache() keeps them until the pool is released. This is the memory
// of a CUDA graph capture, whose replays write the same addresses again.
//
// Out of memory. When the device's malloc fails, the allocator waits for the pending events,
// tries the cache again, then gives back every cached segment that is entirely free and retries
// once; a second failure throws OutOfMemoryError naming the request, the device and the
// allocator's statistics. A segment is removed from the bookkeeping *before* it is freed, so a
// free that throws leaves a consistent cache: that segment is forgotten (counted as released,
// never freed again) and the others stay cached.
#include <cstddef>
#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "core/caching_allocator.h"

namespace precis {

/// Opaque handle of a device stream (a cudaStream_t, or a fake device's id in tests).
using StreamHandle = void*;
/// Opaque handle of a device event (a cudaEvent_t, or a fake device's id in tests).
using EventHandle = void*;

/// What a DeviceCachingAllocator needs from a device. Calls are made with the allocator's lock
/// held, from any thread.
class DeviceMemory {
 public:
  virtual ~DeviceMemory() = default;
  /// The device the memory belongs to (the CPU for pinned host memory).
  virtual Device device() const = 0;
  /// How the memory is named in messages ("cuda:0", "pinned host memory").
  virtual std::string name() const { return device().str(); }
  /// A new segment of `bytes`, or nullptr when the device is out of memory. Throws DeviceError
  /// for any other failure.
  virtual void* malloc(size_t bytes) = 0;
  /// Gives a whole segment back. Throws DeviceError on failure; the allocator has forgotten the
  /// segment by then and will never pass it again.
  virtual void free(void* ptr, size_t bytes) = 0;
  /// The calling thread's current stream: the stream an allocation belongs to.
  virtual StreamHandle current_stream() = 0;
  /// A new event recorded on `stream` (it completes when the work queued there so far has).
  virtual EventHandle record_event(StreamHandle stream) = 0;
  /// Whether the event has completed.
  virtual bool query_event(EventHandle event) = 0;
  /// Blocks until the event has completed.
  virtual void synchronize_event(EventHandle event) = 0;
  /// Destroys an event (recorded or complete). Never throws: a failure at most leaks the event.
  virtual void destroy_event(EventHandle event) noexcept = 0;
  /// Blocks until all work queued on the device has finished (before segments are freed).
  virtual void synchronize_device() = 0;
  /// Copies nbytes of device memory at src to host memory at dst and waits for the copy.
  virtual void copy_to_host(void* dst, const void* src, size_t nbytes) = 0;
  /// The device's free and total memory for an out-of-memory message ("3.2 GiB free of 80 GiB"),
  /// or empty when unknown.
  virtual std::string memory_info() { return {}; }
};

class DeviceCachingAllocator final : public CachingAllocatorBase {
 public:
  /// The block size a request of nbytes (> 0) is rounded to: a multiple of 512 B.
  static size_t block_size(size_t nbytes);
  /// The segment size the allocator asks the device for to serve a block of `block` bytes.
  static size_t segment_size(size_t block);

  explicit DeviceCachingAllocator(std::unique_ptr<DeviceMemory> memory);
  /// Frees the bookkeeping only: device memory is not given back (call empty_cache() first). The
  /// CUDA allocators are never destroyed, so no device call runs after the runtime has shut down.
  ~DeviceCachingAllocator() override;

  /// A block of at least nbytes for the calling thread's current stream. Throws OutOfMemoryError
  /// when the device has no room even after the cache is released, DeviceError when a device
  /// call fails otherwise.
  void* allocate(size_t nbytes) override;
  /// Returns a block; it is reused once the streams recorded with record_stream have finished
  /// the work queued now. Never throws (storage destructors call it); a pointer not handed out by
  /// this allocator is ignored.
  void deallocate(void* ptr, size_t nbytes) override;
  /// Waits for pending events, then gives every segment that is entirely free back to the device.
  void empty_cache() override;
  Device device() const override;
  void copy_to_host(void* dst, const void* src, size_t nbytes) const override;
  /// Memory on the CPU from a caching allocator of device-visible memory is pinned host memory.
  bool is_pinned() const override;

  /// Marks the live block that holds `ptr` (any address inside it) as used by work queued on
  /// `stream`, so that freeing it waits for that work before the block is reused. Needed when a
  /// block is read or written on a stream other than the one it was allocated on. Throws
  /// ValueError when ptr is in no live block of this allocator.
  void record_stream(const void* ptr, StreamHandle stream);

  /// A private pool's id (0: the shared cache). A CUDA graph allocates from a pool of its own: its
  /// replays write the blocks its capture was given again, whether or not the tensors that held
  /// them are still alive, so no other allocation may ever receive them (torch.cuda.graph's
  /// private memory pool).
  using PoolId = uint64_t;

  /// From now on, allocations whose current stream is `stream` come from private pool `pool`
  /// (created by its first use) instead of the shared cache: from the pool's free blocks, else
  /// from new segments that belong to the pool. One pool per stream at a time. ValueError for
  /// pool 0; StateError when `stream` already allocates to a pool or `pool` was released.
  void begin_allocate_to_pool(PoolId pool, StreamHandle stream);
  /// Stops routing to `pool` (StateError when nothing routes to it). Its blocks stay its own:
  /// freed, they are reused only by later allocations to the same pool, and empty_cache() keeps
  /// its segments.
  void end_allocate_to_pool(PoolId pool);
  /// The pool's owner is gone: its free blocks join the shared cache now, its live ones when they
  /// are freed; empty_cache() can then give its segments back. Releasing a pool that never
  /// allocated is allowed; StateError while allocations still route to it.
  void release_pool(PoolId pool);
  /// Segments held for private pool `pool` (0: the shared cache's).
  size_t pool_segment_count(PoolId pool) const;

  /// Segments held from the device.
  size_t segment_count() const;
  /// Free blocks in the cache (reusable now).
  size_t free_block_count() const;
  /// Freed blocks waiting for events of other streams.
  size_t pending_event_count() const;

 private:
  struct Block;
  struct BlockOrder {
    bool operator()(const Block* a, const Block* b) const;
  };
  using Pool = std::set<Block*, BlockOrder>;

  Pool& pool_for(size_t size);
  Block* take_free(Pool& pool, PoolId owner, StreamHandle stream, size_t size);
  Block* new_segment(void* ptr, size_t bytes, StreamHandle stream, bool small, PoolId owner);
  PoolId owner_for(StreamHandle stream) const;
  void split(Block* b, size_t size);
  void free_block(Block* b);
  void process_events();
  void wait_for_events();
  void release_free_segments();
  void deallocate_locked(Block* b) noexcept;
  void retire(Block* b) noexcept;  // records b's events on the streams that used it, or frees it
  [[noreturn]] void throw_oom(size_t nbytes, size_t segment);

  std::unique_ptr<DeviceMemory> memory_;
  // All guarded by mutex_.
  Pool small_pool_;
  Pool large_pool_;
  std::map<const char*, Block*> live_;  // ordered: record_stream finds the block holding an address
  std::set<Block*> segments_;            // the first block of every segment (stable under merges)
  struct Pending {
    EventHandle event;
    Block* block;
  };
  std::list<Pending> pending_;           // events recorded when blocks used on other streams were freed
  std::vector<Block*> deferred_;         // such blocks freed during a capture: events recorded after it
  std::map<StreamHandle, PoolId> routing_;  // streams whose allocations go to a private pool now
  std::set<PoolId> released_;               // pools whose owner is gone (never routed to again)
};

}  // namespace precis
