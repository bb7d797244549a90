// Copies between the host and CUDA devices, and between devices (set_device_copy). dst and src:
// same shape and dtype, both contiguous (Tensor::copy_ arranges that).
//
// Synchronisation: host→device from pinned memory with non_blocking is asynchronous: it runs on
// the device's copy stream behind an event from the current stream (the destination block may
// still be in use by work queued there before it was freed), the current stream then waits for
// the copy (so every later kernel sees the data), and the source block is recorded with the copy
// stream so that the pinned allocator does not hand it out before the copy has read it. Any other
// host→device copy waits before returning, because the host block may be freed and reused by the
// CPU allocator as soon as the caller returns. device→host into pinned memory with non_blocking
// stays queued on the current stream (the caller reads the result after
// precis::cuda::synchronize); any other device→host copy waits because the host reads the result
// next. device→device on one device stays asynchronous on its current stream. Between two
// devices the copy runs on the destination's stream after an event from the source's stream,
// and the source's stream then waits for the copy, so neither allocator can hand either block
// out while it is in flight.
#include <cuda_runtime_api.h>

#include "core/cuda/cuda_allocator.h"
#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_context.h"
#include "core/sync_debug.h"
#include "ops/backends.h"
#include "ops/cuda/cuda_backend.h"

namespace precis::cuda {

namespace {

/// Makes device `waiter`'s current stream wait for everything queued so far on device `source`'s.
void device_wait(int waiter, int source) {
  Event ev(source);
  ev.record(current_stream(source));
  ev.wait(current_stream(waiter));
}

void device_copy(const Tensor& dst, const Tensor& src, bool non_blocking) {
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
  if (s.is_cpu() && d.is_cuda() && non_blocking && src.is_pinned()) {
    check_device_index(d.index, "copy");
    DeviceGuard guard(d.index);
    cudaStream_t compute = current_stream(d.index);
    cudaStream_t copy = copy_stream(d.index);
    stream_wait(d.index, copy, compute);
    PRECIS_CUDA_CHECK(cudaMemcpyAsync(dst.data_ptr(), src.data_ptr(), bytes, cudaMemcpyHostToDevice, copy),
                      "asynchronous copy ", what);
    record_stream(src.data_ptr(), /*pinned*/ -1, copy);
    stream_wait(d.index, compute, copy);
  } else if (s.is_cpu() && d.is_cuda()) {
    check_device_index(d.index, "copy");
    DeviceGuard guard(d.index);
    cudaStream_t stream = device_stream(d.index);
    precis::detail::note_host_sync("a host-to-device copy from pageable memory (pin the source with pin_memory() "
                                   "and copy with non_blocking)");
    PRECIS_CUDA_CHECK(cudaMemcpyAsync(dst.data_ptr(), src.data_ptr(), bytes, cudaMemcpyHostToDevice, stream),
                      "copy ", what);
    PRECIS_CUDA_CHECK(cudaStreamSynchronize(stream), "copy ", what);
  } else if (s.is_cuda() && d.is_cpu() && non_blocking && dst.is_pinned()) {
    // Queued on the current stream, the one that produced src and that later in-place writers of
    // src use: a copy stream would have to make it wait for the copy anyway. The pinned block is
    // recorded with the stream, so if the caller drops it before synchronising, the pinned
    // allocator does not hand it out while the copy may still write it.
    check_device_index(s.index, "copy");
    DeviceGuard guard(s.index);
    cudaStream_t stream = current_stream(s.index);
    PRECIS_CUDA_CHECK(cudaMemcpyAsync(dst.data_ptr(), src.data_ptr(), bytes, cudaMemcpyDeviceToHost, stream),
                      "asynchronous copy ", what);
    if (dst.storage()->allocator() == &pinned_allocator())  // pinned memory of another origin is the caller's
      record_stream(dst.data_ptr(), /*pinned*/ -1, stream);
  } else if (s.is_cuda() && d.is_cpu()) {
    check_device_index(s.index, "copy");
    DeviceGuard guard(s.index);
    cudaStream_t stream = device_stream(s.index);
    precis::detail::note_host_sync("a device-to-host copy");
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
      device_wait(d.index, s.index);
      {
        DeviceGuard guard(d.index);
        PRECIS_CUDA_CHECK(cudaMemcpyPeerAsync(dst.data_ptr(), d.index, src.data_ptr(), s.index, bytes,
                                              device_stream(d.index)),
                          "copy ", what);
      }
      device_wait(s.index, d.index);
    }
  } else {
    throw InternalError("device copy called for " + what + " (a CPU-to-CPU copy does not come here)");
  }
}

}  // namespace

void register_device_copy() { set_device_copy(&device_copy); }

}  // namespace precis::cuda
