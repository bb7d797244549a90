#include "core/device_caching_allocator.h"

#include <algorithm>
#include <cstdint>
#include <functional>

#include "core/checked_math.h"
#include "core/cuda_graph.h"
#include "core/error.h"
#include "core/warning.h"

namespace precis {

namespace {

constexpr size_t kMinBlock = 512;                   // every block is a multiple of this
constexpr size_t kSmallLimit = size_t{1} << 20;     // blocks up to 1 MiB share small segments
constexpr size_t kSmallSegment = size_t{2} << 20;   // a small pool segment
constexpr size_t kMidLimit = size_t{10} << 20;      // blocks under this share a 20 MiB segment
constexpr size_t kMidSegment = size_t{20} << 20;
constexpr size_t kLargeStep = size_t{2} << 20;      // bigger segments are rounded to 2 MiB

size_t round_up(size_t n, size_t step) { return (n + step - 1) / step * step; }

std::string bytes_str(size_t n) {
  const double mib = static_cast<double>(n) / (1024.0 * 1024.0);
  return detail::str_cat(n, " bytes (", mib, " MiB)");
}

}  // namespace

// A block: a piece of one segment, free or handed out. The blocks of a segment form a list in
// address order (prev/next); a segment's first block never goes away while the segment is held.
// Invariant: a block is in its pool exactly when it is neither allocated nor waiting for events.
struct DeviceCachingAllocator::Block {
  char* ptr = nullptr;
  size_t size = 0;
  StreamHandle stream = nullptr;  // the stream it was allocated for
  PoolId owner = 0;               // the private pool its segment belongs to (0: the shared cache)
  bool small = false;             // in the small pool (else the large one)
  bool allocated = false;
  int pending = 0;                // events still to complete before it is free
  Block* prev = nullptr;
  Block* next = nullptr;
  std::vector<StreamHandle> uses;  // streams other than `stream` that used it (record_stream)
};

bool DeviceCachingAllocator::BlockOrder::operator()(const Block* a, const Block* b) const {
  // Grouped by owner and stream, then best fit by size, then by address (std::less gives pointers a
  // total order).
  if (a->owner != b->owner) return a->owner < b->owner;
  if (a->stream != b->stream) return std::less<StreamHandle>()(a->stream, b->stream);
  if (a->size != b->size) return a->size < b->size;
  return std::less<char*>()(a->ptr, b->ptr);
}

size_t DeviceCachingAllocator::block_size(size_t nbytes) { return round_up(std::max<size_t>(nbytes, 1), kMinBlock); }

size_t DeviceCachingAllocator::segment_size(size_t block) {
  if (block <= kSmallLimit) return kSmallSegment;
  if (block < kMidLimit) return kMidSegment;
  return round_up(block, kLargeStep);
}

DeviceCachingAllocator::DeviceCachingAllocator(std::unique_ptr<DeviceMemory> memory) : memory_(std::move(memory)) {
  PRECIS_INTERNAL_ASSERT(memory_ != nullptr, "DeviceCachingAllocator: no device memory interface");
}

DeviceCachingAllocator::~DeviceCachingAllocator() {
  for (const Pending& p : pending_) memory_->destroy_event(p.event);
  for (Block* head : segments_) {
    for (Block* b = head; b != nullptr;) {
      Block* next = b->next;
      delete b;
      b = next;
    }
  }
}

Device DeviceCachingAllocator::device() const { return memory_->device(); }

bool DeviceCachingAllocator::is_pinned() const { return memory_->device().is_cpu(); }

void DeviceCachingAllocator::copy_to_host(void* dst, const void* src, size_t nbytes) const {
  if (nbytes != 0) memory_->copy_to_host(dst, src, nbytes);
}

DeviceCachingAllocator::Pool& DeviceCachingAllocator::pool_for(size_t size) {
  return size <= kSmallLimit ? small_pool_ : large_pool_;
}

DeviceCachingAllocator::Block* DeviceCachingAllocator::take_free(Pool& pool, PoolId owner, StreamHandle stream,
                                                                 size_t size) {
  Block probe;
  probe.owner = owner;
  probe.stream = stream;
  probe.size = size;
  auto it = pool.lower_bound(&probe);  // the smallest block of this owner and stream with >= size bytes
  if (it == pool.end() || (*it)->owner != owner || (*it)->stream != stream) return nullptr;
  Block* b = *it;
  pool.erase(it);
  return b;
}

DeviceCachingAllocator::Block* DeviceCachingAllocator::new_segment(void* ptr, size_t bytes, StreamHandle stream,
                                                                   bool small, PoolId owner) {
  auto* b = new Block;
  b->ptr = static_cast<char*>(ptr);
  b->size = bytes;
  b->stream = stream;
  b->owner = owner;
  b->small = small;
  segments_.insert(b);
  book_.reserve(bytes);
  return b;
}

// Cuts b down to `size` bytes when the rest is worth keeping as a free block of its own.
void DeviceCachingAllocator::split(Block* b, size_t size) {
  const size_t rest = b->size - size;
  const bool worth = b->small ? rest >= kMinBlock : rest > kSmallLimit;
  if (!worth) return;
  auto* r = new Block;
  r->ptr = b->ptr + size;
  r->size = rest;
  r->stream = b->stream;
  r->owner = b->owner;
  r->small = b->small;
  r->prev = b;
  r->next = b->next;
  if (b->next != nullptr) b->next->prev = r;
  b->next = r;
  b->size = size;
  (b->small ? small_pool_ : large_pool_).insert(r);
}

// b is free and waits for nothing: merge it with free neighbours and put the result in its pool.
void DeviceCachingAllocator::free_block(Block* b) {
  Pool& pool = b->small ? small_pool_ : large_pool_;
  auto is_free = [](const Block* n) { return n != nullptr && !n->allocated && n->pending == 0; };
  if (is_free(b->next)) {  // b absorbs next
    Block* n = b->next;
    pool.erase(n);
    b->size += n->size;
    b->next = n->next;
    if (n->next != nullptr) n->next->prev = b;
    delete n;
  }
  if (is_free(b->prev)) {  // prev absorbs b, so a segment's first block survives every merge
    Block* p = b->prev;
    pool.erase(p);
    p->size += b->size;
    p->next = b->next;
    if (b->next != nullptr) b->next->prev = p;
    delete b;
    b = p;
  }
  pool.insert(b);
}

void DeviceCachingAllocator::process_events() {
  for (auto it = pending_.begin(); it != pending_.end();) {
    if (!memory_->query_event(it->event)) {  // a throw leaves this entry, and the state, as it was
      ++it;
      continue;
    }
    memory_->destroy_event(it->event);
    Block* b = it->block;
    it = pending_.erase(it);
    if (--b->pending == 0) free_block(b);
  }
}

void DeviceCachingAllocator::wait_for_events() {
  while (!pending_.empty()) {
    Pending p = pending_.front();
    memory_->synchronize_event(p.event);  // a throw leaves the entry in place
    memory_->destroy_event(p.event);
    pending_.pop_front();
    if (--p.block->pending == 0) free_block(p.block);
  }
}

void DeviceCachingAllocator::release_free_segments() {
  std::vector<Block*> whole;
  // A private pool's segments stay while its owner lives: a graph replay writes them again.
  for (Block* head : segments_)
    if (head->owner == 0 && head->next == nullptr && !head->allocated && head->pending == 0) whole.push_back(head);
  if (whole.empty()) return;
  // A cached block's last users may still be queued on its own stream.
  memory_->synchronize_device();
  for (Block* head : whole) {
    // Forget the segment first: if free throws, nothing refers to it any more, so it can never be
    // handed out or freed a second time.
    (head->small ? small_pool_ : large_pool_).erase(head);
    segments_.erase(head);
    void* ptr = head->ptr;
    const size_t bytes = head->size;
    delete head;
    book_.released(bytes);
    memory_->free(ptr, bytes);
  }
}

void DeviceCachingAllocator::throw_oom(size_t nbytes, size_t segment) {
  const AllocatorStats& st = book_.get();
  const std::string info = memory_->memory_info();
  throw OutOfMemoryError(
      detail::str_cat("out of memory on ", memory_->name(), ": cannot allocate ", bytes_str(nbytes), " (a segment of ",
                      bytes_str(segment), ") even after releasing the cache; the caching allocator holds ",
                      bytes_str(st.allocated), " in live tensors (peak ", bytes_str(st.peak_allocated), "), ",
                      bytes_str(st.reserved), " reserved", info.empty() ? "" : "; the device has ", info,
                      ". Free tensors you no longer need, or reduce the batch size"),
      nbytes, memory_->device().str());
}

void* DeviceCachingAllocator::allocate(size_t nbytes) {
  if (nbytes == 0) return nullptr;
  if (nbytes > kMaxAllocationBytes - kLargeStep)
    throw OutOfMemoryError(detail::str_cat("caching allocator: cannot allocate ", nbytes, " bytes on ",
                                           memory_->name(), ": more than a 64-bit offset can address"),
                           nbytes, memory_->device().str());
  // A capture records the work of its own device's stream: memory on another device (and the work
  // that writes it) would be made once, now, and never by a replay.
  if (const int captured = cuda::capturing_device(); captured >= 0) {
    const Device mine = memory_->device();
    PRECIS_CHECK_T(GraphCaptureError, !mine.is_cuda() || mine.index == captured, "allocating ", nbytes,
                   " bytes on ", mine.str(), " while capturing a CUDA graph of cuda:", captured,
                   ": a capture records one device's work; create the Graph for ", mine.str(),
                   " (cuda::Graph graph(", mine.index, "))");
  }
  const size_t size = block_size(nbytes);
  std::lock_guard<std::mutex> lock(mutex_);
  book_.count_request();
  const StreamHandle stream = memory_->current_stream();
  const PoolId owner = owner_for(stream);
  // An event query is illegal while a stream captures a graph (private pools route only then):
  // blocks waiting for events are reclaimed once no capture is underway, as in PyTorch.
  if (routing_.empty()) process_events();
  Pool& pool = pool_for(size);
  Block* b = take_free(pool, owner, stream, size);
  bool from_cache = b != nullptr;
  if (b == nullptr) {
    size_t seg = segment_size(size);
    void* ptr = memory_->malloc(seg);
    if (ptr == nullptr) {
      book_.cache_flush();
      // Blocks waiting for other streams may be what is missing: wait for them and look again.
      wait_for_events();
      b = take_free(pool, owner, stream, size);
      from_cache = b != nullptr;
      if (b == nullptr) {
        release_free_segments();
        ptr = memory_->malloc(seg);
        // A shared segment is a convenience: settle for one that fits the block alone.
        const size_t tight = round_up(size, kLargeStep);
        if (ptr == nullptr && tight < seg) ptr = memory_->malloc(seg = tight);
        if (ptr == nullptr) throw_oom(nbytes, seg);
      }
    }
    if (b == nullptr) b = new_segment(ptr, seg, stream, &pool == &small_pool_, owner);
  }
  split(b, size);
  b->allocated = true;
  live_.emplace(b->ptr, b);
  book_.hand_out(b->size, from_cache);
  return b->ptr;
}

void DeviceCachingAllocator::deallocate(void* ptr, size_t /*nbytes*/) {
  if (ptr == nullptr) return;
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = live_.find(static_cast<const char*>(ptr));
  if (it == live_.end()) return;  // not ours (the caller's bug would be a double free; see freed())
  Block* b = it->second;
  live_.erase(it);
  deallocate_locked(b);
}

void DeviceCachingAllocator::deallocate_locked(Block* b) noexcept {
  b->allocated = false;
  book_.freed(b->size);  // cannot fail here: the block was live, so its bytes are counted
  if (!b->uses.empty() && !routing_.empty()) {
    // During a capture an event recorded on a capturing stream becomes part of the graph and can
    // never be queried: record the block's events once the capture is over (end_allocate_to_pool).
    ++b->pending;  // out of the cache meanwhile
    try {
      deferred_.push_back(b);
      return;
    } catch (...) {
      --b->pending;  // no room to defer: record now, as outside a capture
    }
  }
  retire(b);
}

void DeviceCachingAllocator::retire(Block* b) noexcept {
  bool recorded_all = true;
  for (StreamHandle s : b->uses) {
    try {
      pending_.push_back({memory_->record_event(s), b});
      ++b->pending;
    } catch (...) {
      recorded_all = false;
    }
  }
  b->uses.clear();
  if (!recorded_all) {
    // Without an event there is no telling when the other stream is done with the block: wait
    // for the whole device, or else never reuse it (a leak is safer than a race).
    try {
      memory_->synchronize_device();
    } catch (...) {
      ++b->pending;  // never completes: the block stays out of the cache
      try {
        warn(detail::str_cat("caching allocator on ", memory_->name(), ": could not order the reuse of a block of ",
                             b->size, " bytes after a stream that used it; the block is kept out of the cache"));
      } catch (...) {
      }
    }
  }
  if (b->pending == 0) free_block(b);
}

void DeviceCachingAllocator::empty_cache() {
  std::lock_guard<std::mutex> lock(mutex_);
  wait_for_events();
  release_free_segments();
}

void DeviceCachingAllocator::record_stream(const void* ptr, StreamHandle stream) {
  std::lock_guard<std::mutex> lock(mutex_);
  const char* p = static_cast<const char*>(ptr);
  auto it = live_.upper_bound(p);
  Block* b = nullptr;
  if (it != live_.begin()) {
    --it;
    if (p < it->second->ptr + it->second->size) b = it->second;
  }
  PRECIS_CHECK(b != nullptr, "record_stream: the address ", ptr, " is in no live block of the caching allocator of ",
               memory_->name(), "; pass the data of a tensor allocated there (not one wrapped with from_blob, "
               "nor one already freed)");
  if (stream == b->stream) return;  // its own stream orders every use
  if (std::find(b->uses.begin(), b->uses.end(), stream) == b->uses.end()) b->uses.push_back(stream);
}

DeviceCachingAllocator::PoolId DeviceCachingAllocator::owner_for(StreamHandle stream) const {
  if (routing_.empty()) [[likely]]
    return 0;
  auto it = routing_.find(stream);
  return it == routing_.end() ? 0 : it->second;
}

void DeviceCachingAllocator::begin_allocate_to_pool(PoolId pool, StreamHandle stream) {
  std::lock_guard<std::mutex> lock(mutex_);
  PRECIS_CHECK(pool != 0, "begin_allocate_to_pool: pool 0 is the shared cache; pass a private pool's id");
  PRECIS_CHECK_T(StateError, released_.count(pool) == 0, "begin_allocate_to_pool: private pool ", pool, " on ",
                 memory_->name(), " was released; a released pool's blocks belong to the shared cache again");
  auto it = routing_.find(stream);
  PRECIS_CHECK_T(StateError, it == routing_.end(), "begin_allocate_to_pool: the stream already allocates to private "
                 "pool ", it == routing_.end() ? 0 : it->second, " on ", memory_->name(),
                 "; end that first (one capture per stream at a time)");
  routing_.emplace(stream, pool);
}

void DeviceCachingAllocator::end_allocate_to_pool(PoolId pool) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = std::find_if(routing_.begin(), routing_.end(), [&](const auto& r) { return r.second == pool; });
  PRECIS_CHECK_T(StateError, it != routing_.end(), "end_allocate_to_pool: no stream allocates to private pool ",
                 pool, " on ", memory_->name());
  routing_.erase(it);
  if (!routing_.empty()) return;
  std::vector<Block*> deferred;
  deferred.swap(deferred_);
  for (Block* b : deferred) {
    --b->pending;
    retire(b);
  }
}

void DeviceCachingAllocator::release_pool(PoolId pool) {
  std::lock_guard<std::mutex> lock(mutex_);
  PRECIS_CHECK(pool != 0, "release_pool: pool 0 is the shared cache, which is never released");
  PRECIS_CHECK_T(StateError,
                 std::none_of(routing_.begin(), routing_.end(), [&](const auto& r) { return r.second == pool; }),
                 "release_pool: allocations on ", memory_->name(), " still go to private pool ", pool,
                 "; end_allocate_to_pool first");
  released_.insert(pool);
  for (Block* head : segments_) {
    if (head->owner != pool) continue;
    for (Block* b = head; b != nullptr; b = b->next) {
      // The free-block sets are ordered by owner: a free block leaves its set to change owner.
      const bool in_set = !b->allocated && b->pending == 0;
      Pool& set = b->small ? small_pool_ : large_pool_;
      if (in_set) set.erase(b);
      b->owner = 0;
      if (in_set) set.insert(b);
    }
  }
}

size_t DeviceCachingAllocator::pool_segment_count(PoolId pool) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return static_cast<size_t>(
      std::count_if(segments_.begin(), segments_.end(), [&](const Block* head) { return head->owner == pool; }));
}

size_t DeviceCachingAllocator::segment_count() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return segments_.size();
}

size_t DeviceCachingAllocator::free_block_count() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return small_pool_.size() + large_pool_.size();
}

size_t DeviceCachingAllocator::pending_event_count() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return pending_.size();
}

}  // namespace precis
