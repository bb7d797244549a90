#pragma once
// The ops the real CUDA backend has no kernel for, in any dtype: their front-ends compose them
// from other ops on a GPU (the fused CPU passes: GELU epilogues, dropout_add, attention's score
// pass, the chunked and fused losses). The fake CUDA device leaves their slots empty too, so the
// tests running on it take the GPU's composed paths rather than the CPU's fused kernels. A
// [cuda_api] test in every CUDA build (tests/cuda/cuda_kernels_test.cpp) checks this list against
// the real backend's registrations, so it cannot drift.
#include <array>

#include "ops/op_table.h"

namespace precis::fake_cuda_testing {

inline constexpr std::array kCpuOnlyOps = {
    OpId::gelu_epilogue,     OpId::gelu_epilogue_backward, OpId::cross_entropy_with_grad,  OpId::linear_cross_entropy,
    OpId::dropout_add,       OpId::attention_softmax,      OpId::attention_softmax_backward,
};

}  // namespace precis::fake_cuda_testing
