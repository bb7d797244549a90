// CUDA out-of-memory is an OutOfMemoryError naming the request and the device (issue 13; it was a
// DeviceError, indistinguishable from "no such device").
#include <cstdint>
#include <string>

#include "core/allocator.h"
#include "tensor/factory.h"
#include "tests/support/tensor_testing.h"

using namespace precis;

TEST_CASE("a CUDA allocation beyond the device raises OutOfMemoryError naming bytes and device", "[cuda]") {
  PRECIS_REQUIRE_CUDA();
  // 4 TiB: more than any GPU has, so cudaMalloc fails even after the cache is released.
  const int64_t n = int64_t{1} << 40;
  try {
    (void)empty({n}, {.dtype = DType::f32, .device = Device::cuda(0)});
    FAIL("no exception");
  } catch (const OutOfMemoryError& e) {
    CHECK(e.requested_bytes() == static_cast<uint64_t>(n) * 4);
    CHECK(e.device() == "cuda:0");
    CHECK(std::string(e.what()).find("cuda:0") != std::string::npos);
  }
  // More bytes than a 64-bit offset addresses: refused by the factory before the allocator.
  REQUIRE_THROWS_AS(empty({int64_t{1} << 62}, {.device = Device::cuda(0)}), OutOfMemoryError);
  // The device still works afterwards.
  REQUIRE(ones({3}, {.device = Device::cuda(0)}).cpu().to_vector<float>() == std::vector<float>{1, 1, 1});
  // And the allocator itself reports the same type.
  REQUIRE_THROWS_AS(allocator_for(Device::cuda(0)).allocate(size_t{1} << 62), OutOfMemoryError);
}
