// The op-table entry of scaled_fp8_cast on CUDA devices (Fp8ScaledCastKernel,
// ops/contracts/kernels.h): the front-end (ops/scaled_matmul.cpp) has checked and laid out the
// operands; this passes them to the launch in fp8_cast.cu on the device's stream.
#include "core/cuda/cuda_context.h"
#include "ops/contracts/kernels.h"
#include "ops/cuda/cuda_backend.h"
#include "ops/cuda/cuda_kernels.h"
#include "ops/op_table.h"

namespace precis::cuda {

namespace {

// out: (n) contiguous fp8; x: (n) contiguous floating; scale, amax: 0-d f32; one CUDA device.
void fp8_scaled_cast_kernel(const Tensor& out, const Tensor& amax, const Tensor& x, const Tensor& scale) {
  const Device dev = x.device();
  DeviceGuard guard(dev.index);
  launch_fp8_scaled_cast(x.dtype(), out.data_ptr(), static_cast<float*>(amax.data_ptr()), x.data_ptr(), x.numel(),
                         static_cast<const float*>(scale.data_ptr()), out.dtype() == DType::f8_e4m3,
                         device_stream(dev.index));
}

}  // namespace

void register_fp8_cast_kernels() {
  for (DType dt : {DType::f32, DType::f64, DType::f16, DType::bf16})
    register_kernel<kernels::Fp8ScaledCastKernel>(OpId::fp8_scaled_cast, DeviceType::cuda, dt,
                                                  &fp8_scaled_cast_kernel);
}

}  // namespace precis::cuda
