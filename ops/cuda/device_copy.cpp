// Copies between the host and CUDA devices, and between devices (set_device_copy). dst and src:
// same shape and dtype, both contiguous (Tensor::copy_ arranges that).
//
// Synchronisation: host→device waits for the copy before returning, because the host block may
// be freed and reused by the CPU allocator as soon as the caller returns (from pinned memory the
// copy is truly asynchronous); device→host waits because the host reads the result next.
// device→device on one device stays asynchronous on its stream. Between two devices the copy runs
// on the destination's stream after an event from the source's stream, and the source's stream
// then waits for the copy, so neither allocator can hand either block out while it is in flight.
#include <cuda_runtime_api.h>

#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_context.h"
#include "ops/backends.h"
#include "ops/cuda/cuda_backend.h"

namespace precis::cuda {

namespace {

/// Makes `waiter`'s stream wait for everything queued so far on `source`'s stream.
void stream_wait(int waiter, int source) {
  cudaEvent_t ev = nullptr;
  {
    DeviceGuard guard(source);
    PRECIS_CUDA_CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming), "creating a copy event on cuda:", source);
    PRECIS_CUDA_CHECK(cudaEventRecord(ev, device_stream(source)), "recording a copy event on cuda:", source);
  }
  DeviceGuard guard(waiter);
  PRECIS_CUDA_CHECK(cudaStreamWaitEvent(device_stream(waiter), ev, 0), "cuda:", waiter, " waiting for cuda:", source);
  // Destroying a recorded event is safe: resources are released once it completes.
  PRECIS_CUDA_CHECK(cudaEventDestroy(ev), "destroying a copy event");
}

void device_copy(const Tensor& dst, const Tensor& src) {
  PRECIS_CHECK_SHAPE(dst.sizes() == src.sizes() && dst.dtype() == src.dtype() && dst.is_contiguous() &&
                         src.is_contiguous(),
                     "device copy: expects contiguous tensors of one shape and dtype; got dst ", dst.describe(),
                     ", src ", src.describe());
  const size_t bytes = static_cast<size_t>(dst.numel()) * dst.element_size();
  const Device d = dst.device(), s = src.device();
  const std::string what = src.describe() + " -> " + dst.describe();
  if (bytes == 0) {
    if (d.is_cuda()) check_device_index(d.index, "copy");
    if (s.is_cuda()) check_device_index(s.index, "copy");
    return;
  }
  if (s.is_cpu() && d.is_cuda()) {
    check_device_index(d.index, "copy");
    DeviceGuard guard(d.index);
    cudaStream_t stream = device_stream(d.index);
    PRECIS_CUDA_CHECK(cudaMemcpyAsync(dst.data_ptr(), src.data_ptr(), bytes, cudaMemcpyHostToDevice, stream),
                      "copy ", what);
    PRECIS_CUDA_CHECK(cudaStreamSynchronize(stream), "copy ", what);
  } else if (s.is_cuda() && d.is_cpu()) {
    check_device_index(s.index, "copy");
    DeviceGuard guard(s.index);
    cudaStream_t stream = device_stream(s.index);
    PRECIS_CUDA_CHECK(cudaMemcpyAsync(dst.data_ptr(), src.data_ptr(), bytes, cudaMemcpyDeviceToHost, stream),
                      "copy ", what);
    PRECIS_CUDA_CHECK(cudaStreamSynchronize(stream), "copy ", what);
  } else if (s.is_cuda() && d.is_cuda()) {
    check_device_index(s.index, "copy");
    check_device_index(d.index, "copy");
    if (s.index == d.index) {
      DeviceGuard guard(d.index);
      PRECIS_CUDA_CHECK(cudaMemcpyAsync(dst.data_ptr(), src.data_ptr(), bytes, cudaMemcpyDeviceToDevice,
                                        device_stream(d.index)),
                        "copy ", what);
    } else {
      stream_wait(d.index, s.index);
      {
        DeviceGuard guard(d.index);
        PRECIS_CUDA_CHECK(cudaMemcpyPeerAsync(dst.data_ptr(), d.index, src.data_ptr(), s.index, bytes,
                                              device_stream(d.index)),
                          "copy ", what);
      }
      stream_wait(s.index, d.index);
    }
  } else {
    throw InternalError("device copy called for " + what + " (a CPU-to-CPU copy does not come here)");
  }
}

}  // namespace

void register_device_copy() { set_device_copy(&device_copy); }

}  // namespace precis::cuda
