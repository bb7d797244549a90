// cuda::set_device (core/synchronize.h) on the fake device, which has two: the index checks. What
// the call does on a GPU (the thread's current device, pinned memory's context) needs one.
#include "core/synchronize.h"
#include "precis.h"
#include "tests/fake_cuda/fake_device.h"
#include "tests/support/tensor_testing.h"

using namespace precis;
using precis::fake_cuda_testing::require_fake_device;

TEST_CASE("cuda::set_device takes a visible device and refuses another, naming it") {
  require_fake_device();
  CHECK_NOTHROW(cuda::set_device(1));
  CHECK_NOTHROW(cuda::set_device(0));
  PRECIS_REQUIRE_THROWS_WITH_ALL(cuda::set_device(2), DeviceError, "cuda::set_device", "cuda:2",
                                 "not a visible device", "2 visible");
  PRECIS_REQUIRE_THROWS_WITH_ALL(cuda::set_device(-1), DeviceError, "cuda:-1");
}
