#pragma once
// The profiler's device clock (ops/profiler.h): marks recorded in a device's queue, and the time
// the device took between two of them once it has passed both.
//
// Why a seam: work on an accelerator runs asynchronously, so a host clock around a kernel call
// times its launch, and whatever waits for the device absorbs the queue's time. The profiler
// lives in ops/ and must not call a device runtime; a backend that runs asynchronously registers
// a timer for its device type at start-up (the CUDA backend: ops/cuda/device_timer.cpp, from
// register_cuda_backend()), and tests register fakes.
#include <cstdint>

#include "core/device.h"

namespace precis::profiler {

/// A device type's clock. Implementations are thread-safe: scopes on any thread record marks.
/// Only the profiler calls record/done/elapsed_ms/release, and never waits for a device except
/// in elapsed_ms.
class DeviceTimer {
 public:
  /// An opaque handle of one recorded mark (the implementation's; e.g. a pooled event).
  using Mark = uint64_t;

  virtual ~DeviceTimer() = default;
  /// The calling thread's current device of this type (a scope whose operands name no device).
  virtual int current_index() = 0;
  /// Records a mark after the work queued so far on device `index`'s current stream, without
  /// waiting. Throws (a DeviceError) when the device cannot record one.
  virtual Mark record(int index) = 0;
  /// Whether the device has passed `mark`, without waiting; true when it cannot tell (an error),
  /// so that nobody waits on a mark that will never complete.
  virtual bool done(Mark mark) noexcept = 0;
  /// Milliseconds the device took from `start` to `stop` (two marks of one device, `stop`
  /// recorded after `start`), waiting for `stop` when it has not passed it yet; negative when the
  /// device cannot tell (an error).
  virtual double elapsed_ms(Mark start, Mark stop) noexcept = 0;
  /// Hands a mark back for reuse (whether or not the device passed it).
  virtual void release(Mark mark) noexcept = 0;
};

/// Makes `timer` the clock of scopes that run work on devices of `type` (nullptr: none, so those
/// scopes take the wall clock) and returns the previous one. The timer must outlive its
/// registration and the marks the profiler holds from it (until entries(), report(),
/// set_enabled(false) or reset() has run); the CPU has none (its work is synchronous).
DeviceTimer* set_device_timer(DeviceType type, DeviceTimer* timer);
/// The registered clock of `type`, or nullptr.
DeviceTimer* device_timer(DeviceType type);

}  // namespace precis::profiler
