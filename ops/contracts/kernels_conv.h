#pragma once
// Kernel signatures of the convolution and pooling family, shared by every backend (see
// ops/contracts/kernels.h for the conventions). The functional code (ops/conv.cpp, ops/pool.cpp) checks the
// operands, makes them contiguous and 4-D (N, C, H, W) and allocates contiguous outputs; kernels
// only compute. Keyed by the input's dtype; f16/bf16 compute in fp32, f64 in f64.
#include <cstdint>

#include "tensor/tensor.h"

namespace precis::kernels {

/// Geometry of a 2-D convolution: [0] is the height, [1] the width. All strides and dilations
/// >= 1, paddings >= 0, groups >= 1 dividing both channel counts.
struct Conv2dParams {
  int64_t stride[2] = {1, 1};
  int64_t padding[2] = {0, 0};
  int64_t dilation[2] = {1, 1};
  int64_t groups = 1;
};

/// out = conv(x, w) + bias. x: (N, C, H, W), w: (O, C/groups, kH, kW), bias: (O) or undefined,
/// out: (N, O, Ho, Wo); all contiguous, one dtype. Accumulates in fp32 (f64 for f64). CUDA
/// kernels also take x, w and out all channels-last (NHWC-dense strides, see ops/math/conv_plan.h),
/// which conv2d passes on CUDA devices for a channels-last input; bias is always contiguous.
using Conv2dKernel = void(const Tensor& out, const Tensor& x, const Tensor& w, const Tensor& bias,
                          const Conv2dParams& p);
/// The gradients of conv from grad_out: (N, O, Ho, Wo): grad_x: (N, C, H, W) (needs w),
/// grad_w: (O, C/groups, kH, kW) (needs x) and grad_bias: (O). Outputs left undefined are not
/// computed; grad_bias only together with grad_w; inputs a wanted output does not need may be
/// undefined. All contiguous; outputs are overwritten (grad_w and grad_bias sum over the batch in
/// fp32, f64 for f64). On CUDA all 4-D operands may instead be channels-last, as for
/// Conv2dKernel. One kernel for all three, as oneDNN's backward passes share grad_out's
/// reorder into their blocked layout.
using Conv2dBackwardKernel = void(const Tensor& grad_x, const Tensor& grad_w, const Tensor& grad_bias,
                                  const Tensor& grad_out, const Tensor& x, const Tensor& w, const Conv2dParams& p);

/// Geometry of a 2-D pooling window. The output size is computed by the caller (ceil_mode is
/// already applied); windows may reach past the padded input on the bottom/right in ceil mode.
struct Pool2dParams {
  int64_t kernel[2] = {1, 1};
  int64_t stride[2] = {1, 1};
  int64_t padding[2] = {0, 0};
  int64_t dilation[2] = {1, 1};   // max pooling only
  bool count_include_pad = true;  // avg pooling only
  int64_t divisor_override = 0;   // avg pooling only; 0: none
};

/// out: (N, C, Ho, Wo) = the maximum of each window of x: (N, C, H, W); indices (i64, same shape as
/// out, or undefined when not wanted) = the flat position h·W + w of the maximum in its plane.
/// NaN propagates (a NaN in a window is the result). Contiguous.
using MaxPool2dKernel = void(const Tensor& out, const Tensor& indices, const Tensor& x, const Pool2dParams& p);
/// grad_x: (N, C, H, W) (overwritten) = grad_out: (N, C, Ho, Wo) added at indices. Contiguous.
/// p: the forward's window. A kernel that scatters along the indices does not need it; one that
/// gathers (each input element reads the outputs whose windows cover it, as on CUDA) does.
using MaxPool2dBackwardKernel = void(const Tensor& grad_x, const Tensor& grad_out, const Tensor& indices,
                                     const Pool2dParams& p);
/// out: (N, C, Ho, Wo) = the mean of each window of x: (N, C, H, W) (divisor per Pool2dParams, as
/// PyTorch); accumulates in fp32 (f64 for f64). Contiguous.
using AvgPool2dKernel = void(const Tensor& out, const Tensor& x, const Pool2dParams& p);
/// grad_x: (N, C, H, W) (overwritten) from grad_out: (N, C, Ho, Wo). Contiguous.
using AvgPool2dBackwardKernel = void(const Tensor& grad_x, const Tensor& grad_out, const Pool2dParams& p);
/// out: (N, C, Ho, Wo) = the mean of x: (N, C, H, W) over the windows [floor(i·H/Ho), ceil((i+1)·H/Ho))
/// (same along W). Contiguous; accumulates in fp32 (f64 for f64).
using AdaptiveAvgPool2dKernel = void(const Tensor& out, const Tensor& x);
/// grad_x: (N, C, H, W) (overwritten) from grad_out: (N, C, Ho, Wo). Contiguous.
using AdaptiveAvgPool2dBackwardKernel = void(const Tensor& grad_x, const Tensor& grad_out);

}  // namespace precis::kernels
