#include "core/cuda/cuda_allocator.h"

#include <cuda_runtime_api.h>

#include <map>
#include <mutex>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/caching_allocator.h"
#include "core/checked_math.h"
#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_context.h"

namespace precis::cuda {

namespace {

constexpr size_t kSmallLimit = size_t{1} << 20;  // 1 MiB
constexpr size_t kSmallStep = 512;
constexpr size_t kLargeStep = size_t{2} << 20;   // 2 MiB

std::string bytes_str(size_t n) {
  const double mib = static_cast<double>(n) / (1024.0 * 1024.0);
  return precis::detail::str_cat(n, " bytes (", mib, " MiB)");
}

class CachingAllocator final : public CachingAllocatorBase {
 public:
  explicit CachingAllocator(int index) : index_(index) {}

  void* allocate(size_t nbytes) override {
    if (nbytes == 0) return nullptr;
    if (nbytes > kMaxAllocationBytes)
      throw OutOfMemoryError(precis::detail::str_cat("CUDA caching allocator: cannot allocate ", nbytes, " bytes on cuda:",
                                                     index_, ": more than a 64-bit offset can address"),
                             nbytes, precis::detail::str_cat("cuda:", index_));
    const size_t size = round_block_size(nbytes);
    std::lock_guard<std::mutex> lock(mutex_);
    // Fetched on first use so that registering the allocator creates no CUDA context.
    if (stream_ == nullptr) stream_ = device_stream(index_);
    book_.count_request();
    void* ptr = nullptr;
    auto it = free_.find({stream_, size});
    if (it != free_.end() && !it->second.empty()) {
      ptr = it->second.back();
      it->second.pop_back();
      book_.cache_hit(size);
    } else {
      ptr = malloc_with_retry(nbytes, size);
      book_.fresh_block(size);
    }
    live_.emplace(ptr, Block{size, stream_});
    return ptr;
  }

  void deallocate(void* ptr, size_t /*nbytes*/) override {
    if (ptr == nullptr) return;
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = live_.find(ptr);
    // Called from storage destructors, so it must not throw; an unknown pointer is not ours.
    if (it == live_.end()) return;
    Block b = it->second;
    live_.erase(it);
    b.stream = stream_;  // the stream it is freed on: the device's only stream
    book_.freed(b.size);
    free_[{b.stream, b.size}].push_back(ptr);
  }

  void empty_cache() override {
    std::lock_guard<std::mutex> lock(mutex_);
    release_cached_locked();
  }

  Device device() const override { return Device::cuda(index_); }
  void copy_to_host(void* dst, const void* src, size_t nbytes) const override {
    if (nbytes == 0) return;
    cudaStream_t stream = device_stream(index_);
    PRECIS_CUDA_CHECK(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyDeviceToHost, stream), "copy of ", nbytes,
                      " bytes from ", device().str(), " to the host");
    PRECIS_CUDA_CHECK(cudaStreamSynchronize(stream), "copy of ", nbytes, " bytes from ", device().str(), " to the host");
  }

 private:
  struct Block {
    size_t size;
    cudaStream_t stream;
  };
  using FreeKey = std::pair<cudaStream_t, size_t>;

  // Caller holds mutex_.
  void* malloc_with_retry(size_t nbytes, size_t size) {
    DeviceGuard guard(index_);
    void* ptr = nullptr;
    cudaError_t err = cudaMalloc(&ptr, size);
    if (err == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();
      release_cached_locked();
      err = cudaMalloc(&ptr, size);
      if (err == cudaErrorMemoryAllocation) {
        (void)cudaGetLastError();
        size_t free_b = 0, total_b = 0;
        (void)cudaMemGetInfo(&free_b, &total_b);
        (void)cudaGetLastError();
        const AllocatorStats& st = book_.get();
        throw OutOfMemoryError(precis::detail::str_cat(
            "CUDA out of memory on cuda:", index_, ": cannot allocate ", bytes_str(nbytes), " (block of ",
            bytes_str(size), ") even after releasing the cache; the caching allocator holds ",
            bytes_str(st.allocated), " in live tensors (peak ", bytes_str(st.peak_allocated), "), ",
            bytes_str(st.reserved), " reserved; the device has ", bytes_str(free_b), " free of ",
            bytes_str(total_b), ". Free tensors you no longer need, or reduce the batch size"),
            nbytes, precis::detail::str_cat("cuda:", index_));
      }
    }
    PRECIS_CUDA_CHECK(err, "allocating ", bytes_str(size), " on cuda:", index_);
    return ptr;
  }

  // Caller holds mutex_. The synchronisation makes sure no queued kernel still uses a cached
  // block (cudaFree would also wait, but the explicit sync keeps the contract visible).
  void release_cached_locked() {
    if (free_.empty()) return;
    DeviceGuard guard(index_);
    PRECIS_CUDA_CHECK(cudaDeviceSynchronize(), "synchronising cuda:", index_, " before releasing cached blocks");
    for (auto& [key, ptrs] : free_) {
      for (void* p : ptrs) {
        PRECIS_CUDA_CHECK(cudaFree(p), "releasing a cached block on cuda:", index_);
        book_.released(key.second);
      }
    }
    free_.clear();
  }

  const int index_;
  cudaStream_t stream_ = nullptr;  // the device stream, set by the first allocate()
  std::unordered_map<void*, Block> live_;  // guarded by mutex_, as is free_
  std::map<FreeKey, std::vector<void*>> free_;
};

// Stands in for a CUDA index with no visible device, so that allocating there explains why.
class UnavailableAllocator final : public Allocator {
 public:
  explicit UnavailableAllocator(int index) : index_(index) {}
  void* allocate(size_t) override {
    check_device_index(index_, "allocating a tensor");
    throw InternalError("UnavailableAllocator used for a visible device");  // unreachable
  }
  void deallocate(void*, size_t) override {}
  AllocatorStats stats() const override { return {}; }
  void reset_peak_stats() override {}
  void empty_cache() override {}
  Device device() const override { return Device::cuda(index_); }

 private:
  int index_;
};

}  // namespace

size_t round_block_size(size_t nbytes) {
  const size_t step = nbytes <= kSmallLimit ? kSmallStep : kLargeStep;
  return (nbytes + step - 1) / step * step;
}

Allocator& caching_allocator(int index) {
  check_device_index(index, "caching_allocator");
  static std::mutex mutex;
  static CachingAllocator* allocators[kMaxDevices] = {};
  std::lock_guard<std::mutex> lock(mutex);
  if (allocators[index] == nullptr) allocators[index] = new CachingAllocator(index);  // never freed: see header
  return *allocators[index];
}

void register_allocators() {
  const int n = device_count();
  for (int i = 0; i < kMaxDevices; ++i) {
    Allocator* a = i < n ? &caching_allocator(i) : new UnavailableAllocator(i);
    register_allocator(DeviceType::cuda, i, a);
  }
}

}  // namespace precis::cuda
