#pragma once
// The backends' init calls. The CPU's is made once by init_backends() (ops/op_table.cpp); the CUDA
// backend is a library of its own (core/cuda_backend.h) whose exported
// `precis_cuda_register_kernels` init_cuda_kernels() calls once, on the first CUDA kernel lookup.

namespace precis {
namespace cpu {
void register_cpu_kernels();
}
/// Loads the CUDA backend (core/cuda_backend.h) and registers its kernels and device copy, once.
/// False when it cannot be loaded (cuda_backend_unavailable_reason() says why). Never throws.
bool init_cuda_kernels();
}  // namespace precis

namespace precis {
class Tensor;
/// Copies between devices (host↔device, device↔device). dst and src: same shape and dtype, both
/// contiguous. non_blocking: a host-to-device copy from pinned memory may stay queued on the
/// device's copy stream (Tensor::to). Provided by the CUDA backend; absent until it is loaded.
using DeviceCopyFn = void(const Tensor& dst, const Tensor& src, bool non_blocking);
void set_device_copy(DeviceCopyFn* fn);
DeviceCopyFn* device_copy();
}  // namespace precis
