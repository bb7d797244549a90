// The direct device allocator (core/direct_device_allocator.h, PRECIS_CUDA_ALLOCATOR=direct) on a
// fake device: one malloc of exactly the requested bytes per allocation, a device wait before each
// free, statistics with nothing cached, the failures of the wait and of the free, record_stream's
// check. Runs without a GPU; tests/cuda/cuda_direct_allocator_test.cpp checks it over cudaMalloc.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/direct_device_allocator.h"
#include "core/error.h"
#include "core/warning.h"

using namespace precis;

namespace {

constexpr size_t MiB = 1024 * 1024;

struct FakeState {
  size_t capacity = 64 * MiB;
  size_t in_use = 0;
  std::map<void*, size_t> blocks;  // handed out by malloc, not yet freed
  std::vector<std::string> log;    // "malloc N", "sync", "free N", in call order
  bool fail_sync = false, fail_free = false;
};

class FakeDevice final : public DeviceMemory {
 public:
  explicit FakeDevice(std::shared_ptr<FakeState> st) : st_(std::move(st)) {}
  Device device() const override { return Device::cuda(0); }
  void* malloc(size_t bytes) override {
    st_->log.push_back("malloc " + std::to_string(bytes));
    if (st_->in_use + bytes > st_->capacity) return nullptr;
    void* p = std::malloc(bytes);  // real memory of exactly this size: ASan sees an overrun
    REQUIRE(p != nullptr);
    st_->blocks[p] = bytes;
    st_->in_use += bytes;
    return p;
  }
  void free(void* ptr, size_t bytes) override {
    st_->log.push_back("free " + std::to_string(bytes));
    auto it = st_->blocks.find(ptr);
    REQUIRE(it != st_->blocks.end());  // a double free, or one of memory malloc never gave
    REQUIRE(it->second == bytes);
    if (st_->fail_free) throw DeviceError("fake device: free failed");
    std::free(ptr);
    st_->in_use -= bytes;
    st_->blocks.erase(it);
  }
  StreamHandle current_stream() override { return nullptr; }
  EventHandle record_event(StreamHandle) override {
    FAIL("the direct allocator records no events");
    return nullptr;
  }
  bool query_event(EventHandle) override { return true; }
  void synchronize_event(EventHandle) override {}
  void destroy_event(EventHandle) noexcept override {}
  void synchronize_device() override {
    st_->log.push_back("sync");
    if (st_->fail_sync) throw DeviceError("fake device: synchronize failed");
  }
  void copy_to_host(void*, const void*, size_t) override {}
  std::string memory_info() override { return std::to_string(st_->capacity - st_->in_use) + " bytes free"; }

 private:
  std::shared_ptr<FakeState> st_;
};

struct Fixture {
  std::shared_ptr<FakeState> st = std::make_shared<FakeState>();
  DirectDeviceAllocator alloc{std::make_unique<FakeDevice>(st)};
  ~Fixture() {
    for (auto& [p, n] : st->blocks) std::free(p);  // blocks a failed wait or free left behind
  }
};

}  // namespace

TEST_CASE("direct allocator: one device malloc of exactly the requested bytes per allocation", "[core][allocator]") {
  Fixture f;
  CHECK(f.alloc.allocate(0) == nullptr);
  CHECK(f.st->log.empty());
  void* a = f.alloc.allocate(1);
  void* b = f.alloc.allocate(1001);
  void* c = f.alloc.allocate(3 * MiB + 7);
  CHECK(f.st->log == std::vector<std::string>{"malloc 1", "malloc 1001", "malloc " + std::to_string(3 * MiB + 7)});
  const AllocatorStats s = f.alloc.stats();
  CHECK(s.num_allocs == 3);
  CHECK(s.num_cache_hits == 0);
  CHECK(s.allocated == 1 + 1001 + 3 * MiB + 7);  // no rounding
  CHECK(s.reserved == s.allocated);              // nothing cached
  CHECK(s.peak_allocated == s.allocated);
  CHECK(f.alloc.live_block_count() == 3);
  CHECK(f.alloc.device() == Device::cuda(0));
  CHECK_FALSE(f.alloc.is_pinned());
  f.alloc.deallocate(a, 1);
  f.alloc.deallocate(b, 1001);
  f.alloc.deallocate(c, 3 * MiB + 7);
}

TEST_CASE("direct allocator: a free waits for the device, then gives the memory back at once", "[core][allocator]") {
  Fixture f;
  void* a = f.alloc.allocate(1000);
  void* b = f.alloc.allocate(5000);
  f.st->log.clear();
  f.alloc.deallocate(b, 5000);
  CHECK(f.st->log == std::vector<std::string>{"sync", "free 5000"});  // the wait comes first
  CHECK(f.st->in_use == 1000);
  AllocatorStats s = f.alloc.stats();
  CHECK(s.allocated == 1000);
  CHECK(s.reserved == 1000);
  CHECK(s.peak_allocated == 6000);
  f.alloc.reset_peak_stats();
  CHECK(f.alloc.stats().peak_allocated == 1000);
  f.alloc.empty_cache();  // nothing cached: no device call
  CHECK(f.st->log.size() == 2);
  f.alloc.deallocate(b, 5000);  // a second free of the same pointer is ignored
  int local = 0;
  f.alloc.deallocate(&local, 4);  // and so is a pointer it never handed out
  CHECK(f.st->log.size() == 2);
  f.alloc.deallocate(a, 1000);
  CHECK(f.st->in_use == 0);
  s = f.alloc.stats();
  CHECK(s.allocated == 0);
  CHECK(s.reserved == 0);
  CHECK(f.alloc.live_block_count() == 0);
}

TEST_CASE("direct allocator: out of memory is an OutOfMemoryError naming the request, the device and the switch",
          "[core][allocator]") {
  Fixture f;
  void* a = f.alloc.allocate(40 * MiB);
  const size_t want = 30 * MiB;
  try {
    (void)f.alloc.allocate(want);
    FAIL("no exception");
  } catch (const OutOfMemoryError& e) {
    const std::string msg = e.what();
    CHECK(e.requested_bytes() == want);
    CHECK(e.device() == "cuda:0");
    CHECK(msg.find(std::to_string(want)) != std::string::npos);
    CHECK(msg.find("PRECIS_CUDA_ALLOCATOR") != std::string::npos);
    CHECK(msg.find(std::to_string(40 * MiB)) != std::string::npos);  // what live tensors hold
  }
  CHECK(f.alloc.stats().allocated == 40 * MiB);  // the failure changed nothing
  CHECK_THROWS_AS(f.alloc.allocate(~size_t{0}), OutOfMemoryError);
  f.alloc.deallocate(a, 40 * MiB);
}

TEST_CASE("direct allocator: a failed device wait keeps the block and a failed free forgets it, both with a warning",
          "[core][allocator]") {
  Fixture f;
  std::vector<std::string> warnings;
  auto previous = set_warning_handler([&](const std::string& m) { warnings.push_back(m); });
  void* a = f.alloc.allocate(4096);
  SECTION("the wait fails: the block is not freed (a kernel may still use it) and stays reserved") {
    f.st->fail_sync = true;
    f.alloc.deallocate(a, 4096);
    CHECK(f.st->blocks.count(a) == 1);
    CHECK(f.alloc.stats().allocated == 0);
    CHECK(f.alloc.stats().reserved == 4096);
  }
  SECTION("the free fails: it is not tried again, and the block no longer counts as reserved") {
    f.st->fail_free = true;
    f.alloc.deallocate(a, 4096);
    f.alloc.deallocate(a, 4096);
    CHECK(std::count(f.st->log.begin(), f.st->log.end(), "free 4096") == 1);
    CHECK(f.alloc.stats().reserved == 0);
  }
  set_warning_handler(previous);
  REQUIRE(warnings.size() == 1);
  CHECK(warnings[0].find("4096 bytes") != std::string::npos);
  CHECK(f.alloc.live_block_count() == 0);
}

TEST_CASE("direct allocator: record_stream accepts any address inside a live block and rejects others",
          "[core][allocator]") {
  Fixture f;
  auto* a = static_cast<char*>(f.alloc.allocate(100));
  const StreamHandle side = reinterpret_cast<StreamHandle>(uintptr_t{2});
  f.alloc.record_stream(a, side);
  f.alloc.record_stream(a + 99, side);
  CHECK(f.st->log == std::vector<std::string>{"malloc 100"});  // nothing to record: frees wait for the device
  CHECK_THROWS_AS(f.alloc.record_stream(a + 100, side), ValueError);  // one past the end
  f.alloc.deallocate(a, 100);
  CHECK_THROWS_AS(f.alloc.record_stream(a, side), ValueError);  // freed
}
