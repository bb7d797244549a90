#include "tensor/storage.h"

namespace precis {

StorageImpl::StorageImpl(size_t nbytes, Device device) : nbytes_(nbytes), device_(device) {
  allocator_ = &allocator_for(device);
  data_ = allocator_->allocate(nbytes);
}

StorageImpl::StorageImpl(size_t nbytes, Allocator& allocator)
    : nbytes_(nbytes), device_(allocator.device()), allocator_(&allocator) {
  data_ = allocator_->allocate(nbytes);
}

StorageImpl::StorageImpl(void* data, size_t nbytes, Device device, std::function<void(void*)> deleter)
    : data_(data), nbytes_(nbytes), device_(device), deleter_(std::move(deleter)) {}

StorageImpl::~StorageImpl() {
  if (allocator_ != nullptr) {
    allocator_->deallocate(data_, nbytes_);
  } else if (deleter_) {
    deleter_(data_);
  }
}

}  // namespace precis
