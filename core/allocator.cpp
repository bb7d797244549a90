// The CPU caching allocator and the per-device allocator table.
//
// Size classes: requests up to 64 KiB are rounded up to a multiple of 512 B (at most 511 B lost,
// at most 128 classes); larger ones to a quarter-power-of-two step (2^k, 1.25·2^k, 1.5·2^k,
// 1.75·2^k: at most 25% lost, ~12% on average). Coarse classes above 64 KiB matter because a
// training step rarely repeats exactly the same byte count (batch remainders, sequence lengths):
// close sizes share a class and so hit the cache; four steps per octave bound the waste.
// A freed block goes back to the free list of its class and is handed out again only for the same
// class, so a block's size is always known from the request size and needs no per-pointer table.
//
// Blocks of 2 MiB and more are mapped directly with mmap, aligned to 2 MiB and marked
// MADV_HUGEPAGE: on the machines here a first touch of a fresh 4 KiB page costs ~10 µs and a huge
// page ~45x less per byte (MACHINE.md). Smaller blocks come from aligned_alloc.
#include "core/allocator.h"

#include <sys/mman.h>

#include <array>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "core/caching_allocator.h"
#include "core/checked_math.h"
#include "core/cuda_backend.h"
#include "core/error.h"

// Under AddressSanitizer the allocator tells ASan which bytes are live: a cached block, and the
// rounding slack past the bytes asked for, are poisoned, so a kernel that reads past a tensor's
// end or uses a freed tensor's memory is reported even though the block never went back to
// malloc (without this, size classes and the cache hide both from ASan).
#if defined(__SANITIZE_ADDRESS__)
#define PRECIS_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define PRECIS_ASAN 1
#endif
#endif

#ifdef PRECIS_ASAN
extern "C" void __asan_poison_memory_region(void const volatile* addr, size_t size);
extern "C" void __asan_unpoison_memory_region(void const volatile* addr, size_t size);
#endif

namespace precis {

namespace {

#ifdef PRECIS_ASAN
void asan_poison(void* p, size_t n) { __asan_poison_memory_region(p, n); }
void asan_unpoison(void* p, size_t n) { __asan_unpoison_memory_region(p, n); }
#else
void asan_poison(void*, size_t) {}
void asan_unpoison(void*, size_t) {}
#endif

// Marks [p, p + nbytes) of a block of `size` bytes live and the rest of it dead.
void asan_hand_out(void* p, size_t nbytes, size_t size) {
  asan_unpoison(p, nbytes);
  asan_poison(static_cast<char*>(p) + nbytes, size - nbytes);
}

constexpr size_t kAlignment = 64;
constexpr size_t kSmallStep = 512;
constexpr size_t kSmallLimit = size_t{64} << 10;
constexpr size_t kHugePage = size_t{2} << 20;

// The size class (block size) of a request of nbytes > 0.
size_t round_size(size_t nbytes) {
  if (nbytes <= kSmallLimit) return (nbytes + kSmallStep - 1) / kSmallStep * kSmallStep;
  // Quarter steps of the octave [2^k, 2^(k+1)) that holds nbytes - 1: step = 2^(k-2).
  const int k = 63 - __builtin_clzll(nbytes - 1);
  const size_t step = size_t{1} << (k - 2);
  if (nbytes > kMaxAllocationBytes)
    throw OutOfMemoryError(detail::str_cat("cpu caching allocator: cannot allocate ", nbytes,
                                           " bytes: more than a 64-bit offset can address (",
                                           kMaxAllocationBytes, ")"),
                           nbytes, "cpu");
  return (nbytes + step - 1) / step * step;
}

class CpuCachingAllocator final : public CachingAllocatorBase {
 public:
  void* allocate(size_t nbytes) override {
    if (nbytes == 0) return nullptr;
    const size_t size = round_size(nbytes);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      book_.count_request();
      auto it = free_.find(size);
      if (it != free_.end() && !it->second.empty()) {
        void* p = it->second.back();
        it->second.pop_back();
        book_.cache_hit(size);
        asan_hand_out(p, nbytes, size);
        return p;
      }
    }
    // Ask the system outside the lock: mmap and page clearing can take a while.
    void* p = system_alloc(size);
    if (p == nullptr) {
      // Cached blocks of other classes may be what stands in the way; give them back and retry.
      {
        std::lock_guard<std::mutex> lock(mutex_);
        book_.cache_flush();
      }
      empty_cache();
      p = system_alloc(size);
    }
    if (p == nullptr)
      throw OutOfMemoryError(detail::str_cat("cpu caching allocator: out of memory allocating ", nbytes,
                                             " bytes on cpu (block of ", size, " bytes); ", stats().allocated,
                                             " bytes are held by live tensors. Free tensors or reduce the batch size."),
                             nbytes, "cpu");
    std::lock_guard<std::mutex> lock(mutex_);
    book_.fresh_block(size);
    asan_hand_out(p, nbytes, size);
    return p;
  }

  void deallocate(void* ptr, size_t nbytes) override {
    if (ptr == nullptr) return;
    const size_t size = round_size(nbytes);
    std::lock_guard<std::mutex> lock(mutex_);
    book_.freed(size);
    asan_poison(ptr, size);  // a use after free of a cached block is now an ASan report
    free_[size].push_back(ptr);
  }

  void empty_cache() override {
    // Take the free lists under the lock, give the memory back outside it.
    std::unordered_map<size_t, std::vector<void*>> blocks;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      blocks.swap(free_);
      for (const auto& [size, list] : blocks) book_.released(size * list.size());
    }
    for (const auto& [size, list] : blocks)
      for (void* p : list) system_free(p, size);
  }

  Device device() const override { return Device::cpu(); }

 private:
  static void* system_alloc(size_t size) {
    if (size < kHugePage) return std::aligned_alloc(kAlignment, size);
    // Over-map by one huge page so the block can start on a 2 MiB boundary (huge pages only back
    // aligned 2 MiB ranges), then unmap the slack on both sides.
    const size_t span = size + kHugePage;
    void* raw = mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED) return nullptr;
    const auto base = reinterpret_cast<uintptr_t>(raw);
    const uintptr_t start = (base + kHugePage - 1) & ~(uintptr_t{kHugePage} - 1);
    if (start > base) munmap(raw, start - base);
    const uintptr_t end = start + size;  // size is a multiple of 4 KiB (a class >= 2 MiB)
    if (base + span > end) munmap(reinterpret_cast<void*>(end), base + span - end);
    // Advisory: without THP support the block still works, only with 4 KiB pages.
    madvise(reinterpret_cast<void*>(start), size, MADV_HUGEPAGE);
    return reinterpret_cast<void*>(start);
  }

  static void system_free(void* p, size_t size) {
    asan_unpoison(p, size);  // the memory goes back to malloc or the kernel unmarked
    if (size < kHugePage)
      std::free(p);
    else
      munmap(p, size);
  }

  std::unordered_map<size_t, std::vector<void*>> free_;  // size class -> cached blocks (guarded by mutex_)
};

// The device table. Lookups are lock-free (allocator_for runs for every tensor allocation);
// registration is rare and only ever replaces one pointer.
constexpr int kMaxDeviceIndex = 64;
std::array<std::array<std::atomic<Allocator*>, kMaxDeviceIndex>, kNumDeviceTypes> g_table{};

}  // namespace

Allocator& cpu_allocator() {
  // Leaked on purpose: tensors held in static objects are freed by static destructors that may run
  // after this function's statics would have been destroyed.
  static Allocator* const allocator = new CpuCachingAllocator();
  return *allocator;
}

Allocator& allocator_for(Device device) {
  const auto type = static_cast<int>(device.type);
  PRECIS_CHECK_DEVICE(type < kNumDeviceTypes && device.index >= 0 && device.index < kMaxDeviceIndex,
                      "no allocator for ", device.str(), ": device index out of range [0, ",
                      kMaxDeviceIndex, ")");
  if (Allocator* a = g_table[type][device.index].load(std::memory_order_acquire)) return *a;
  if (device.is_cpu()) return cpu_allocator();
  const detail::CudaCoreHooks* cuda = detail::cuda_core_hooks();
  if (cuda == nullptr)
    throw DeviceError(detail::str_cat(device.str(), " is not available: ", cuda_backend_unavailable_reason(),
                                      "; use Device::cpu()"));
  // Registered here, on first use, so that allocating needs nothing from the layers above (the
  // CUDA backend's kernels are registered separately, by ops).
  static std::once_flag cuda_once;
  std::call_once(cuda_once, [cuda] { cuda->register_allocators(); });
  if (Allocator* a = g_table[type][device.index].load(std::memory_order_acquire)) return *a;
  throw DeviceError(detail::str_cat("no CUDA allocator for ", device.str(), ": the device is absent"));
}

Allocator& pinned_allocator() {
  const detail::CudaCoreHooks* cuda = detail::cuda_core_hooks();
  if (cuda == nullptr)
    throw DeviceError(detail::str_cat("pin_memory: pinned host memory needs CUDA, and ",
                                      cuda_backend_unavailable_reason(), "; use ordinary CPU tensors"));
  return cuda->pinned_allocator();
}

bool pinned_memory_available() {
  const detail::CudaCoreHooks* cuda = detail::cuda_core_hooks();
  return cuda != nullptr && cuda->device_count() > 0;
}

void Allocator::copy_to_host(void* dst, const void* src, size_t nbytes) const {
  if (nbytes != 0) std::memcpy(dst, src, nbytes);
}

void register_allocator(DeviceType type, int index, Allocator* allocator) {
  const auto t = static_cast<int>(type);
  PRECIS_CHECK(t < kNumDeviceTypes && index >= 0 && index < kMaxDeviceIndex,
               "register_allocator: device index ", index, " out of range [0, ", kMaxDeviceIndex,
               ")");
  g_table[t][index].store(allocator, std::memory_order_release);
}

}  // namespace precis
