#pragma once
// A reference-counted buffer on one device. Views share one Storage.
#include <cstddef>
#include <functional>
#include <memory>

#include "core/allocator.h"
#include "core/device.h"

namespace precis {

/// A buffer of nbytes bytes on one device, freed (to its allocator, or through the deleter) when
/// the last Storage (shared_ptr) referring to it goes. Not copyable.
class StorageImpl {
 public:
  /// Allocates nbytes from the device's allocator.
  StorageImpl(size_t nbytes, Device device);
  /// Allocates nbytes from `allocator` (e.g. pinned_allocator() for pinned host memory); the
  /// storage's device is the allocator's.
  StorageImpl(size_t nbytes, Allocator& allocator);
  /// Wraps memory owned elsewhere; `deleter` (may be empty) runs when the storage dies.
  StorageImpl(void* data, size_t nbytes, Device device, std::function<void(void*)> deleter);
  ~StorageImpl();
  StorageImpl(const StorageImpl&) = delete;
  StorageImpl& operator=(const StorageImpl&) = delete;

  /// The buffer (device memory for CUDA); null when an allocator was asked for 0 bytes.
  void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }  ///< its size in bytes
  Device device() const { return device_; }  ///< where the bytes live
  /// The allocator the bytes came from; null for wrapped external memory.
  Allocator* allocator() const { return allocator_; }

 private:
  void* data_ = nullptr;
  size_t nbytes_ = 0;
  Device device_;
  Allocator* allocator_ = nullptr;          // set when data_ came from an allocator
  std::function<void(void*)> deleter_;      // set for wrapped external memory
};

using Storage = std::shared_ptr<StorageImpl>;

}  // namespace precis
