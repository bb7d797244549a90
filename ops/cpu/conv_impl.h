#pragma once
// The CPU convolution back ends behind the conv2d kernels (ops/cpu/conv.cpp): oneDNN's
// convolution primitives (ops/cpu/conv_onednn.cpp) and im2col + Eigen GEMM
// (ops/cpu/conv_im2col.cpp). Internal to ops/cpu; includes neither library's headers.
#include <cstdint>

#include "core/dtype.h"
#include "ops/kernels_conv.h"

namespace precis::cpu {

/// One convolution problem: x: (n, c, h, w), w: (o, c / groups, kh, kw), out: (n, o, ho, wo). The
/// weight is contiguous; the activations (x, out and their gradients) are all contiguous NCHW, or,
/// with nhwc, all channels-last (their (n, h, w, c) permutation contiguous).
struct ConvShape {
  int64_t n, c, h, w, o, kh, kw, ho, wo;
  kernels::Conv2dParams p;
  bool nhwc = false;
};

/// The shape of the problem out = conv(x, w) (tensors as the Conv2dKernel documents).
ConvShape conv_shape(const Tensor& x, const Tensor& w, const Tensor& out, const kernels::Conv2dParams& p);

#ifdef PRECIS_HAS_ONEDNN
// oneDNN convolution (activations NCHW or, with s.nhwc, channels-last: then the primitives work on
// them in place, no reorder) (f32, or bf16 with fp32 accumulation). Each returns false, computing nothing,
// when oneDNN has no fast implementation for the dtype and shape on this CPU; the caller falls back.
bool onednn_conv_forward(DType dtype, const ConvShape& s, const void* x, const void* w, const void* bias, void* out);
/// The gradients wanted (non-null outputs; grad_bias only with grad_w) from grad_out, x (read only
/// for grad_w) and w (only for grad_x). False, computing nothing, unless every wanted pass has a
/// fast implementation.
bool onednn_conv_backward(DType dtype, const ConvShape& s, const void* grad_out, const void* x, const void* w,
                          void* grad_x, void* grad_w, void* grad_bias);
#endif

// im2col + Eigen GEMM (NCHW activations only), for float and double (accumulating in T), split over the intra-op pool by
// batch entries. grad_bias may be null.
template <typename T>
void im2col_conv_forward(const ConvShape& s, const T* x, const T* w, const T* bias, T* out);
template <typename T>
void im2col_conv_backward_input(const ConvShape& s, const T* grad_out, const T* w, T* grad_x);
template <typename T>
void im2col_conv_backward_weight(const ConvShape& s, const T* grad_out, const T* x, T* grad_w, T* grad_bias);

}  // namespace precis::cpu
