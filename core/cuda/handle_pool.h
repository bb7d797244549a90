#pragma once
// Library handles (cuDNN, cuBLAS, cuBLASLt) per (thread, device). A handle is bound to a stream
// with cudnnSetStream / cublasSetStream before each call; two host threads sharing one handle
// could rebind it under each other's feet (one thread's convolution queued on the other's
// stream, or a workspace shared by two calls in flight). So every thread gets its own handle of
// each device, and when the thread exits its handles go back to the pool for the next thread
// instead of being destroyed (creating a cuDNN handle costs milliseconds and device memory; a
// data-loader or server thread that comes and goes must not pay it each time).
//
// Free of CUDA headers and calls (the creation function is the caller's), so the CPU tests check
// it (tests/core/handle_pool_test.cpp). A pool must outlive every thread that used it: the
// backend's pools are static objects that are never destroyed, so no handle is returned to a
// dead pool at exit and no library call runs after the CUDA runtime has shut down.
#include <cstddef>
#include <functional>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

namespace precis::cuda {

/// Handles of one library per (host thread, device), created by a function the caller gives and
/// recycled between threads (see the file comment).
template <typename Handle>
class HandlePool {
 public:
  /// `create(device)` makes a new handle for a device (it may throw; nothing is kept then).
  explicit HandlePool(std::function<Handle(int)> create) : create_(std::move(create)) {}
  HandlePool(const HandlePool&) = delete;
  HandlePool& operator=(const HandlePool&) = delete;

  /// The calling thread's handle of `device`: the same one for every call of this thread, taken
  /// from the pool (or created) on the thread's first call for the device.
  Handle get(int device) {
    Lease& lease = lease_of_thread();
    for (const Entry& e : lease.entries)
      if (e.pool == this && e.device == device) return e.handle;
    Handle h = take(device);
    try {
      lease.entries.push_back({this, device, h});
    } catch (...) {
      give_back(device, h);
      throw;
    }
    return h;
  }

  /// Handles created so far (for every device and thread).
  size_t created() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return created_;
  }
  /// Handles of `device` in the pool, i.e. not held by a live thread.
  size_t idle(int device) const {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = idle_.find(device);
    return it == idle_.end() ? 0 : it->second.size();
  }

 private:
  struct Entry {
    HandlePool* pool;
    int device;
    Handle handle;
  };
  // A thread's handles of every pool of this handle type; returned when the thread exits.
  struct Lease {
    std::vector<Entry> entries;
    ~Lease() {
      for (const Entry& e : entries) e.pool->give_back(e.device, e.handle);
    }
  };
  static Lease& lease_of_thread() {
    thread_local Lease lease;
    return lease;
  }

  Handle take(int device) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      std::vector<Handle>& free = idle_[device];
      if (!free.empty()) {
        Handle h = free.back();
        free.pop_back();
        return h;
      }
    }
    Handle h = create_(device);  // outside the lock: creation may be slow
    std::lock_guard<std::mutex> lock(mutex_);
    ++created_;
    return h;
  }

  void give_back(int device, Handle h) noexcept {
    try {
      std::lock_guard<std::mutex> lock(mutex_);
      idle_[device].push_back(h);
    } catch (...) {
      // Out of memory while a thread exits: the handle is leaked, never shared.
    }
  }

  std::function<Handle(int)> create_;
  mutable std::mutex mutex_;
  std::map<int, std::vector<Handle>> idle_;
  size_t created_ = 0;
};

}  // namespace precis::cuda
