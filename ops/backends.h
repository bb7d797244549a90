#pragma once
// The backends' init calls, made once by init_backends() (ops/op_table.cpp).

namespace precis {
namespace cpu {
void register_cpu_kernels();
}
#ifdef PRECIS_HAS_CUDA
namespace cuda {
/// Registers the CUDA allocators (one per visible device) and the CUDA kernels. Does nothing
/// harmful when no GPU is present: kernels are registered, allocators report the missing device.
void register_cuda_backend();
}  // namespace cuda
#endif
}  // namespace precis

namespace precis {
class Tensor;
/// Copies between devices (host↔device, device↔device). dst and src: same shape and dtype, both
/// contiguous. non_blocking: a host-to-device copy from pinned memory may stay queued on the
/// device's copy stream (Tensor::to). Provided by the CUDA backend; absent in a CPU-only build.
using DeviceCopyFn = void(const Tensor& dst, const Tensor& src, bool non_blocking);
void set_device_copy(DeviceCopyFn* fn);
DeviceCopyFn* device_copy();
}  // namespace precis
