#pragma once
// Host synchronisations with CUDA devices, counted and optionally refused: PyTorch's
// torch.cuda.set_sync_debug_mode("warn" | "error") with a counter beside it. A training step
// should never make the host wait for the device (docs/gpu.md, "The host never waits"): every
// wait lets the GPU run dry while the host queues the next kernels. Every place where precis
// blocks the host on a device goes through one function (detail::note_host_sync), in the real
// CUDA backend and in the tests' fake device alike:
//   - a device-to-host copy that waits: Tensor::item(), to_vector(), to(Device::cpu()) without
//     non_blocking into pinned memory, printing a device tensor, saving one;
//   - a host-to-device copy from pageable (not pinned) memory, which waits until the device has
//     read the host block;
//   - precis::cuda::synchronize, a stream or event synchronisation;
//   - the allocators' waits and frees (cudaFree synchronises the device).
// In a build without CUDA, or while no CUDA tensor is touched, the count stays 0.
#include <cstdint>

namespace precis::cuda {

/// What a host synchronisation with a CUDA device does besides being counted
/// (torch.cuda.set_sync_debug_mode's "default", "warn" and "error").
enum class SyncDebugMode {
  off,   ///< nothing (the default)
  warn,  ///< a precis warning (core/warning.h) naming the site, once per site and process
  error  ///< a HostSyncError naming the site and how to avoid it, thrown before the host waits
};

/// Sets the mode for the whole process and returns the previous one. A synchronisation that
/// cannot throw (an allocator giving memory back inside a tensor's destructor) warns in `error`
/// mode instead.
SyncDebugMode set_sync_debug_mode(SyncDebugMode mode);
/// The mode in force.
SyncDebugMode sync_debug_mode();

/// Host synchronisations with a CUDA device since the start of the process or the last
/// reset_host_sync_count(), over every thread. Counted in every mode, `off` included.
int64_t host_sync_count();
/// Sets the count to 0.
void reset_host_sync_count();

/// Counts the host synchronisations made on the calling thread from construction on: for tests
/// and profiling of one region ("how many times did this step wait for the GPU?").
class HostSyncCounter {
 public:
  HostSyncCounter();
  /// Synchronisations on this thread since construction.
  int64_t count() const;

 private:
  int64_t start_;
};

}  // namespace precis::cuda

namespace precis::detail {

/// Called by a backend just before the host waits for a device; `what` names the site and is
/// kept for the process's lifetime (a string literal). Counts it and, by the mode, warns or throws
/// HostSyncError (when may_throw) naming `what` and the current HostReadLabel.
void note_host_sync(const char* what, bool may_throw = true);

/// While alive, names the public call on this thread whose device read a synchronisation serves
/// ("Tensor::item()"), so that the warning or error names what the user wrote. Nested labels keep
/// the outermost.
class HostReadLabel {
 public:
  explicit HostReadLabel(const char* label);
  ~HostReadLabel();
  HostReadLabel(const HostReadLabel&) = delete;
  HostReadLabel& operator=(const HostReadLabel&) = delete;

 private:
  const char* previous_;
};

}  // namespace precis::detail
