#include "core/cuda/cuda_context.h"

#include <cuda_runtime_api.h>

#include <array>
#include <atomic>
#include <mutex>
#include <string>

#include "core/cuda/cuda_check.h"
#include "core/sync_debug.h"

namespace precis::cuda {

namespace {

struct DeviceInfo {
  int count = 0;
  std::string reason;  // why count is 0
};

const DeviceInfo& device_info() {
  static const DeviceInfo info = [] {
    DeviceInfo d;
    int n = 0;
    const cudaError_t err = cudaGetDeviceCount(&n);
    if (err != cudaSuccess) {
      (void)cudaGetLastError();  // the failed query must not poison later calls
      // The two common cases in words a user acts on; the runtime's name stays for searching.
      if (err == cudaErrorInsufficientDriver)
        d.reason = "no NVIDIA driver, or one older than this CUDA " + std::to_string(CUDART_VERSION / 1000) +
                   " build needs (cudaErrorInsufficientDriver)";
      else if (err == cudaErrorNoDevice)
        d.reason = "the driver sees no GPU (cudaErrorNoDevice; check nvidia-smi and CUDA_VISIBLE_DEVICES)";
      else
        d.reason = std::string(cudaGetErrorName(err)) + ": " + cudaGetErrorString(err);
      return d;
    }
    d.count = n < kMaxDevices ? n : kMaxDevices;
    if (n == 0) d.reason = "the CUDA runtime reports 0 devices";
    return d;
  }();
  return info;
}

// The three streams of each device, by kind (created on first use, never destroyed: kernels may
// still be queued on them at exit).
enum StreamKind { kCompute = 0, kCopy = 1, kComm = 2, kNumKinds = 3 };
const char* const kKindNames[kNumKinds] = {"compute", "copy", "comm"};
std::mutex g_stream_mutex;
std::array<std::array<cudaStream_t, kNumKinds>, kMaxDevices> g_streams{};

// The calling thread's current stream per device; null means the compute stream.
thread_local std::array<cudaStream_t, kMaxDevices> t_current{};

cudaStream_t stream_of(int index, StreamKind kind) {
  check_device_index(index, "creating a stream");
  std::lock_guard<std::mutex> lock(g_stream_mutex);
  cudaStream_t& s = g_streams[static_cast<size_t>(index)][kind];
  if (s == nullptr) {
    DeviceGuard guard(index);
    PRECIS_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamDefault), "creating the ", kKindNames[kind],
                      " stream of cuda:", index);
  }
  return s;
}

}  // namespace

namespace detail {

void throw_cuda_error(cudaError_t err, const char* call, const char* file, int line, const std::string& context) {
  // Clears the error when it is not sticky, so one failure does not fail every later call.
  (void)cudaGetLastError();
  throw DeviceError(precis::detail::str_cat("CUDA error ", cudaGetErrorName(err), " (", cudaGetErrorString(err),
                                            ")", context.empty() ? "" : " in ", context, " [", call, " at ", file,
                                            ":", line, "]"));
}

void throw_cublas_error(cublasStatus_t status, const char* call, const char* file, int line,
                        const std::string& context) {
  throw DeviceError(precis::detail::str_cat("cuBLAS error ", cublasGetStatusName(status), " (",
                                            cublasGetStatusString(status), ")", context.empty() ? "" : " in ",
                                            context, " [", call, " at ", file, ":", line, "]"));
}

}  // namespace detail

int device_count() { return device_info().count; }

const char* unavailable_reason() { return device_info().reason.c_str(); }

void check_device_index(int index, const char* op) {
  const int n = device_count();
  if (n == 0) {
    throw DeviceError(precis::detail::str_cat(op, ": cuda:", index,
                                              " is not available: no CUDA device is visible (",
                                              unavailable_reason(),
                                              "); use Device::cpu(), or check the driver and CUDA_VISIBLE_DEVICES"));
  }
  PRECIS_CHECK_DEVICE(index >= 0 && index < n, op, ": cuda:", index, " is out of range: ", n,
                      " CUDA device(s) visible (cuda:0 .. cuda:", n - 1, ")");
}

int current_device() {
  int d = 0;
  PRECIS_CUDA_CHECK(cudaGetDevice(&d), "reading the current device");
  return d;
}

void set_device(int index) {
  check_device_index(index, "set_device");
  PRECIS_CUDA_CHECK(cudaSetDevice(index), "making cuda:", index, " current");
}

namespace {
std::atomic<int> g_home_device{-1};
}  // namespace

void set_home_device(int index) {
  set_device(index);
  g_home_device.store(index, std::memory_order_relaxed);
}

int home_device() { return g_home_device.load(std::memory_order_relaxed); }

DeviceGuard::DeviceGuard(int index) : previous_(current_device()), index_(index) {
  if (index_ != previous_) set_device(index_);
}

DeviceGuard::~DeviceGuard() {
  // A destructor must not throw; restoring a device that was current before cannot fail in
  // practice, and a failure here would resurface on the next checked call anyway.
  if (index_ != previous_) (void)cudaSetDevice(previous_);
}

cudaStream_t compute_stream(int index) { return stream_of(index, kCompute); }
cudaStream_t copy_stream(int index) { return stream_of(index, kCopy); }
cudaStream_t comm_stream(int index) { return stream_of(index, kComm); }

cudaStream_t current_stream(int index) {
  check_device_index(index, "current_stream");
  cudaStream_t s = t_current[static_cast<size_t>(index)];
  return s != nullptr ? s : compute_stream(index);
}

cudaStream_t device_stream(int index) { return current_stream(index); }

int stream_device(cudaStream_t stream) {
  if (stream == nullptr) return -1;
  std::lock_guard<std::mutex> lock(g_stream_mutex);
  for (int i = 0; i < kMaxDevices; ++i)
    for (cudaStream_t s : g_streams[static_cast<size_t>(i)])
      if (s == stream) return i;
  return -1;
}

StreamGuard::StreamGuard(int index, cudaStream_t stream) : index_(index) {
  check_device_index(index, "StreamGuard");
  const int owner = stream_device(stream);
  PRECIS_CHECK_DEVICE(owner == -1 || owner == index, "StreamGuard: the stream belongs to cuda:", owner,
                      ", not to cuda:", index, "; pass a stream of the device it is made current for");
  previous_ = t_current[static_cast<size_t>(index)];
  t_current[static_cast<size_t>(index)] = stream;
}

StreamGuard::~StreamGuard() { t_current[static_cast<size_t>(index_)] = previous_; }

Event::Event(int index) : index_(index) {
  DeviceGuard guard(index);
  PRECIS_CUDA_CHECK(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming), "creating an event on cuda:", index);
}

Event::~Event() {
  // Destroying an event whose work is still queued is allowed: the runtime releases it once the
  // work completes. A failure cannot be reported from a destructor and leaks one event at most.
  if (event_ != nullptr) (void)cudaEventDestroy(event_);
}

void Event::record(cudaStream_t stream) {
  DeviceGuard guard(index_);
  PRECIS_CUDA_CHECK(cudaEventRecord(event_, stream), "recording an event on a stream of cuda:", index_);
}

void Event::wait(cudaStream_t stream) const {
  DeviceGuard guard(index_);
  PRECIS_CUDA_CHECK(cudaStreamWaitEvent(stream, event_, 0), "making a stream wait for an event of cuda:", index_);
}

bool Event::query() const {
  const cudaError_t err = cudaEventQuery(event_);
  if (err == cudaErrorNotReady) {
    (void)cudaGetLastError();
    return false;
  }
  PRECIS_CUDA_CHECK(err, "querying an event of cuda:", index_);
  return true;
}

void Event::synchronize() const {
  precis::detail::note_host_sync("waiting for a CUDA event (Event::synchronize)");
  PRECIS_CUDA_CHECK(cudaEventSynchronize(event_), "waiting for an event of cuda:", index_);
}

void stream_wait(int index, cudaStream_t waiter, cudaStream_t source) {
  if (waiter == source) return;  // a stream is ordered with itself
  Event ev(index);
  ev.record(source);
  ev.wait(waiter);
}

void synchronize_stream(int index) {
  cudaStream_t s = current_stream(index);
  DeviceGuard guard(index);
  precis::detail::note_host_sync("a stream synchronisation");
  PRECIS_CUDA_CHECK(cudaStreamSynchronize(s), "synchronising the current stream of cuda:", index);
}

void synchronize_device(int index) {
  check_device_index(index, "synchronize");
  DeviceGuard guard(index);
  precis::detail::note_host_sync("cuda::synchronize (a device synchronisation)");
  PRECIS_CUDA_CHECK(cudaDeviceSynchronize(), "synchronising cuda:", index);
}

}  // namespace precis::cuda
