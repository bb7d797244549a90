#include "core/direct_device_allocator.h"

#include <iterator>
#include <string>

#include "core/checked_math.h"
#include "core/error.h"
#include "core/warning.h"

namespace precis {

DirectDeviceAllocator::DirectDeviceAllocator(std::unique_ptr<DeviceMemory> memory) : memory_(std::move(memory)) {
  PRECIS_INTERNAL_ASSERT(memory_ != nullptr, "DirectDeviceAllocator: no device memory interface");
}

Device DirectDeviceAllocator::device() const { return memory_->device(); }

void DirectDeviceAllocator::copy_to_host(void* dst, const void* src, size_t nbytes) const {
  if (nbytes != 0) memory_->copy_to_host(dst, src, nbytes);
}

AllocatorStats DirectDeviceAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return book_.get();
}

void DirectDeviceAllocator::reset_peak_stats() {
  std::lock_guard<std::mutex> lock(mutex_);
  book_.reset_peak();
}

void* DirectDeviceAllocator::allocate(size_t nbytes) {
  if (nbytes == 0) return nullptr;
  if (nbytes > kMaxAllocationBytes)
    throw OutOfMemoryError(detail::str_cat("direct allocator: cannot allocate ", nbytes, " bytes on ",
                                           memory_->name(), ": more than a 64-bit offset can address"),
                           nbytes, memory_->device().str());
  {
    std::lock_guard<std::mutex> lock(mutex_);
    book_.count_request();
  }
  // Exactly nbytes: no rounding, so the byte past the end is outside the allocation memcheck knows.
  void* ptr = memory_->malloc(nbytes);
  std::lock_guard<std::mutex> lock(mutex_);
  if (ptr == nullptr) {
    const AllocatorStats& st = book_.get();
    const std::string info = memory_->memory_info();
    throw OutOfMemoryError(
        detail::str_cat("out of memory on ", memory_->name(), ": cannot allocate ", nbytes,
                        " bytes with the direct allocator (PRECIS_CUDA_ALLOCATOR=direct: one device malloc per "
                        "tensor, no cache to release); live tensors hold ",
                        st.allocated, " bytes (peak ", st.peak_allocated, ")",
                        info.empty() ? "" : "; the device has ", info,
                        ". Free tensors you no longer need, reduce the batch size, or unset PRECIS_CUDA_ALLOCATOR"),
        nbytes, memory_->device().str());
  }
  book_.fresh_block(nbytes);
  live_.emplace(static_cast<const char*>(ptr), nbytes);
  return ptr;
}

void DirectDeviceAllocator::deallocate(void* ptr, size_t /*nbytes*/) {
  if (ptr == nullptr) return;
  size_t bytes = 0;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = live_.find(static_cast<const char*>(ptr));
    if (it == live_.end()) return;  // not ours
    bytes = it->second;
    live_.erase(it);
    book_.freed(bytes);  // cannot fail: the block was live, so its bytes are counted
  }
  // The device calls run outside the lock: nothing refers to the block any more, and another
  // thread's allocation need not wait for this one's device synchronisation.
  try {
    memory_->synchronize_device();
  } catch (const std::exception& e) {
    try {
      warn(detail::str_cat("direct allocator on ", memory_->name(), ": could not wait for the device before freeing ",
                           bytes, " bytes (", e.what(), "); the block is kept, not freed"));
    } catch (...) {
    }
    return;  // still counted as reserved: it is held
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    book_.released(bytes);  // before the free, as the caching allocator does: a free that throws is not retried
  }
  try {
    memory_->free(ptr, bytes);
  } catch (const std::exception& e) {
    try {
      warn(detail::str_cat("direct allocator on ", memory_->name(), ": freeing ", bytes, " bytes failed (", e.what(),
                           ")"));
    } catch (...) {
    }
  }
}

void DirectDeviceAllocator::record_stream(const void* ptr, StreamHandle /*stream*/) {
  std::lock_guard<std::mutex> lock(mutex_);
  const char* p = static_cast<const char*>(ptr);
  auto it = live_.upper_bound(p);
  const bool live = it != live_.begin() && p < std::prev(it)->first + std::prev(it)->second;
  PRECIS_CHECK(live, "record_stream: the address ", ptr, " is in no live block of the direct allocator of ",
               memory_->name(), "; pass the data of a tensor allocated there (not one wrapped with from_blob, "
               "nor one already freed)");
}

size_t DirectDeviceAllocator::live_block_count() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return live_.size();
}

}  // namespace precis
