#pragma once
// CUDA devices and streams (internal to the CUDA backend; built only with CUDA on).
//
// Stream model: every device has ONE stream, created on first use with cudaStreamDefault flags
// (a "blocking" stream: it stays ordered with the legacy default stream, so a stray call on
// stream 0 cannot race with precis' work). All kernels, cuBLAS calls and async copies of a
// device go to that stream, which gives two guarantees the rest of the backend relies on:
//   - work is executed in issue order, so a block freed after a kernel was enqueued can be handed
//     to the next kernel at once (the caching allocator reuses blocks without events);
//   - the host only waits where it reads device memory (D2H copies, item(), empty_cache).
// Several streams per device (overlap of copies and compute, NCCL) would need the allocator to
// record events for blocks used on another stream; see cuda_allocator.h.
//
// This header names no CUDA header: the stream type is forward-declared exactly as the CUDA
// runtime declares it, so .cpp files that only need device counts stay free of CUDA includes.

typedef struct CUstream_st* cudaStream_t;  // NOLINT: identical to the runtime's own typedef

namespace precis::cuda {

/// The most devices precis addresses (matches the allocator registry in core/allocator.cpp).
inline constexpr int kMaxDevices = 16;

/// Visible devices; 0 when the driver or the GPU is missing. Queried once, never throws.
int device_count();
/// Why device_count() is 0 ("no CUDA-capable device is detected", ...); empty when devices exist.
const char* unavailable_reason();

/// Throws DeviceError naming `op` when `index` is not a visible device.
void check_device_index(int index, const char* op);

/// The calling thread's current device.
int current_device();
/// Makes `index` the current device (cudaSetDevice).
void set_device(int index);

/// Makes a device current for a scope and restores the previous one on exit (no-op when it is
/// already current).
class DeviceGuard {
 public:
  explicit DeviceGuard(int index);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_;
  int index_;
};

/// The device's stream (created on first use; lives until the process exits).
cudaStream_t device_stream(int index);
/// Waits until every operation enqueued on the device's stream has finished.
void synchronize_stream(int index);

}  // namespace precis::cuda
