#pragma once
// Index checks that do not make the host wait for a GPU (PyTorch's device-side asserts, without
// their poisoned context). embedding, the class-index losses and the index ops validate their
// indices with ordinary ops on the indices' device. On the CPU the result is read at once and an
// out-of-range index throws IndexError from the op, as always. On a CUDA device reading it would
// wait for every kernel queued before it, so the result is kept on the device (one error code
// and the offending value per device, the first failing check winning) and read where the host
// reads that device anyway: every blocking device-to-host copy (Tensor::item, to_vector, printing,
// to(Device::cpu())) reports a recorded error as IndexError after its copy, naming the op, the
// value and the operands as the immediate error would; check_device_asserts() reports on demand.
// Until then the op's kernel has run on the bad index as its kernels document (a NaN loss row,
// say); nothing is written out of bounds by the checked ops.
#include <functional>
#include <optional>
#include <string>

#include "core/device.h"
#include "tensor/tensor.h"

namespace precis {

/// Reports (throws IndexError) the first out-of-range index that a device-side check recorded on
/// `device` since the last report, and clears it; does nothing on the CPU, where the ops throw
/// immediately. Reads the device: the host waits for the work queued on it (core/sync_debug.h
/// counts one synchronisation when a check is pending, none otherwise).
void check_device_asserts(Device device);

namespace detail {

/// Checks that every element of `index` (i64 or i32, any shape) lies in [0, size) or equals
/// `ignore`. `message(v)` builds the IndexError's text for the first offending value v. CPU:
/// throws now. CUDA device: records the check on the device without reading it (see the file
/// comment for where it is reported).
void check_index_range(const Tensor& index, int64_t size, std::optional<int64_t> ignore,
                       std::function<std::string(int64_t)> message);

/// For the blocking device-to-host copy in Tensor::copy_: before the copy, queues a copy of
/// `device`'s pending error state into pinned memory (no wait); report() after the copy, which has
/// waited for it, throws a recorded error. Does nothing when no check is pending.
class DeviceAssertProbe {
 public:
  explicit DeviceAssertProbe(Device device);
  void report();

 private:
  Device device_;
  Tensor host_;  // the pinned copy of the device's (code, value); undefined when nothing is pending
  uint64_t generation_ = 0;
};

}  // namespace detail
}  // namespace precis
