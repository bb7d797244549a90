// The CUDA backend's init: its kernels (ops/cuda) and the profiler's device clock, registered once
// by init_cuda_kernels() (ops/op_table.cpp) when libprecis loads this library. Safe without a GPU: kernels and the clock are registered regardless (they need
// a device only when called). The allocators are core's: allocator_for registers them on the
// first request for a CUDA device.
#include "ops/cuda/cuda_backend.h"

namespace precis::cuda {

void register_cuda_backend() {
  register_device_copy();
  register_elementwise_kernels();
  register_unary_kernels();
  register_reduce_kernels();
  register_norm_kernels();
  register_softmax_kernels();
  register_loss_kernels();
  register_unscale_kernels();
  register_optim_kernels();
  register_matmul_kernels();
  register_index_kernels();
  register_pool_kernels();
  register_dropout_kernels();
#ifdef PRECIS_HAS_CUDNN
  register_conv_kernels();
#endif
  register_linear_kernels();
  register_scaled_matmul_kernels();
  register_fp8_cast_kernels();
  register_device_timer();
}

}  // namespace precis::cuda

// The entry point init_cuda_kernels() (ops/op_table.cpp) looks up when libprecis loads this library.
extern "C" void precis_cuda_register_kernels() { precis::cuda::register_cuda_backend(); }
