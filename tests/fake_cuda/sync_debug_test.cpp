// The host synchronisation counter and debug mode (core/sync_debug.h) on the fake CUDA device:
// each kind of wait counts once, what does not wait counts nothing, and the modes warn or throw.
#include <string>
#include <vector>

#include "core/synchronize.h"
#include "core/warning.h"
#include "precis.h"
#include "tests/fake_cuda/fake_device.h"

using namespace precis;
using precis::fake_cuda_testing::require_fake_device;
using precis::fake_cuda_testing::SyncModeGuard;

namespace {
const Device kDev = Device::cuda(0);
}

TEST_CASE("host syncs: item, a pageable upload, a blocking download and synchronize count one each") {
  require_fake_device();
  const Tensor d = full({3}, 2.0, {.device = kDev});
  cuda::HostSyncCounter c;
  CHECK(sum(d).item<double>() == 6.0);
  CHECK(c.count() == 1);
  const Tensor up = from_vector<float>({1, 2, 3}).to(kDev);  // pageable host memory: the copy waits
  CHECK(c.count() == 2);
  const Tensor down = up.to(Device::cpu());
  CHECK(c.count() == 3);
  CHECK(down.to_vector<float>() == std::vector<float>{1, 2, 3});  // a CPU tensor: no device read
  CHECK(c.count() == 3);
  cuda::synchronize(0);
  CHECK(c.count() == 4);
  const int64_t before = cuda::host_sync_count();
  cuda::synchronize();  // every visible device
  CHECK(cuda::host_sync_count() - before == cuda_device_count());
}

TEST_CASE("host syncs: pinned non-blocking copies, device ops and a device-to-device copy count none") {
  require_fake_device();
  const Tensor pinned = from_vector<float>({1, 2, 3, 4}).pin_memory();
  cuda::HostSyncCounter c;
  const Tensor d = pinned.to(kDev, /*non_blocking=*/true);
  const Tensor r = relu(d * 2.0 - 3.0);
  const Tensor back = r.to(Device::cpu(), /*non_blocking=*/true);
  if (cuda_device_count() > 1) (void)r.to(Device::cuda(1));
  CHECK(c.count() == 0);
  CHECK(back.is_pinned());
  cuda::synchronize(0);  // the documented way to read a non-blocking download: one wait
  CHECK(c.count() == 1);
  CHECK(back.to_vector<float>() == std::vector<float>{0, 1, 3, 5});
}

TEST_CASE("host syncs: reset_host_sync_count starts the process count again") {
  require_fake_device();
  (void)full({}, 1.0, {.device = kDev}).item<float>();
  CHECK(cuda::host_sync_count() > 0);
  cuda::reset_host_sync_count();
  CHECK(cuda::host_sync_count() == 0);
}

TEST_CASE("sync debug mode error: item() throws HostSyncError naming it, before the host waits") {
  require_fake_device();
  const Tensor d = full({}, 1.5, {.device = kDev});
  SyncModeGuard mode(cuda::SyncDebugMode::error);
  try {
    (void)d.item<float>();
    FAIL("item() on a CUDA tensor did not throw in error mode");
  } catch (const HostSyncError& e) {
    const std::string m = e.what();
    CHECK(m.find("Tensor::item()") != std::string::npos);
    CHECK(m.find("device-to-host copy") != std::string::npos);
    CHECK(m.find("read it where the host reads anyway") != std::string::npos);
  }
  CHECK_THROWS_AS(cuda::synchronize(0), HostSyncError);
  CHECK(full({}, 1.0).item<float>() == 1.0f);  // a CPU tensor: nothing to wait for
}

TEST_CASE("sync debug mode warn: one warning per site, every sync still counted") {
  require_fake_device();
  std::vector<std::string> seen;
  WarningHandler old = set_warning_handler([&](const std::string& m) { seen.push_back(m); });
  {
    SyncModeGuard mode(cuda::SyncDebugMode::warn);
    const Tensor d = full({}, 1.0, {.device = kDev});
    cuda::HostSyncCounter c;
    for (int i = 0; i < 3; ++i) (void)d.item<float>();
    (void)d.to_vector<float>();
    CHECK(c.count() == 4);
  }
  set_warning_handler(old);
  REQUIRE(seen.size() == 2);  // item() and to_vector(): two sites
  CHECK(seen[0].find("Tensor::item()") != std::string::npos);
  CHECK(seen[1].find("Tensor::to_vector()") != std::string::npos);
}
