#include "ops/cpu/cpu_backend.h"

namespace precis::cpu {

void register_cpu_kernels() {
  register_copy_kernels();
  register_unary_kernels();
  register_binary_kernels();
  register_reduce_kernels();
  register_linalg_kernels();
  register_index_kernels();
  register_conv_kernels();
  register_pool_kernels();
  register_norm_kernels();
  register_softmax_kernels();
  register_loss_kernels();
  register_linear_cross_entropy_kernels();
  register_dropout_kernels();
  register_dropout_add_kernels();
  register_attention_kernels();
  register_unscale_kernels();
  register_optim_kernels();
  register_clip_kernels();
  register_gelu_epilogue_kernels();
  register_scaled_matmul_kernels();
  register_fp8_cast_kernels();
}

}  // namespace precis::cpu
