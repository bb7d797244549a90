#pragma once
// cross_entropy's CPU kernels (ops/cpu/loss.cpp), for a kernel that makes the logits itself, chunk
// by chunk, and runs them on each chunk: linear_cross_entropy's (ops/cpu/linear_cross_entropy.cpp).
// Signatures and contracts: kernels::CrossEntropyKernel and kernels::CrossEntropyWithGradKernel
// (ops/contracts/kernels_loss.h). Instantiated for float and BFloat16.
#include <cstdint>

#include "tensor/tensor.h"

namespace precis::cpu {

template <typename T>
void cross_entropy_kernel(const Tensor& loss_rows, const Tensor& weight_rows, const Tensor& row_stats, const Tensor& x,
                          const Tensor& target, const Tensor& weight, int64_t ignore_index, double label_smoothing);

template <typename T>
void cross_entropy_with_grad_kernel(const Tensor& loss_rows, const Tensor& weight_rows, const Tensor& row_stats,
                                    const Tensor& grad_x, const Tensor& x, const Tensor& target, const Tensor& weight,
                                    const Tensor& grad_rows, int64_t ignore_index, double label_smoothing);

}  // namespace precis::cpu
