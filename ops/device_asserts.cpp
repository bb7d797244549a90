#include "ops/device_asserts.h"

#include <deque>
#include <limits>
#include <mutex>
#include <utility>

#include "core/error.h"
#include "core/grad_mode.h"
#include "ops/functional.h"
#include "tensor/factory.h"

namespace precis {

namespace {

// One device's recorded state: `flags` (2) i64 on the device holds (code, value): code 0 when no
// check failed, else the id of the first failing check; value its offending index.
struct DeviceErrors {
  Tensor flags;
  uint64_t generation = 0;  // checks recorded so far (a probe disarms only if none came since)
  bool pending = false;     // a check was recorded since the last report
};

constexpr size_t kKeptMessages = 1024;  // message builders kept for the most recent checks

std::mutex g_mutex;
DeviceErrors g_devices[64];  // allocator_for's device index range
int64_t g_next_id = 1;
std::deque<std::pair<int64_t, std::function<std::string(int64_t)>>> g_messages;

std::string message_of(int64_t id, int64_t value) {
  for (const auto& [i, m] : g_messages)
    if (i == id) return m(value);
  return detail::str_cat("index ", value, " was out of range in an index check of an op that ran more than ",
                         kKeptMessages, " checks before this report (its message is no longer kept)");
}

// Throws the error in a host copy of (code, value) and clears the device state.
void report_host_flags(Device device, const Tensor& host) {
  const auto* p = static_cast<const int64_t*>(host.data_ptr());
  const int64_t code = p[0], value = p[1];
  if (code == 0) return;
  std::string msg;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    msg = message_of(code, value);
    DeviceErrors& d = g_devices[device.index];
    NoGradGuard no_grad;
    d.flags.zero_();
    d.pending = false;
  }
  throw IndexError(msg + " (found on " + device.str() + " by a device-side check, reported at this host read)");
}

}  // namespace

namespace detail {

void check_index_range(const Tensor& index, int64_t size, std::optional<int64_t> ignore,
                       std::function<std::string(int64_t)> message) {
  if (index.numel() == 0) return;
  NoGradGuard no_grad;
  const Tensor idx = index.detach().to(DType::i64);
  const Device device = idx.device();
  if (device.is_cpu()) {
    // Reading is free here: one pass over the values, throwing at the first offending one.
    for (int64_t x : idx.contiguous().to_vector<int64_t>())
      if (!(x >= 0 && x < size) && !(ignore && x == *ignore)) throw IndexError(message(x));
    return;
  }
  Tensor bad_i = maximum(lt(idx, 0).to(DType::i64), ge(idx, size).to(DType::i64));
  if (ignore) bad_i = mul(bad_i, ne(idx, *ignore).to(DType::i64));
  const Tensor bad = bad_i.to(DType::boolean);
  // On the device: (any bad, the largest offending value) folded into the device's state, the
  // first failing check winning. No read.
  const Tensor any = max(bad_i).reshape({1});
  const Tensor value = max(where(bad, idx, std::numeric_limits<int64_t>::min())).reshape({1});
  std::lock_guard<std::mutex> lock(g_mutex);
  const int64_t id = g_next_id++;
  g_messages.emplace_back(id, std::move(message));
  if (g_messages.size() > kKeptMessages) g_messages.pop_front();
  DeviceErrors& d = g_devices[device.index];
  if (!d.flags.defined()) d.flags = zeros({2}, {.dtype = DType::i64, .device = device});
  const Tensor fresh = mul(eq(d.flags.narrow(0, 0, 1), 0).to(DType::i64), any).to(DType::boolean);
  const Tensor mine = cat({full({1}, static_cast<double>(id), {.dtype = DType::i64, .device = device}), value});
  d.flags = where(fresh, mine, d.flags);
  d.pending = true;
  ++d.generation;
}

DeviceAssertProbe::DeviceAssertProbe(Device device) : device_(device) {
  if (!device.is_cuda()) return;
  std::lock_guard<std::mutex> lock(g_mutex);
  const DeviceErrors& d = g_devices[device.index];
  if (!d.pending) return;
  generation_ = d.generation;
  NoGradGuard no_grad;
  host_ = d.flags.to(Device::cpu(), /*non_blocking=*/true);  // pinned: queued, no wait
}

void DeviceAssertProbe::report() {
  if (!host_.defined()) return;
  report_host_flags(device_, host_);
  std::lock_guard<std::mutex> lock(g_mutex);
  DeviceErrors& d = g_devices[device_.index];
  if (d.generation == generation_) d.pending = false;  // nothing failed, and no check came since
}

}  // namespace detail

void check_device_asserts(Device device) {
  if (!device.is_cuda()) return;
  Tensor flags;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    const DeviceErrors& d = g_devices[device.index];
    if (!d.pending) return;
    flags = d.flags;
  }
  NoGradGuard no_grad;
  const Tensor host = flags.to(Device::cpu());  // a blocking copy: it reports through the probe
  report_host_flags(device, host);
}

}  // namespace precis
