// PRECIS_CUDA_ALLOCATOR's parsing (core/cuda_allocator_mode.h): which values select which CUDA
// allocator, and the error for anything else. Host code, so it runs without a GPU; that the
// registered allocator follows the mode is tests/cuda/cuda_direct_allocator_test.cpp.
#include <catch2/catch.hpp>

#include "core/cuda_allocator_mode.h"
#include "core/error.h"
#include "tests/support/tensor_testing.h"

using namespace precis;

TEST_CASE("PRECIS_CUDA_ALLOCATOR: unset, empty and \"caching\" select the caching allocator, \"direct\" the direct one",
          "[core][allocator]") {
  CHECK(parse_cuda_allocator_mode(nullptr) == CudaAllocatorMode::caching);
  CHECK(parse_cuda_allocator_mode("") == CudaAllocatorMode::caching);
  CHECK(parse_cuda_allocator_mode("caching") == CudaAllocatorMode::caching);
  CHECK(parse_cuda_allocator_mode("direct") == CudaAllocatorMode::direct);
  CHECK(std::string(to_string(CudaAllocatorMode::caching)) == "caching");
  CHECK(std::string(to_string(CudaAllocatorMode::direct)) == "direct");
}

TEST_CASE("PRECIS_CUDA_ALLOCATOR: any other value is a ValueError naming the variable and the accepted values",
          "[core][allocator]") {
  // Exact spelling: a near miss must not quietly select the caching allocator (a memcheck run
  // would then see nothing and pass).
  for (const char* bad : {"Direct", "DIRECT", "direct ", " caching", "cudaMalloc", "1", "none"}) {
    INFO("value: \"" << bad << "\"");
    PRECIS_REQUIRE_THROWS_WITH_ALL(parse_cuda_allocator_mode(bad), ValueError, "PRECIS_CUDA_ALLOCATOR", bad,
                                   "\"caching\"", "\"direct\"");
  }
}
