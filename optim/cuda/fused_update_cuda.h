#pragma once
// CUDA multi-tensor-apply launchers for the fused optimizer updates (optim/cuda/fused_update.cu).
// Internal; only built with PRECIS_HAS_CUDA. All tensors of one call share the parameter and
// gradient dtypes and live on CUDA device `device`; the work is queued on that device's stream
// (core/cuda/cuda_context.h), in order with the backend's other kernels, with no host
// synchronisation: the step counters and found_inf are read by the kernels.
#include "optim/fused_update.h"

namespace precis::optim::detail {

void sgd_update_cuda(int device, const SgdTensor* tensors, int count, int param_dtype, int grad_dtype, const SgdHyper& h,
                     const ScalerArgs& s);
void adam_update_cuda(int device, const AdamTensor* tensors, int count, int param_dtype, int grad_dtype, const AdamHyper& h,
                      const ScalerArgs& s);

}  // namespace precis::optim::detail
