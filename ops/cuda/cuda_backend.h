#pragma once
// Host-side pieces of the CUDA backend shared by ops/cuda/*.cpp (internal; CUDA builds only).
#include <initializer_list>

#include "ops/cuda/cuda_kernels.h"
#include "tensor/tensor.h"

namespace precis::cuda {

/// Launch description for an element-wise kernel over out's shape. `operands` starts with the
/// output; inputs are already expanded to out's shape. Checks that every operand is on out's CUDA
/// device, detects the contiguous fast path, otherwise coalesces dims (drops size-1 dims, merges
/// dims that are contiguous in every operand) into an OffsetCalc of at most kMaxKernelDims dims.
ElementwiseLaunch make_elementwise_launch(const char* op, std::initializer_list<const Tensor*> operands);

/// Registers the kernels below and the device copy (precis_cuda_register_kernels, ops/cuda/register.cpp).
void register_cuda_backend();
void register_elementwise_kernels();  // copy, fill, add ... ge, where, masked_fill
void register_unary_kernels();        // neg ... erf, relu_backward, gelu_backward
void register_reduce_kernels();       // sum, mean, var, max along a dim
void register_norm_kernels();         // batch/layer/group norm
void register_softmax_kernels();      // softmax, log_softmax and their backward
void register_loss_kernels();         // cross_entropy (+ backward), nll_loss
void register_unscale_kernels();      // unscale_grads (the loss scaler's fused pass)
void register_optim_kernels();        // sgd_step, adam_step, grad_norms, clip_grad_norm, clip_grad_value
void register_matmul_kernels();       // matmul (cuBLAS)
void register_conv_kernels();         // conv2d, conv2d_backward (cuDNN; only when built with it)
void register_linear_kernels();       // linear (cuBLASLt, bias epilogue)
void register_scaled_matmul_kernels();  // scaled_matmul (cuBLASLt fp8)
void register_fp8_cast_kernels();       // fp8_scaled_cast
void register_device_copy();          // set_device_copy: H2D, D2H, D2D
void register_index_kernels();        // cat, index_select, gather, index_add, scatter_add
void register_pool_kernels();         // max/avg/adaptive_avg pooling and their backward passes
void register_dropout_kernels();      // dropout (the CPU's Philox mask)
void register_device_timer();         // the profiler's device clock (CUDA events; ops/device_timer.h)

}  // namespace precis::cuda
