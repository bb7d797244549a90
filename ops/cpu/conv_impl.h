#pragma once
// The CPU convolution back ends behind the conv2d kernels (ops/cpu/conv.cpp): oneDNN's
// convolution primitives (ops/cpu/conv_onednn.cpp) and im2col + Eigen GEMM
// (ops/cpu/conv_im2col.cpp). Internal to ops/cpu; includes neither library's headers.
#include <cstdint>

#include "core/dtype.h"
#include "ops/contracts/kernels_conv.h"

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

/// Whether onednn_conv_backward computes the input gradient as a forward convolution of grad_out
/// by the flipped, channel-swapped weights (stride 1, oneDNN 2.x only: 3.x does so itself;
/// ops/cpu/conv_onednn.cpp has the measurements), and how many times it has (for tests).
bool onednn_input_gradient_as_forward(const ConvShape& s);
int64_t onednn_input_gradients_as_forward_run();
/// How many convolution passes (forward, input or weight gradient) ran on oneDNN's Winograd
/// kernels (conv_onednn.cpp, "Winograd"), for tests.
int64_t onednn_winograd_passes_run();
/// oneDNN's major version precis is built against (2: Debian 12's 2.6; 3: PyPI's onednn-cpu-gomp).
int onednn_major_version();

/// The passes of a training step.
enum class ConvPass { forward, backward_input, backward_weight };

// im2col + oneDNN matmul on channels-last activations (ops/cpu/conv_gemm.cpp): f32 and bf16; bf16
// operands accumulate in fp32 inside the GEMM (the input gradient's column matrix stays fp32 and
// col2im sums in fp32), each result rounded once. Applies to s.nhwc problems with groups 1 and dilation 1 (gemm_conv_applies); each returns
// false, computing nothing it has not overwritten anyway, when it does not apply or oneDNN's
// matmul has no fast kernel (the caller then runs the convolution primitives).
bool gemm_conv_applies(DType dtype, const ConvShape& s);
bool gemm_conv_forward(DType dtype, const ConvShape& s, const void* x, const void* w, const void* bias, void* out);
bool gemm_conv_backward_input(DType dtype, const ConvShape& s, const void* grad_out, const void* w, void* grad_x);
/// grad_bias may be null.
bool gemm_conv_backward_weight(DType dtype, const ConvShape& s, const void* grad_out, const void* x, void* grad_w,
                               void* grad_bias);
/// How many passes the GEMM route has computed in this process (for tests: proof of routing).
int64_t gemm_conv_passes_run();
/// Whether the CPU is the kind the GEMM route's shape rule was measured on (AVX-512 with AMX bf16).
bool gemm_conv_rule_active();
/// The fixed shape rule choosing the GEMM route over oneDNN's convolution for one pass (no
/// autotuning; derived from benchmarks/tools/conv_gemm_probe.cpp, figures in
/// docs/design/cpu-conv.md): bf16 only, when gemm_conv_applies, on an AMX CPU, and
///   every pass         when the output map Ho·Wo <= 16 (ResNet's 4×4 stage),
///   backward weight    also when Ho·Wo <= 64, or for a 1×1 kernel at any size.
bool gemm_conv_preferred(DType dtype, const ConvShape& s, ConvPass pass);
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
