// The CUDA backend's init: allocators (core/cuda) and kernels (ops/cuda), called once by
// init_backends(). Safe without a GPU: kernels are registered regardless (they need a device only
// when called), and every CUDA index without a visible device gets an allocator that explains
// the missing device instead of crashing.
#include "core/cuda/cuda_allocator.h"
#include "ops/backends.h"
#include "ops/cuda/cuda_backend.h"

namespace precis::cuda {

void register_cuda_backend() {
  register_allocators();
  register_device_copy();
  register_elementwise_kernels();
  register_unary_kernels();
  register_reduce_kernels();
  register_unscale_kernels();
  register_optim_kernels();
  register_matmul_kernels();
}

}  // namespace precis::cuda
