#pragma once
// CUDA devices and streams (internal to the CUDA backend; built only with CUDA on).
//
// Stream model: every device has three streams, created on first use with cudaStreamDefault
// flags ("blocking" streams: each stays ordered with the legacy default stream, so a stray call
// on stream 0 cannot race with precis' work):
//   - compute: kernels, cuBLAS calls and device-to-device copies (the default current stream);
//   - copy: asynchronous host-to-device copies from pinned memory (Tensor::to(dev, true)), so
//     they overlap with compute;
//   - comm: collective communication (NCCL), so it overlaps with the backward pass.
// Kernels go to the calling thread's *current* stream of the device (current_stream; the compute
// stream unless a StreamGuard says otherwise). Work on different streams is ordered only by
// events: `stream_wait(waiter, source)` makes later work on `waiter` wait for what is queued on
// `source` now. Memory crossing streams: the caching allocator ties a block to the stream it was
// allocated on and reuses it, after it is freed, only once every stream recorded with
// record_stream (cuda_allocator.h) has finished the work queued when it was freed.
// The host only waits where it reads device memory (D2H copies, item(), empty_cache); an
// asynchronous D2H copy into pinned memory leaves the wait to the caller (synchronize_device).
//
// This header names no CUDA header: the stream and event types are forward-declared exactly as
// the CUDA runtime declares them, so .cpp files that only need device counts stay free of CUDA
// includes.

typedef struct CUstream_st* cudaStream_t;  // NOLINT: identical to the runtime's own typedef
typedef struct CUevent_st* cudaEvent_t;    // NOLINT: identical to the runtime's own typedef

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
/// cuda::set_device (core/synchronize.h): makes `index` current on the calling thread and the
/// process's home device, which threads that make a context without naming a device (pinned
/// memory for the loader's workers) make current first.
void set_home_device(int index);
/// The device set_home_device named, or -1.
int home_device();

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

/// The device's compute stream: where kernels go unless a StreamGuard makes another current.
cudaStream_t compute_stream(int index);
/// The device's copy stream: asynchronous host-to-device copies from pinned memory.
cudaStream_t copy_stream(int index);
/// The device's communication stream: collectives (NCCL).
cudaStream_t comm_stream(int index);
/// The calling thread's current stream of the device (compute_stream unless a StreamGuard set
/// another): every kernel, cuBLAS call and allocation of the device uses it.
cudaStream_t current_stream(int index);
/// Same as current_stream (the name the kernels' launch code uses).
cudaStream_t device_stream(int index);
/// The device a stream of compute_stream/copy_stream/comm_stream belongs to; -1 for any other
/// stream (e.g. one the user created).
int stream_device(cudaStream_t stream);

/// Makes `stream` (a stream of device `index`) the calling thread's current stream of that
/// device for a scope, and restores the previous one on exit.
class StreamGuard {
 public:
  StreamGuard(int index, cudaStream_t stream);
  ~StreamGuard();
  StreamGuard(const StreamGuard&) = delete;
  StreamGuard& operator=(const StreamGuard&) = delete;

 private:
  int index_;
  cudaStream_t previous_;
};

/// A CUDA event (no timing) of one device, created on construction, destroyed with the object.
///   Event ev(0); ev.record(copy_stream(0)); ev.wait(compute_stream(0));
class Event {
 public:
  explicit Event(int index);
  ~Event();
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  /// Captures the work queued on `stream` (a stream of this event's device) so far.
  void record(cudaStream_t stream);
  /// Makes work queued later on `stream` wait until the recorded work has finished (no host wait).
  void wait(cudaStream_t stream) const;
  /// Whether the recorded work has finished (true for an event never recorded).
  bool query() const;
  /// Blocks the host until the recorded work has finished.
  void synchronize() const;
  cudaEvent_t handle() const { return event_; }
  int device() const { return index_; }

 private:
  int index_;
  cudaEvent_t event_ = nullptr;
};

/// Makes work queued later on `waiter` wait for the work queued now on `source` (both streams of
/// device `index`; an event in between, no host wait).
void stream_wait(int index, cudaStream_t waiter, cudaStream_t source);
/// Waits until every operation enqueued on the device's current stream has finished.
void synchronize_stream(int index);
/// Waits until every operation enqueued on any stream of the device has finished (throws
/// DeviceError naming the device when `index` is not visible); precis::cuda::synchronize.
void synchronize_device(int index);

}  // namespace precis::cuda
