#include "ops/device_timer.h"

#include <atomic>

namespace precis::profiler {

namespace {
// Read by every outermost scope on a device while the profiler records; written at start-up.
std::atomic<DeviceTimer*> g_timers[kNumDeviceTypes] = {};
}  // namespace

DeviceTimer* set_device_timer(DeviceType type, DeviceTimer* timer) {
  return g_timers[static_cast<int>(type)].exchange(timer);
}

DeviceTimer* device_timer(DeviceType type) { return g_timers[static_cast<int>(type)].load(); }

}  // namespace precis::profiler
