#include <catch2/catch.hpp>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <thread>
#include <vector>

#include "core/allocator.h"
#include "core/error.h"
#include "tests/support/tensor_testing.h"

using namespace precis;

// The CPU allocator is process-wide, so these tests reason about differences of its stats and
// start from an empty cache.

TEST_CASE("cpu allocator: alignment, zero size, writable blocks", "[core][allocator]") {
  Allocator& a = cpu_allocator();
  REQUIRE(a.device() == Device::cpu());
  REQUIRE(a.allocate(0) == nullptr);
  a.deallocate(nullptr, 0);
  for (size_t n : {size_t{1}, size_t{63}, size_t{64}, size_t{513}, size_t{70000}, size_t{3} << 20}) {
    void* p = a.allocate(n);
    REQUIRE(p != nullptr);
    REQUIRE(reinterpret_cast<uintptr_t>(p) % 64 == 0);
    std::memset(p, 0xab, n);
    a.deallocate(p, n);
  }
  // Large blocks start on a 2 MiB boundary so transparent huge pages can back them.
  void* big = a.allocate(size_t{5} << 20);
  REQUIRE(reinterpret_cast<uintptr_t>(big) % (size_t{2} << 20) == 0);
  a.deallocate(big, size_t{5} << 20);
}

TEST_CASE("cpu allocator: freed blocks are reused and counted as cache hits", "[core][allocator]") {
  Allocator& a = cpu_allocator();
  a.empty_cache();
  const AllocatorStats s0 = a.stats();
  for (size_t n : {size_t{100}, size_t{100000}, size_t{5} << 20}) {
    void* p = a.allocate(n);
    a.deallocate(p, n);
    const AllocatorStats s1 = a.stats();
    void* q = a.allocate(n - 1);  // same size class
    const AllocatorStats s2 = a.stats();
    REQUIRE(q == p);
    REQUIRE(s2.num_allocs == s1.num_allocs + 1);
    REQUIRE(s2.num_cache_hits == s1.num_cache_hits + 1);
    REQUIRE(s2.reserved == s1.reserved);
    a.deallocate(q, n - 1);
  }
  const AllocatorStats s3 = a.stats();
  REQUIRE(s3.allocated == s0.allocated);
  REQUIRE(s3.reserved > s0.reserved);
  a.empty_cache();
  REQUIRE(a.stats().reserved == s0.reserved);
}

TEST_CASE("cpu allocator: allocated, reserved and peak stats", "[core][allocator]") {
  Allocator& a = cpu_allocator();
  a.empty_cache();
  a.reset_peak_stats();
  const AllocatorStats s0 = a.stats();
  REQUIRE(s0.peak_allocated == s0.allocated);

  void* p = a.allocate(1000);  // class: 1024 B
  void* q = a.allocate(3000);  // class: 3072 B
  AllocatorStats s = a.stats();
  REQUIRE(s.allocated == s0.allocated + 1024 + 3072);
  REQUIRE(s.reserved == s0.reserved + 1024 + 3072);
  REQUIRE(s.peak_allocated == s.allocated);
  a.deallocate(q, 3000);
  s = a.stats();
  REQUIRE(s.allocated == s0.allocated + 1024);
  REQUIRE(s.reserved == s0.reserved + 1024 + 3072);  // cached, still held
  REQUIRE(s.peak_allocated == s0.allocated + 1024 + 3072);
  a.reset_peak_stats();
  REQUIRE(a.stats().peak_allocated == s0.allocated + 1024);

  // Large requests round to quarter-power-of-two steps: 600 KiB lies in (512 KiB, 1 MiB], step
  // 128 KiB, so it takes a 640 KiB block.
  void* r = a.allocate(600 << 10);
  REQUIRE(a.stats().allocated == s0.allocated + 1024 + (640 << 10));
  a.deallocate(r, 600 << 10);
  a.deallocate(p, 1000);
  a.empty_cache();
  s = a.stats();
  REQUIRE(s.allocated == s0.allocated);
  REQUIRE(s.reserved == s0.reserved);
}

TEST_CASE("cpu allocator: impossible sizes throw precis::Error naming the size", "[core][allocator]") {
  Allocator& a = cpu_allocator();
  const size_t huge = size_t{1} << 62;
  REQUIRE_THROWS_AS(a.allocate(huge), Error);
  REQUIRE_THROWS_WITH(a.allocate(huge), Catch::Contains(std::to_string(huge)));
  REQUIRE_THROWS_AS(a.allocate(SIZE_MAX - 10), Error);
}

TEST_CASE("cpu allocator: concurrent allocate/deallocate", "[core][allocator]") {
  Allocator& a = cpu_allocator();
  const AllocatorStats s0 = a.stats();
  std::atomic<int> corrupted{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&a, &corrupted, t] {
      std::vector<std::pair<void*, size_t>> live;
      for (int i = 0; i < 2000; ++i) {
        const size_t n = 64 + static_cast<size_t>((i * 7919 + t * 31) % 20000);
        auto* p = static_cast<unsigned char*>(a.allocate(n));
        p[0] = static_cast<unsigned char>(t);
        p[n - 1] = static_cast<unsigned char>(t);
        live.emplace_back(p, n);
        if (live.size() > 8) {
          auto [q, m] = live.front();
          auto* b = static_cast<unsigned char*>(q);
          if (b[0] != t || b[m - 1] != t) ++corrupted;  // a block handed to two threads
          a.deallocate(q, m);
          live.erase(live.begin());
        }
      }
      for (auto [q, m] : live) a.deallocate(q, m);
    });
  }
  for (auto& th : threads) th.join();
  REQUIRE(corrupted == 0);
  const AllocatorStats s1 = a.stats();
  REQUIRE(s1.allocated == s0.allocated);
  REQUIRE(s1.num_allocs == s0.num_allocs + 4 * 2000);
  REQUIRE(s1.num_cache_hits > s0.num_cache_hits);
  a.empty_cache();
}

// [cuda]: with a GPU present (and CUDA built) cuda:0's allocator is the device's caching allocator.
TEST_CASE("allocator_for: cpu always, cuda only when registered", "[core][allocator][cuda]") {
  [[maybe_unused]] const bool gpu = PRECIS_CUDA_PART("an allocation from cuda:0's allocator");
  REQUIRE(&allocator_for(Device::cpu()) == &cpu_allocator());
  // A registered allocator is found.
  register_allocator(DeviceType::cuda, 7, &cpu_allocator());
  REQUIRE(&allocator_for(Device::cuda(7)) == &cpu_allocator());
#ifndef PRECIS_HAS_CUDA
  REQUIRE_THROWS_AS(allocator_for(Device::cuda(0)), DeviceError);
  PRECIS_REQUIRE_THROWS_WITH_ALL(allocator_for(Device::cuda(1)), DeviceError, "cuda:1 is not available",
                                 "built without CUDA", "PRECIS_CUDA=ON", "Device::cpu()");
  // Unregistering (nullptr) makes the device absent again.
  register_allocator(DeviceType::cuda, 7, nullptr);
  REQUIRE_THROWS_AS(allocator_for(Device::cuda(7)), DeviceError);
#else
  register_allocator(DeviceType::cuda, 7, nullptr);
  // With CUDA, core registers the CUDA allocators itself on the first request, without the kernel
  // layer's init: a visible device gets the caching allocator, an absent one an allocator whose
  // allocate() explains why.
  Allocator& a = allocator_for(Device::cuda(0));
  REQUIRE(a.device() == Device::cuda(0));
  if (!gpu) {
    REQUIRE_THROWS_AS(a.allocate(16), DeviceError);
  } else {
    void* p = a.allocate(16);
    REQUIRE(p != nullptr);
    a.deallocate(p, 16);
  }
#endif
  REQUIRE_THROWS_AS(allocator_for(Device::cuda(1000)), DeviceError);
  REQUIRE_THROWS_AS(register_allocator(DeviceType::cuda, -1, nullptr), ValueError);
}
