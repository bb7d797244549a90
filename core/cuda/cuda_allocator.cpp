#include "core/cuda/cuda_allocator.h"

#include <cuda_runtime_api.h>

#include <cstring>
#include <memory>
#include <mutex>

#include "core/cuda/cuda_check.h"
#include "core/cuda_allocator_mode.h"
#include "core/sync_debug.h"

namespace precis::cuda {

namespace {

std::string gib_str(size_t n) { return precis::detail::str_cat(static_cast<double>(n) / (1024.0 * 1024.0 * 1024.0), " GiB"); }

// Returns false for cudaErrorMemoryAllocation (and clears it); throws for any other failure.
bool alloc_ok(cudaError_t err, const std::string& what) {
  if (err == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    return false;
  }
  PRECIS_CUDA_CHECK(err, what);
  return true;
}

// Events are shared by both memories: created on `index`'s device, recorded on a stream of it.
EventHandle make_event(int index, cudaStream_t stream) {
  DeviceGuard guard(index);
  cudaEvent_t ev = nullptr;
  PRECIS_CUDA_CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming), "creating an allocator event on cuda:",
                    index);
  const cudaError_t err = cudaEventRecord(ev, stream);
  if (err != cudaSuccess) {
    (void)cudaEventDestroy(ev);
    PRECIS_CUDA_CHECK(err, "recording an allocator event on cuda:", index);
  }
  return ev;
}

bool query(EventHandle e) {
  const cudaError_t err = cudaEventQuery(static_cast<cudaEvent_t>(e));
  if (err == cudaErrorNotReady) {
    (void)cudaGetLastError();
    return false;
  }
  PRECIS_CUDA_CHECK(err, "querying an allocator event");
  return true;
}

class CudaDeviceMemory final : public DeviceMemory {
 public:
  explicit CudaDeviceMemory(int index) : index_(index) {}
  Device device() const override { return Device::cuda(index_); }
  void* malloc(size_t bytes) override {
    DeviceGuard guard(index_);
    void* p = nullptr;
    // A graph capture (thread-local mode, core/cuda/cuda_graph.cpp) forbids cudaMalloc on its
    // thread: the capture's first allocations need new segments of its private pool, which stay
    // until the graph is gone, so the call is safe; relax the mode for it (PyTorch does the same).
    cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
    PRECIS_CUDA_CHECK(cudaThreadExchangeStreamCaptureMode(&mode), "relaxing the stream capture mode on cuda:", index_);
    const cudaError_t err = cudaMalloc(&p, bytes);
    (void)cudaThreadExchangeStreamCaptureMode(&mode);  // back to the caller's mode
    return alloc_ok(err, precis::detail::str_cat("allocating ", bytes, " bytes on cuda:", index_)) ? p : nullptr;
  }
  void free(void* ptr, size_t bytes) override {
    DeviceGuard guard(index_);
    precis::detail::note_host_sync("cudaFree of device memory (the allocator gave a segment back)", false);
    PRECIS_CUDA_CHECK(cudaFree(ptr), "releasing a cached segment of ", bytes, " bytes on cuda:", index_);
  }
  StreamHandle current_stream() override { return cuda::current_stream(index_); }
  EventHandle record_event(StreamHandle stream) override {
    return make_event(index_, static_cast<cudaStream_t>(stream));
  }
  bool query_event(EventHandle e) override { return query(e); }
  void synchronize_event(EventHandle e) override {
    precis::detail::note_host_sync("the device allocator waiting for an event (memory ran short)", false);
    PRECIS_CUDA_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(e)), "waiting for an allocator event on cuda:",
                      index_);
  }
  void destroy_event(EventHandle e) noexcept override { (void)cudaEventDestroy(static_cast<cudaEvent_t>(e)); }
  void synchronize_device() override {
    DeviceGuard guard(index_);
    precis::detail::note_host_sync("the device allocator synchronising before it releases memory", false);
    PRECIS_CUDA_CHECK(cudaDeviceSynchronize(), "synchronising cuda:", index_, " before releasing memory");
  }
  void copy_to_host(void* dst, const void* src, size_t nbytes) override {
    DeviceGuard guard(index_);
    cudaStream_t stream = cuda::current_stream(index_);
    precis::detail::note_host_sync("a device-to-host copy of raw bytes (Allocator::copy_to_host: saving a tensor)");
    PRECIS_CUDA_CHECK(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyDeviceToHost, stream), "copy of ", nbytes,
                      " bytes from cuda:", index_, " to the host");
    PRECIS_CUDA_CHECK(cudaStreamSynchronize(stream), "copy of ", nbytes, " bytes from cuda:", index_, " to the host");
  }
  std::string memory_info() override {
    try {
      const DeviceMemoryInfo m = device_memory_info(index_);
      return gib_str(m.free) + " free of " + gib_str(m.total);
    } catch (const DeviceError&) {
      (void)cudaGetLastError();
      return {};  // only for a message: unknown is fine
    }
  }

 private:
  int index_;
};

// Page-locked host memory. Portable: usable by every device's copies, not only the current one's.
class PinnedHostMemory final : public DeviceMemory {
 public:
  Device device() const override { return Device::cpu(); }
  std::string name() const override { return "pinned host memory"; }
  void* malloc(size_t bytes) override {
    void* p = nullptr;
    // The allocation lives in the current device's context: on a thread of its own (a loader
    // worker) that is cuda:0 unless the process's device is made current, and left so.
    if (const int home = home_device(); home >= 0 && current_device() != home) set_device(home);
    return alloc_ok(cudaHostAlloc(&p, bytes, cudaHostAllocPortable),
                    precis::detail::str_cat("allocating ", bytes, " bytes of pinned host memory"))
               ? p
               : nullptr;
  }
  void free(void* ptr, size_t bytes) override {
    precis::detail::note_host_sync("cudaFreeHost of pinned memory (the pinned allocator gave a block back)", false);
    PRECIS_CUDA_CHECK(cudaFreeHost(ptr), "releasing ", bytes, " bytes of pinned host memory");
  }
  StreamHandle current_stream() override { return nullptr; }  // one "host" stream for every block
  EventHandle record_event(StreamHandle stream) override {
    auto s = static_cast<cudaStream_t>(stream);
    const int owner = stream_device(s);
    return make_event(owner >= 0 ? owner : current_device(), s);
  }
  bool query_event(EventHandle e) override { return query(e); }
  void synchronize_event(EventHandle e) override {
    precis::detail::note_host_sync("the pinned allocator waiting for a copy to finish (memory ran short)", false);
    PRECIS_CUDA_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(e)), "waiting for a copy from pinned memory");
  }
  void destroy_event(EventHandle e) noexcept override { (void)cudaEventDestroy(static_cast<cudaEvent_t>(e)); }
  // Every device use of a pinned block is an asynchronous copy recorded with record_stream, and
  // the allocator has waited for those events before it frees anything.
  void synchronize_device() override {}
  void copy_to_host(void* dst, const void* src, size_t nbytes) override { std::memcpy(dst, src, nbytes); }

 private:
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

class CudaStreamOrdering final : public StreamOrdering {
 public:
  explicit CudaStreamOrdering(int index) : index_(index) {}
  EventHandle record(StreamHandle stream) override { return make_event(index_, static_cast<cudaStream_t>(stream)); }
  void wait(StreamHandle waiter, EventHandle event) override {
    DeviceGuard guard(index_);
    PRECIS_CUDA_CHECK(cudaStreamWaitEvent(static_cast<cudaStream_t>(waiter), static_cast<cudaEvent_t>(event), 0),
                      "making a stream of cuda:", index_, " wait for another");
  }
  void release(EventHandle event) noexcept override { (void)cudaEventDestroy(static_cast<cudaEvent_t>(event)); }
  void record_stream(const void* data, int owner, StreamHandle stream) override {
    cuda::record_stream(data, owner, static_cast<cudaStream_t>(stream));
  }

 private:
  int index_;
};

}  // namespace

StreamOrdering& stream_ordering(int index) {
  check_device_index(index, "stream_ordering");
  static CudaStreamOrdering* const orderings[kMaxDevices] = {  // stateless; never freed
      new CudaStreamOrdering(0),  new CudaStreamOrdering(1),  new CudaStreamOrdering(2),  new CudaStreamOrdering(3),
      new CudaStreamOrdering(4),  new CudaStreamOrdering(5),  new CudaStreamOrdering(6),  new CudaStreamOrdering(7),
      new CudaStreamOrdering(8),  new CudaStreamOrdering(9),  new CudaStreamOrdering(10), new CudaStreamOrdering(11),
      new CudaStreamOrdering(12), new CudaStreamOrdering(13), new CudaStreamOrdering(14), new CudaStreamOrdering(15)};
  static_assert(kMaxDevices == 16, "one ordering per addressable device");
  return *orderings[index];
}

DeviceCachingAllocator& caching_allocator(int index) {
  check_device_index(index, "caching_allocator");
  static std::mutex mutex;
  static DeviceCachingAllocator* allocators[kMaxDevices] = {};
  std::lock_guard<std::mutex> lock(mutex);
  if (allocators[index] == nullptr)  // never freed: see header
    allocators[index] = new DeviceCachingAllocator(std::make_unique<CudaDeviceMemory>(index));
  return *allocators[index];
}

DeviceMemoryInfo device_memory_info(int index) {
  check_device_index(index, "device_memory_info");
  DeviceGuard guard(index);
  DeviceMemoryInfo m;
  PRECIS_CUDA_CHECK(cudaMemGetInfo(&m.free, &m.total), "querying the free memory of cuda:", index);
  return m;
}

DirectDeviceAllocator& direct_allocator(int index) {
  check_device_index(index, "direct_allocator");
  static std::mutex mutex;
  static DirectDeviceAllocator* allocators[kMaxDevices] = {};
  std::lock_guard<std::mutex> lock(mutex);
  if (allocators[index] == nullptr)  // never freed: see caching_allocator
    allocators[index] = new DirectDeviceAllocator(std::make_unique<CudaDeviceMemory>(index));
  return *allocators[index];
}

std::unique_ptr<DirectDeviceAllocator> make_direct_allocator(int index) {
  check_device_index(index, "make_direct_allocator");
  return std::make_unique<DirectDeviceAllocator>(std::make_unique<CudaDeviceMemory>(index));
}

DeviceCachingAllocator& pinned_allocator() {
  if (device_count() == 0)
    throw DeviceError(precis::detail::str_cat(
        "pin_memory: pinned host memory needs a CUDA device, and none is visible (", unavailable_reason(),
        "); use ordinary CPU tensors, or check the driver and CUDA_VISIBLE_DEVICES"));
  static DeviceCachingAllocator* const allocator =  // never freed: see caching_allocator
      new DeviceCachingAllocator(std::make_unique<PinnedHostMemory>());
  return *allocator;
}

void record_stream(const void* data, int index, cudaStream_t stream) {
  // Ask the allocator that handed the block out: the one register_allocators chose for the device.
  if (index < 0)
    pinned_allocator().record_stream(data, stream);
  else if (cuda_allocator_mode() == CudaAllocatorMode::direct)
    direct_allocator(index).record_stream(data, stream);
  else
    caching_allocator(index).record_stream(data, stream);
}

void register_allocators() {
  // Throws ValueError for an invalid PRECIS_CUDA_ALLOCATOR before anything is registered.
  const bool direct = cuda_allocator_mode() == CudaAllocatorMode::direct;
  const int n = device_count();
  for (int i = 0; i < kMaxDevices; ++i) {
    Allocator* a = nullptr;
    if (i >= n)
      a = new UnavailableAllocator(i);
    else if (direct)
      a = &direct_allocator(i);
    else
      a = &caching_allocator(i);
    register_allocator(DeviceType::cuda, i, a);
  }
}

}  // namespace precis::cuda
