#pragma once
// What every oneDNN user in ops/cpu shares: one CPU engine, a stream per thread, and the thread
// count oneDNN's OpenMP runtime must use for the next primitive. Internal to ops/cpu; includes
// oneDNN's header, so only oneDNN back-end files include it.
#ifdef PRECIS_HAS_ONEDNN

#include <array>
#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>

#include <oneapi/dnnl/dnnl.hpp>

namespace precis::cpu {

/// The process-wide CPU engine.
const dnnl::engine& cpu_engine();

/// This thread's stream on cpu_engine(). oneDNN does not promise that one stream may be used from
/// several threads at once; a CPU stream is only a handle, so each thread keeps its own.
dnnl::stream& thread_stream();

/// Makes oneDNN on this thread use precis's thread count (one thread inside a parallel_for body,
/// where the pool already occupies the cores) and returns it. A primitive plans its work split
/// for the thread count it was created under, so callers put the count in their cache keys.
int sync_thread_count();

/// The attributes every primitive precis builds carries: the scratchpad in user mode. oneDNN's
/// default (library-managed) scratchpad is one buffer per creating thread, so such a primitive may
/// not run on another thread, nor on two threads at once, and precis's caches share primitives
/// between threads. Each execution therefore brings its own scratchpad (execute_primitive).
dnnl::primitive_attr scratchpad_attr();

/// Runs `primitive` on this thread's stream with `args` plus, when `scratchpad` (the primitive
/// descriptor's scratchpad_desc()) is not empty, a scratchpad from precis's caching allocator that
/// only this execution uses; waits for it. Throws dnnl::error as the primitive does.
void execute_primitive(const dnnl::primitive& primitive, const dnnl::memory::desc& scratchpad,
                       std::unordered_map<int, dnnl::memory> args);

/// A small LRU map from a problem key (an array of integers) to a ready primitive, shared by all
/// threads: creating a primitive (choosing an implementation, JIT-compiling its kernels) costs from
/// tens of microseconds to milliseconds, far more than running a small one. Lookups lock a mutex;
/// execution happens outside it on the returned shared pointer.
template <typename Key, typename Value>
class PrimitiveCache {
 public:
  std::shared_ptr<const Value> find(const Key& key) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = map_.find(key);
    if (it == map_.end()) return nullptr;
    it->second.last_use = ++tick_;
    return it->second.value;
  }

  // Keeps the first value inserted for a key (two threads may build the same primitive).
  std::shared_ptr<const Value> insert(const Key& key, std::shared_ptr<const Value> value) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = map_.find(key);
    if (it != map_.end()) return it->second.value;
    if (map_.size() >= kCapacity) evict_oldest();
    map_.emplace(key, Slot{value, ++tick_});
    return value;
  }

 private:
  // Enough for every distinct primitive of a large model's forward and backward passes.
  static constexpr size_t kCapacity = 512;
  struct Slot {
    std::shared_ptr<const Value> value;
    uint64_t last_use;
  };
  struct KeyHash {
    size_t operator()(const Key& key) const {
      uint64_t h = 1469598103934665603ull;
      for (int64_t v : key) h = (h ^ static_cast<uint64_t>(v)) * 1099511628211ull;
      return static_cast<size_t>(h);
    }
  };
  void evict_oldest() {
    auto oldest = map_.begin();
    for (auto it = map_.begin(); it != map_.end(); ++it)
      if (it->second.last_use < oldest->second.last_use) oldest = it;
    map_.erase(oldest);
  }
  std::mutex mutex_;
  std::unordered_map<Key, Slot, KeyHash> map_;
  uint64_t tick_ = 0;
};

}  // namespace precis::cpu

#endif  // PRECIS_HAS_ONEDNN
