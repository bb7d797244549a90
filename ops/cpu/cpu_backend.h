#pragma once
// Registration entry points of the CPU kernel families; register_cpu_kernels() calls them all.

namespace precis::cpu {

void register_copy_kernels();       // copy, fill
void register_unary_kernels();      // neg ... pow_scalar, erf, relu/gelu backward
void register_binary_kernels();     // add ... ge, where, masked_fill
void register_reduce_kernels();     // sum, mean, max, var
void register_linalg_kernels();     // matmul, linear
void register_index_kernels();      // cat, index_select, gather, index_add, scatter_add
void register_conv_kernels();       // conv2d and its backward kernels
void register_pool_kernels();       // max/avg/adaptive_avg pool2d and their backward kernels
void register_norm_kernels();       // batch_norm, layer_norm, group_norm (+ backward)
void register_softmax_kernels();    // softmax, log_softmax (+ backward)
void register_loss_kernels();       // cross_entropy(+_backward), nll_loss
void register_linear_cross_entropy_kernels();  // linear_cross_entropy (oneDNN builds)
void register_dropout_kernels();    // dropout
void register_dropout_add_kernels();  // dropout_add
void register_attention_kernels();  // attention_softmax (+ backward)
void register_unscale_kernels();    // unscale_grads (amp)
void register_optim_kernels();      // sgd_step, adam_step
void register_clip_kernels();       // grad_norms, clip_grad_norm, clip_grad_value
void register_gelu_epilogue_kernels();  // gelu_epilogue(+_backward) (linear_gelu)
void register_scaled_matmul_kernels();  // scaled_matmul (fp8)
void register_fp8_cast_kernels();       // fp8_scaled_cast

void register_cpu_kernels();

}  // namespace precis::cpu
