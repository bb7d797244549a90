#include "core/sync_debug.h"

#include <atomic>
#include <string>

#include "core/cuda_graph.h"
#include "core/error.h"
#include "core/warning.h"

namespace precis {

namespace {

std::atomic<int64_t> g_count{0};
std::atomic<cuda::SyncDebugMode> g_mode{cuda::SyncDebugMode::off};
thread_local int64_t t_count = 0;
thread_local const char* t_label = nullptr;

std::string describe(const char* what) {
  std::string s = what;
  if (t_label != nullptr) s += std::string(" (for ") + t_label + ")";
  return s;
}

}  // namespace

namespace cuda {

SyncDebugMode set_sync_debug_mode(SyncDebugMode mode) { return g_mode.exchange(mode); }
SyncDebugMode sync_debug_mode() { return g_mode.load(std::memory_order_relaxed); }
int64_t host_sync_count() { return g_count.load(std::memory_order_relaxed); }
void reset_host_sync_count() { g_count.store(0, std::memory_order_relaxed); }

HostSyncCounter::HostSyncCounter() : start_(t_count) {}
int64_t HostSyncCounter::count() const { return t_count - start_; }

}  // namespace cuda

namespace detail {

void note_host_sync(const char* what, bool may_throw) {
  // A host wait inside a CUDA graph capture would break the capture (the runtime refuses it and
  // invalidates the graph): refuse it before it is issued, naming it.
  if (may_throw && cuda::is_capturing())
    throw GraphCaptureError(str_cat(
        "cuda::Graph: ", describe(what), " while capturing a CUDA graph: a graph holds device work only, and the "
        "host cannot wait for work that is being recorded, not run. Keep the value on the device, or do this "
        "outside the captured region (before capture_begin, or after replay)"));
  g_count.fetch_add(1, std::memory_order_relaxed);
  ++t_count;
  const cuda::SyncDebugMode mode = g_mode.load(std::memory_order_relaxed);
  if (mode == cuda::SyncDebugMode::off) return;
  if (!may_throw) {
    // Callers that must not throw (destructors, noexcept device calls) still get the warning.
    try {
      warn(str_cat("host synchronisation with a CUDA device: ", describe(what), " (cuda::set_sync_debug_mode)"));
    } catch (...) {  // a warning handler's failure must not end the process
    }
    return;
  }
  if (mode == cuda::SyncDebugMode::error)
    throw HostSyncError(str_cat(
        "the host would wait for a CUDA device: ", describe(what),
        ", while cuda::set_sync_debug_mode(SyncDebugMode::error) is on. Keep the value on the device (a 0-d tensor "
        "that later ops use), read it where the host reads anyway (a log point), or copy it with "
        "to(Device::cpu(), true) into pinned memory and read it after cuda::synchronize; set the mode to warn or "
        "off around a read that is meant"));
  // warn() reports each distinct message once: once per site and label.
  warn(str_cat("host synchronisation with a CUDA device: ", describe(what),
               " (cuda::set_sync_debug_mode(SyncDebugMode::warn); set it to off to silence)"));
}

// The outermost label wins: it is the call the user wrote (printing reads through to_vector).
HostReadLabel::HostReadLabel(const char* label) : previous_(t_label) {
  if (t_label == nullptr) t_label = label;
}
HostReadLabel::~HostReadLabel() { t_label = previous_; }

}  // namespace detail
}  // namespace precis
