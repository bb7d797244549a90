// The device caching allocator's bookkeeping (core/device_caching_allocator.h) on a fake device
// whose malloc, free, streams and events the test controls: best fit, splitting and merging,
// reuse gated by events of other streams, release and retry on out of memory, a free that fails,
// and the statistics. Runs without a GPU; the CUDA allocators are this class over CUDA calls.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/device_caching_allocator.h"
#include "core/error.h"
#include "core/warning.h"

using namespace precis;

namespace {

constexpr size_t KiB = 1024, MiB = 1024 * 1024;

StreamHandle stream(uintptr_t id) { return reinterpret_cast<StreamHandle>(id); }

// What the fake device did, shared with the test (the allocator owns the device object).
struct FakeState {
  size_t capacity = 256 * MiB;
  size_t in_use = 0;
  std::map<void*, size_t> segments;  // handed out by malloc, not yet freed
  int malloc_calls = 0, failed_mallocs = 0, free_calls = 0, bad_frees = 0, device_syncs = 0;
  int fail_free_call = -1;      // free call number (1-based) that throws
  void* failed_free = nullptr;  // the segment that call was given (still held by the device)
  bool fail_record = false, fail_sync = false;
  // A graph capture is underway: as CUDA, the device refuses an event query then, and an event
  // recorded then belongs to the graph and can never be queried or waited for.
  bool capturing = false;
  StreamHandle current = stream(1);
  struct Ev {
    StreamHandle stream;
    bool done = false;
    bool destroyed = false;
    bool captured = false;
  };
  std::vector<Ev> events;  // an event's handle is its index + 1

  // Everything queued on `s` so far has run.
  void complete(StreamHandle s) {
    for (Ev& e : events)
      if (e.stream == s) e.done = true;
  }
  int live_events() const {
    int n = 0;
    for (const Ev& e : events) n += e.destroyed ? 0 : 1;
    return n;
  }
};

class FakeDevice final : public DeviceMemory {
 public:
  explicit FakeDevice(std::shared_ptr<FakeState> st, Device dev = Device::cuda(0)) : st_(std::move(st)), dev_(dev) {}
  Device device() const override { return dev_; }
  void* malloc(size_t bytes) override {
    ++st_->malloc_calls;
    if (st_->in_use + bytes > st_->capacity) {
      ++st_->failed_mallocs;
      return nullptr;
    }
    void* p = std::malloc(bytes);  // real memory: ASan would also catch a double free
    REQUIRE(p != nullptr);
    st_->segments[p] = bytes;
    st_->in_use += bytes;
    return p;
  }
  void free(void* ptr, size_t bytes) override {
    ++st_->free_calls;
    auto it = st_->segments.find(ptr);
    if (it == st_->segments.end() || it->second != bytes) {
      ++st_->bad_frees;  // a double free, or a free of something malloc never gave
      return;
    }
    if (st_->free_calls == st_->fail_free_call) {
      st_->failed_free = ptr;
      throw DeviceError("fake device: free failed");
    }
    std::free(ptr);
    st_->in_use -= bytes;
    st_->segments.erase(it);
  }
  StreamHandle current_stream() override { return st_->current; }
  EventHandle record_event(StreamHandle s) override {
    if (st_->fail_record) throw DeviceError("fake device: event record failed");
    st_->events.push_back({.stream = s, .captured = st_->capturing});
    return reinterpret_cast<EventHandle>(st_->events.size());
  }
  bool query_event(EventHandle e) override {
    if (st_->capturing) throw DeviceError("fake device: an event query during a graph capture");
    return usable(e).done;
  }
  void synchronize_event(EventHandle e) override { usable(e).done = true; }
  void destroy_event(EventHandle e) noexcept override { ev(e).destroyed = true; }
  void synchronize_device() override {
    ++st_->device_syncs;
    if (st_->fail_sync) throw DeviceError("fake device: synchronize failed");
    for (auto& e : st_->events) e.done = true;
  }
  void copy_to_host(void*, const void*, size_t) override {}
  std::string memory_info() override { return std::to_string(st_->capacity - st_->in_use) + " bytes free"; }

 private:
  FakeState::Ev& ev(EventHandle e) { return st_->events.at(reinterpret_cast<size_t>(e) - 1); }
  FakeState::Ev& usable(EventHandle e) {
    if (ev(e).captured) throw DeviceError("fake device: an event recorded during a graph capture was queried");
    return ev(e);
  }
  std::shared_ptr<FakeState> st_;
  Device dev_;
};

struct Fixture {
  std::shared_ptr<FakeState> st = std::make_shared<FakeState>();
  DeviceCachingAllocator alloc{std::make_unique<FakeDevice>(st)};
  ~Fixture() {
    // Give everything back so the real memory behind the fake segments is not leaked.
    st->fail_free_call = -1;
    st->fail_sync = false;
    alloc.empty_cache();
    for (auto& [p, n] : st->segments) std::free(p);  // a failed free's segment, or a kept-out block's
  }
};

char* at(void* p, size_t off) { return static_cast<char*>(p) + off; }

}  // namespace

TEST_CASE("device allocator: block and segment sizes", "[core][allocator]") {
  CHECK(DeviceCachingAllocator::block_size(1) == 512);
  CHECK(DeviceCachingAllocator::block_size(512) == 512);
  CHECK(DeviceCachingAllocator::block_size(513) == 1024);
  CHECK(DeviceCachingAllocator::segment_size(512) == 2 * MiB);
  CHECK(DeviceCachingAllocator::segment_size(1 * MiB) == 2 * MiB);
  CHECK(DeviceCachingAllocator::segment_size(1 * MiB + 512) == 20 * MiB);
  CHECK(DeviceCachingAllocator::segment_size(10 * MiB - 512) == 20 * MiB);
  CHECK(DeviceCachingAllocator::segment_size(10 * MiB) == 10 * MiB);
  CHECK(DeviceCachingAllocator::segment_size(11 * MiB) == 12 * MiB);
}

TEST_CASE("device allocator: small blocks split one segment and merge back when freed", "[core][allocator]") {
  Fixture f;
  void* a = f.alloc.allocate(1000);
  void* b = f.alloc.allocate(1000);
  void* c = f.alloc.allocate(100);
  CHECK(f.st->malloc_calls == 1);  // one 2 MiB segment serves all three
  CHECK(b == at(a, 1024));
  CHECK(c == at(a, 2048));
  AllocatorStats s = f.alloc.stats();
  CHECK(s.allocated == 1024 + 1024 + 512);
  CHECK(s.reserved == 2 * MiB);
  CHECK(s.num_allocs == 3);
  CHECK(s.num_cache_hits == 2);  // b and c came from the rest of a's segment
  f.alloc.deallocate(b, 1000);
  CHECK(f.alloc.free_block_count() == 2);  // b's hole and the segment's tail
  f.alloc.deallocate(a, 1000);
  CHECK(f.alloc.free_block_count() == 2);  // a merged with b's hole
  f.alloc.deallocate(c, 100);
  CHECK(f.alloc.free_block_count() == 1);  // the whole segment again
  CHECK(f.alloc.stats().allocated == 0);
  CHECK(f.alloc.stats().peak_allocated == 2560);
  f.alloc.empty_cache();
  CHECK(f.st->free_calls == 1);
  CHECK(f.st->bad_frees == 0);
  CHECK(f.alloc.segment_count() == 0);
  CHECK(f.alloc.stats().reserved == 0);
}

TEST_CASE("device allocator: best fit among cached large blocks, split only when the rest is large",
          "[core][allocator]") {
  Fixture f;
  void* a = f.alloc.allocate(3 * MiB);  // a 20 MiB segment: a | rest
  void* b = f.alloc.allocate(5 * MiB);
  void* c = f.alloc.allocate(4 * MiB);
  REQUIRE(f.st->malloc_calls == 1);
  CHECK(b == at(a, 3 * MiB));
  CHECK(c == at(a, 8 * MiB));
  f.alloc.deallocate(a, 3 * MiB);  // a free 3 MiB block before b
  f.alloc.deallocate(c, 4 * MiB);  // merges with the 8 MiB tail: a free 12 MiB block
  CHECK(f.alloc.free_block_count() == 2);
  // 2.5 MiB: the 3 MiB block fits best; the 0.5 MiB rest is too small to split off.
  void* d = f.alloc.allocate(2 * MiB + 512 * KiB);
  CHECK(d == a);
  CHECK(f.alloc.stats().allocated == 3 * MiB + 5 * MiB);
  // 6 MiB: only the 12 MiB block fits; it is split (the 6 MiB rest stays cached).
  void* e = f.alloc.allocate(6 * MiB);
  CHECK(e == at(a, 8 * MiB));
  CHECK(f.alloc.free_block_count() == 1);
  CHECK(f.st->malloc_calls == 1);
  for (void* p : {b, d, e}) f.alloc.deallocate(p, 1);
  CHECK(f.alloc.free_block_count() == 1);  // all merged into the one segment
}

TEST_CASE("device allocator: varying request sizes reuse the cache instead of calling malloc", "[core][allocator]") {
  // Token-budget batches: every step asks for a slightly different size.
  Fixture f;
  std::mt19937 rng(7);
  std::uniform_int_distribution<size_t> size(1 * MiB + 1, 9 * MiB);
  for (int step = 0; step < 200; ++step) {
    void* x = f.alloc.allocate(size(rng));
    void* y = f.alloc.allocate(size(rng));
    f.alloc.deallocate(x, 0);
    f.alloc.deallocate(y, 0);
  }
  CHECK(f.st->malloc_calls == 1);
  CHECK(f.alloc.stats().num_cache_hits >= 399);
}

TEST_CASE("device allocator: a block used on another stream is reused only after that stream's event",
          "[core][allocator]") {
  Fixture f;
  const StreamHandle s1 = stream(1), s2 = stream(2);
  SECTION("without record_stream a freed block is reused at once on its own stream") {
    void* a = f.alloc.allocate(4096);
    f.alloc.deallocate(a, 4096);
    CHECK(f.alloc.allocate(4096) == a);
    CHECK(f.st->events.empty());
  }
  SECTION("with record_stream it waits for the other stream") {
    void* a = f.alloc.allocate(4096);
    f.alloc.record_stream(at(a, 100), s2);  // any address inside the block
    f.alloc.record_stream(a, s2);           // recorded once
    f.alloc.record_stream(a, s1);           // its own stream: nothing to record
    f.alloc.deallocate(a, 4096);
    REQUIRE(f.st->events.size() == 1);
    CHECK(f.st->events[0].stream == s2);
    CHECK(f.alloc.pending_event_count() == 1);
    void* b = f.alloc.allocate(4096);
    CHECK(b != a);  // s2 may still be reading a
    f.st->complete(s2);
    f.alloc.deallocate(b, 4096);
    void* c = f.alloc.allocate(4096);  // the event is queried here: a is free again
    CHECK(c == a);
    CHECK(f.alloc.pending_event_count() == 0);
    CHECK(f.st->live_events() == 0);
    f.alloc.deallocate(c, 4096);
  }
  SECTION("blocks belong to the stream they were allocated on") {
    void* a = f.alloc.allocate(4096);
    f.alloc.deallocate(a, 4096);
    f.st->current = s2;
    void* b = f.alloc.allocate(4096);
    CHECK(f.st->malloc_calls == 2);  // s1's cached segment is not handed to s2
    CHECK(b != a);
    f.alloc.deallocate(b, 4096);
  }
  SECTION("record_stream on an address no live block holds is a ValueError") {
    void* a = f.alloc.allocate(4096);
    CHECK_THROWS_AS(f.alloc.record_stream(at(a, 4096), s2), ValueError);  // one past the block
    f.alloc.deallocate(a, 4096);
    CHECK_THROWS_AS(f.alloc.record_stream(a, s2), ValueError);  // freed
    int local = 0;
    CHECK_THROWS_AS(f.alloc.record_stream(&local, s2), ValueError);
  }
}

TEST_CASE("device allocator: out of memory waits for events, releases the cache and retries", "[core][allocator]") {
  Fixture f;
  f.st->capacity = 24 * MiB;
  SECTION("cached segments of another stream are released for a new one") {
    void* x = f.alloc.allocate(12 * MiB);
    f.alloc.deallocate(x, 12 * MiB);
    f.st->current = stream(2);
    void* y = f.alloc.allocate(16 * MiB);  // 12 cached + 16 > 24: release, then retry
    CHECK(f.alloc.stats().num_cache_flushes == 1);
    CHECK(f.st->free_calls == 1);
    CHECK(f.st->bad_frees == 0);
    CHECK(f.alloc.stats().reserved == 16 * MiB);
    CHECK(f.alloc.segment_count() == 1);
    f.alloc.deallocate(y, 0);
  }
  SECTION("a block waiting for another stream is waited for instead of failing") {
    void* x = f.alloc.allocate(20 * MiB);
    f.alloc.record_stream(x, stream(2));
    f.alloc.deallocate(x, 0);  // pending on stream 2, which has not run yet
    void* y = f.alloc.allocate(20 * MiB);
    CHECK(y == x);  // malloc failed, the event was waited for, the block came back
    CHECK(f.st->malloc_calls == 2);
    CHECK(f.alloc.stats().num_cache_flushes == 1);
    CHECK(f.st->free_calls == 0);
    f.alloc.deallocate(y, 0);
  }
  SECTION("a 3 MiB request settles for a 4 MiB segment when the shared 20 MiB one does not fit") {
    f.st->capacity = 8 * MiB;
    void* x = f.alloc.allocate(3 * MiB);
    CHECK(f.alloc.stats().reserved == 4 * MiB);
    f.alloc.deallocate(x, 0);
  }
  SECTION("when nothing helps: OutOfMemoryError naming the request, the device and the fix") {
    void* x = f.alloc.allocate(12 * MiB);
    try {
      (void)f.alloc.allocate(16 * MiB);
      FAIL("no exception");
    } catch (const OutOfMemoryError& e) {
      CHECK(e.requested_bytes() == 16 * MiB);
      CHECK(e.device() == "cuda:0");
      const std::string m = e.what();
      CHECK(m.find("cuda:0") != std::string::npos);
      CHECK(m.find("16777216 bytes") != std::string::npos);
      CHECK(m.find("reduce the batch size") != std::string::npos);
      CHECK(m.find("bytes free") != std::string::npos);  // the device's own figure
    }
    // Still usable, and the live block was left alone.
    CHECK(f.alloc.stats().allocated == 12 * MiB);
    void* y = f.alloc.allocate(4 * MiB);
    f.alloc.deallocate(y, 0);
    f.alloc.deallocate(x, 0);
    CHECK(f.st->bad_frees == 0);
  }
}

TEST_CASE("device allocator: a free that fails never leads to a second free of the same segment",
          "[core][allocator]") {
  Fixture f;
  void* a = f.alloc.allocate(12 * MiB);
  void* b = f.alloc.allocate(14 * MiB);
  void* c = f.alloc.allocate(16 * MiB);
  for (void* p : {a, b, c}) f.alloc.deallocate(p, 0);
  REQUIRE(f.alloc.segment_count() == 3);
  SECTION("in empty_cache") {
    f.st->fail_free_call = 2;
    CHECK_THROWS_AS(f.alloc.empty_cache(), DeviceError);
    REQUIRE(f.st->failed_free != nullptr);
    // The failed segment is forgotten (counted as released); the one not reached is still cached.
    CHECK(f.alloc.segment_count() == 1);
    size_t cached = 0;
    for (const auto& [p, n] : f.st->segments)
      if (p != f.st->failed_free) cached += n;
    CHECK(f.alloc.stats().reserved == cached);
    f.alloc.empty_cache();
    CHECK(f.st->free_calls == 3);  // each segment passed to free exactly once
    CHECK(f.alloc.segment_count() == 0);
    CHECK(f.alloc.stats().reserved == 0);
    CHECK(f.st->segments.size() == 1);  // only the one whose free failed
  }
  SECTION("in the out-of-memory path of allocate") {
    f.st->capacity = 42 * MiB;  // the three cached segments fill the device
    f.st->current = stream(2);  // and a stream-2 request cannot use them: they must be released
    f.st->fail_free_call = 1;
    CHECK_THROWS_AS(f.alloc.allocate(8 * MiB), DeviceError);
    CHECK(f.alloc.segment_count() == 2);
    void* d = f.alloc.allocate(8 * MiB);  // releases the two left, then fits
    CHECK(f.st->free_calls == 3);
    CHECK(f.alloc.segment_count() == 1);
    f.alloc.deallocate(d, 0);
  }
  CHECK(f.st->bad_frees == 0);
}

TEST_CASE("device allocator: when no event can be recorded the block is ordered by a device sync, or kept out",
          "[core][allocator]") {
  Fixture f;
  void* a = f.alloc.allocate(4096);
  f.alloc.record_stream(a, stream(2));
  f.st->fail_record = true;
  SECTION("the sync works: the block is reusable at once") {
    f.alloc.deallocate(a, 4096);
    CHECK(f.st->device_syncs == 1);
    CHECK(f.alloc.allocate(4096) == a);
  }
  SECTION("the sync fails too: the block is never handed out again, with a warning") {
    std::vector<std::string> warnings;
    auto previous = set_warning_handler([&](const std::string& m) { warnings.push_back(m); });
    f.st->fail_sync = true;
    f.alloc.deallocate(a, 4096);
    set_warning_handler(previous);
    REQUIRE(warnings.size() == 1);
    CHECK(warnings[0].find("4096 bytes") != std::string::npos);
    f.st->fail_sync = false;
    f.st->fail_record = false;
    void* b = f.alloc.allocate(4096);
    CHECK(b != a);
    CHECK(f.alloc.stats().allocated == 4096);  // the kept-out block is not live
    f.alloc.deallocate(b, 4096);
    f.alloc.empty_cache();
    CHECK(f.alloc.segment_count() == 1);  // its segment cannot be released
  }
}

TEST_CASE("device allocator: statistics and the Allocator interface", "[core][allocator]") {
  Fixture f;
  CHECK(f.alloc.allocate(0) == nullptr);
  void* a = f.alloc.allocate(100);
  void* b = f.alloc.allocate(3 * MiB);
  AllocatorStats s = f.alloc.stats();
  CHECK(s.num_allocs == 2);  // a zero-byte request returns nullptr without counting, as on the CPU
  CHECK(s.allocated == 512 + 3 * MiB);
  CHECK(s.reserved == 2 * MiB + 20 * MiB);
  f.alloc.deallocate(b, 3 * MiB);
  f.alloc.reset_peak_stats();
  CHECK(f.alloc.stats().peak_allocated == 512);
  f.alloc.deallocate(a, 100);
  f.alloc.deallocate(a, 100);  // a second free of the same pointer is ignored, not a corruption
  CHECK(f.alloc.stats().allocated == 0);
  CHECK(f.alloc.device() == Device::cuda(0));
  CHECK_FALSE(f.alloc.is_pinned());
  auto st = std::make_shared<FakeState>();
  DeviceCachingAllocator host(std::make_unique<FakeDevice>(st, Device::cpu()));
  CHECK(host.is_pinned());  // device-visible memory on the CPU is pinned host memory
  CHECK_THROWS_AS(f.alloc.allocate(~size_t{0}), OutOfMemoryError);
}

TEST_CASE("device allocator: a private pool's blocks go only to allocations routed to it, until it is released",
          "[core][allocator][graph]") {
  Fixture f;
  constexpr DeviceCachingAllocator::PoolId kGraph = 7;
  void* before = f.alloc.allocate(1000);  // the shared cache's segment, with room to spare
  f.alloc.begin_allocate_to_pool(kGraph, stream(1));
  void* captured = f.alloc.allocate(1000);
  CHECK(f.st->malloc_calls == 2);  // a segment of the pool's own, not the shared one's free tail
  CHECK(f.alloc.pool_segment_count(kGraph) == 1);
  f.st->current = stream(2);
  void* elsewhere = f.alloc.allocate(1000);  // another stream is not being captured
  CHECK(f.alloc.pool_segment_count(kGraph) == 1);
  f.alloc.deallocate(elsewhere, 1000);
  f.st->current = stream(1);
  f.alloc.deallocate(captured, 1000);
  void* again = f.alloc.allocate(1000);  // within the capture the pool reuses its own blocks
  CHECK(again == captured);
  f.alloc.deallocate(again, 1000);
  f.alloc.end_allocate_to_pool(kGraph);

  // After the capture the pool's free block is never handed out, and empty_cache keeps it.
  void* after = f.alloc.allocate(1000);
  CHECK(static_cast<char*>(after) - static_cast<char*>(before) == 1024);  // the shared segment's tail
  f.alloc.deallocate(after, 1000);
  f.alloc.deallocate(before, 1000);
  f.alloc.empty_cache();
  CHECK(f.alloc.pool_segment_count(kGraph) == 1);
  CHECK(f.alloc.segment_count() == 1);

  // A later capture into the same pool is served from it without a malloc.
  const int mallocs = f.st->malloc_calls;
  f.alloc.begin_allocate_to_pool(kGraph, stream(1));
  void* second = f.alloc.allocate(2000);
  CHECK(f.st->malloc_calls == mallocs);
  CHECK(second == captured);
  f.alloc.end_allocate_to_pool(kGraph);

  // Released while `second` is alive: the free rest joins the shared cache now, `second` when freed.
  f.alloc.release_pool(kGraph);
  CHECK(f.alloc.pool_segment_count(kGraph) == 0);
  void* shared = f.alloc.allocate(1000);
  CHECK(shared == at(second, 2048));
  f.alloc.deallocate(shared, 1000);
  f.alloc.deallocate(second, 2000);
  f.alloc.empty_cache();
  CHECK(f.alloc.segment_count() == 0);
  CHECK(f.st->bad_frees == 0);
}

TEST_CASE("device allocator: private pool misuse is refused with StateError or ValueError", "[core][allocator][graph]") {
  Fixture f;
  CHECK_THROWS_AS(f.alloc.begin_allocate_to_pool(0, stream(1)), ValueError);
  CHECK_THROWS_AS(f.alloc.end_allocate_to_pool(3), StateError);
  f.alloc.begin_allocate_to_pool(3, stream(1));
  CHECK_THROWS_WITH(f.alloc.begin_allocate_to_pool(4, stream(1)), Catch::Contains("already allocates to private pool 3"));
  CHECK_THROWS_WITH(f.alloc.release_pool(3), Catch::Contains("end_allocate_to_pool first"));
  f.alloc.begin_allocate_to_pool(4, stream(2));  // one pool per stream: another stream may capture
  f.alloc.end_allocate_to_pool(4);
  f.alloc.end_allocate_to_pool(3);
  f.alloc.release_pool(3);
  f.alloc.release_pool(4);
  CHECK_THROWS_WITH(f.alloc.begin_allocate_to_pool(3, stream(1)), Catch::Contains("was released"));
  CHECK_THROWS_AS(f.alloc.release_pool(0), ValueError);
}

TEST_CASE("device allocator: a capture neither queries nor records events, and blocks freed in it get theirs after it",
          "[core][allocator][graph]") {
  Fixture f;
  const StreamHandle own = stream(1), side = stream(2);
  // Before the capture: a block used on the side stream is freed, so its event is pending.
  void* early = f.alloc.allocate(4 * MiB);
  f.alloc.record_stream(early, side);
  f.alloc.deallocate(early, 4 * MiB);
  void* used = f.alloc.allocate(1 * MiB);  // freed during the capture, also used on the side stream
  f.alloc.record_stream(used, side);
  REQUIRE(f.alloc.pending_event_count() == 1);

  f.alloc.begin_allocate_to_pool(7, own);
  f.st->capturing = true;
  void* captured = f.alloc.allocate(2 * MiB);  // does not query the pending event
  f.alloc.deallocate(used, 1 * MiB);           // records no event inside the capture
  f.alloc.deallocate(captured, 2 * MiB);
  CHECK(f.alloc.pending_event_count() == 1);
  f.st->capturing = false;
  f.alloc.end_allocate_to_pool(7);
  CHECK(f.alloc.pending_event_count() == 2);  // `used`'s event, recorded after the capture
  for (const FakeState::Ev& e : f.st->events) CHECK_FALSE(e.captured);

  // Both blocks wait for the side stream, then return to the cache.
  f.alloc.deallocate(f.alloc.allocate(1000), 1000);  // queries both events: not done
  CHECK(f.alloc.pending_event_count() == 2);
  f.st->complete(side);
  f.alloc.deallocate(f.alloc.allocate(1000), 1000);
  CHECK(f.alloc.pending_event_count() == 0);
  f.alloc.release_pool(7);
  CHECK(f.st->bad_frees == 0);
}
