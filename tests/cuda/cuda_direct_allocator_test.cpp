// PRECIS_CUDA_ALLOCATOR=direct (core/cuda_allocator_mode.h, core/direct_device_allocator.h): one
// cudaMalloc of exactly the requested bytes per tensor, so compute-sanitizer memcheck sees what the
// caching allocator's segments hide. A direct allocator is made here whatever the variable says
// (cuda::make_direct_allocator), and the registered allocator is checked against the mode; the
// ctest entries of tests/CMakeLists.txt run the mode checks again with the variable set.
#include <cstdlib>
#include <memory>
#include <string>

#include "core/allocator.h"
#include "core/cuda_allocator_mode.h"
#include "core/device.h"
#include "tensor/factory.h"
#include "tests/support/tensor_testing.h"

#ifdef PRECIS_HAS_CUDA
#include "core/cuda/cuda_allocator.h"
#include "core/cuda/cuda_context.h"
#include "core/direct_device_allocator.h"
#endif

using namespace precis;

#ifdef PRECIS_HAS_CUDA

TEST_CASE("a direct CUDA allocator counts exact sizes and gives freed memory back to the device", "[cuda][allocator]") {
  PRECIS_REQUIRE_CUDA();
  std::unique_ptr<DirectDeviceAllocator> a = cuda::make_direct_allocator(0);
  REQUIRE(a->device() == Device::cuda(0));

  // Exact sizes: no rounding to 512 B, nothing cached.
  void* small = a->allocate(1001);
  REQUIRE(small != nullptr);
  AllocatorStats s = a->stats();
  CHECK(s.allocated == 1001);
  CHECK(s.reserved == 1001);
  CHECK(s.num_allocs == 1);
  CHECK(s.num_cache_hits == 0);
  a->record_stream(static_cast<char*>(small) + 1000, cuda::copy_stream(0));  // live: accepted
  CHECK_THROWS_AS(a->record_stream(static_cast<char*>(small) + 1001, cuda::copy_stream(0)), ValueError);

  // 256 MiB: far above cudaMemGetInfo's granularity, so the drop and the return are unambiguous.
  const size_t big = size_t{256} << 20;
  const size_t free_before = cuda::device_memory_info(0).free;
  void* p = a->allocate(big);
  const size_t free_held = cuda::device_memory_info(0).free;
  INFO("free before " << free_before << ", while held " << free_held);
  CHECK(free_before - free_held >= big);
  s = a->stats();
  CHECK(s.allocated == 1001 + big);
  CHECK(s.reserved == s.allocated);
  CHECK(s.peak_allocated == s.allocated);

  a->deallocate(p, big);
  const size_t free_after = cuda::device_memory_info(0).free;
  INFO("free after the free " << free_after);
  CHECK(free_after - free_held >= big);  // really returned, not cached
  s = a->stats();
  CHECK(s.allocated == 1001);
  CHECK(s.reserved == 1001);
  CHECK(s.peak_allocated == 1001 + big);
  a->reset_peak_stats();
  CHECK(a->stats().peak_allocated == 1001);
  a->empty_cache();  // nothing to give back
  CHECK(a->stats().reserved == 1001);

  a->deallocate(small, 1001);
  CHECK(a->stats().allocated == 0);
  CHECK(a->stats().reserved == 0);
  CHECK(a->live_block_count() == 0);
  CHECK_THROWS_AS(a->record_stream(small, cuda::copy_stream(0)), ValueError);  // freed
}

TEST_CASE("CUDA tensors come from the allocator PRECIS_CUDA_ALLOCATOR selects", "[cuda][allocator]") {
  PRECIS_REQUIRE_CUDA();
  const CudaAllocatorMode mode = cuda_allocator_mode();
  INFO("PRECIS_CUDA_ALLOCATOR mode: " << to_string(mode));
  Allocator& a = allocator_for(Device::cuda(0));
  CHECK((dynamic_cast<DirectDeviceAllocator*>(&a) != nullptr) == (mode == CudaAllocatorMode::direct));
  const size_t before = a.stats().allocated;
  Tensor t = empty({250}, {.dtype = DType::f32, .device = Device::cuda(0)});  // 1000 bytes
  // The direct allocator counts the bytes asked for; the caching one rounds them up to 512 B.
  CHECK(a.stats().allocated - before == (mode == CudaAllocatorMode::direct ? 1000u : 1024u));
  // record_stream reaches the allocator that handed the block out, in either mode.
  cuda::record_stream(t.data_ptr(), 0, cuda::copy_stream(0));
  int not_a_tensor = 0;
  CHECK_THROWS_AS(cuda::record_stream(&not_a_tensor, 0, cuda::copy_stream(0)), ValueError);
}

#endif  // PRECIS_HAS_CUDA

// Run by ctest with PRECIS_CUDA_ALLOCATOR=bogus (tests/CMakeLists.txt), hidden otherwise: needs no
// GPU, since the variable is checked before the devices are looked at.
TEST_CASE("an invalid PRECIS_CUDA_ALLOCATOR makes every CUDA allocation throw ValueError", "[.cuda_allocator_env]") {
  const char* value = std::getenv("PRECIS_CUDA_ALLOCATOR");
  REQUIRE(value != nullptr);
  REQUIRE(std::string(value) == "bogus");
#ifdef PRECIS_HAS_CUDA
  PRECIS_REQUIRE_THROWS_WITH_ALL(empty({4}, {.device = Device::cuda(0)}), ValueError, "PRECIS_CUDA_ALLOCATOR",
                                 "bogus", "\"direct\"");
  // Not once only: nothing was registered, so a retry cannot fall back to another allocator.
  PRECIS_REQUIRE_THROWS_WITH_ALL(allocator_for(Device::cuda(0)), ValueError, "PRECIS_CUDA_ALLOCATOR");
  CHECK(zeros({4}).numel() == 4);  // the CPU is unaffected
#else
  WARN("built without CUDA: no CUDA allocator to select; skipped");
#endif
}
