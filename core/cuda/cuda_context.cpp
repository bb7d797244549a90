#include "core/cuda/cuda_context.h"

#include <cuda_runtime_api.h>

#include <array>
#include <mutex>
#include <string>

#include "core/cuda/cuda_check.h"

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
      d.reason = std::string(cudaGetErrorName(err)) + ": " + cudaGetErrorString(err);
      return d;
    }
    d.count = n < kMaxDevices ? n : kMaxDevices;
    if (n == 0) d.reason = "the CUDA runtime reports 0 devices";
    return d;
  }();
  return info;
}

std::mutex g_stream_mutex;
std::array<cudaStream_t, kMaxDevices> g_streams{};

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

DeviceGuard::DeviceGuard(int index) : previous_(current_device()), index_(index) {
  if (index_ != previous_) set_device(index_);
}

DeviceGuard::~DeviceGuard() {
  // A destructor must not throw; restoring a device that was current before cannot fail in
  // practice, and a failure here would resurface on the next checked call anyway.
  if (index_ != previous_) (void)cudaSetDevice(previous_);
}

cudaStream_t device_stream(int index) {
  check_device_index(index, "device_stream");
  std::lock_guard<std::mutex> lock(g_stream_mutex);
  cudaStream_t& s = g_streams[static_cast<size_t>(index)];
  if (s == nullptr) {
    DeviceGuard guard(index);
    PRECIS_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamDefault), "creating the stream of cuda:", index);
  }
  return s;
}

void synchronize_stream(int index) {
  cudaStream_t s = device_stream(index);
  DeviceGuard guard(index);
  PRECIS_CUDA_CHECK(cudaStreamSynchronize(s), "synchronising the stream of cuda:", index);
}

}  // namespace precis::cuda
