// conv2d kernels on the CPU (forward, input gradient, weight and bias gradient). They pick the
// back end per dtype (ops/cpu/conv_impl.h):
//   f32   oneDNN convolution primitives (im2col + Eigen without oneDNN)
//   bf16  oneDNN with bf16 operands and fp32 accumulation; where oneDNN has no bf16 kernel (or is
//         absent), converted to f32 like f16
//   f16   converted to f32 (bulk conversion), the f32 path, rounded back once
//   f64   im2col + Eigen (oneDNN has no f64)
// Channels-last bf16 passes that the fixed shape rule gemm_conv_preferred picks (small maps, weight
// gradients; docs/design/cpu-conv.md) run as im2col + oneDNN matmul (ops/cpu/conv_gemm.cpp).
// Activations come contiguous (NCHW) or all channels-last (NHWC; ops/conv.cpp); weights contiguous.
// oneDNN takes channels-last activations as they are; the other back ends get NCHW copies.
#include "ops/math/conv_plan.h"
#include "ops/cpu/conv_impl.h"
#include "ops/cpu/cpu_backend.h"
#include "ops/cpu/optional_operand.h"
#include "ops/contracts/kernels.h"
#include "ops/contracts/kernels_conv.h"
#include "ops/op_table.h"
#include "tensor/factory.h"

namespace precis::cpu {

ConvShape conv_shape(const Tensor& x, const Tensor& w, const Tensor& out, const kernels::Conv2dParams& p) {
  return {x.size(0), x.size(1), x.size(2), x.size(3), w.size(0), w.size(2), w.size(3), out.size(2), out.size(3), p,
          !x.is_contiguous() || !out.is_contiguous()};
}

namespace {

using kernels::Conv2dParams;

// A contiguous (NCHW) copy of a channels-last activation, for the back ends that take NCHW only.
Tensor nchw_copy(const Tensor& t) {
  if (!t.defined() || t.is_contiguous()) return t;
  Tensor out = empty(t.sizes(), {.dtype = t.dtype()});
  kernel<kernels::CopyKernel>(OpId::copy, DeviceType::cpu, t.dtype())(out, t);
  return out;
}
Tensor nchw_like(const Tensor& t) { return t.defined() ? empty(t.sizes(), {.dtype = t.dtype()}) : Tensor(); }

Tensor to_f32(const Tensor& t) {
  if (!t.defined()) return t;
  Tensor out = empty(t.sizes(), {.dtype = DType::f32});
  kernel<kernels::CopyKernel>(OpId::copy, DeviceType::cpu, DType::f32)(out, t);
  return out;
}

void copy_into(const Tensor& dst, const Tensor& src) {
  if (dst.defined()) kernel<kernels::CopyKernel>(OpId::copy, DeviceType::cpu, dst.dtype())(dst, src);
}

Tensor f32_like(const Tensor& t) { return t.defined() ? empty(t.sizes(), {.dtype = DType::f32}) : Tensor(); }

// The problem shape of a backward call, whose x or w may be undefined (not needed).
ConvShape backward_shape(const Tensor& grad_x, const Tensor& grad_w, const Tensor& grad_out, const Tensor& x,
                         const Tensor& w, const Conv2dParams& p) {
  return conv_shape(grad_x.defined() ? grad_x : x, grad_w.defined() ? grad_w : w, grad_out, p);
}

// ---- the f32 and f64 paths -------------------------------------------------------------------

template <typename T>
void forward(const Tensor& out, const Tensor& x, const Tensor& w, const Tensor& bias, const Conv2dParams& p) {
  const ConvShape s = conv_shape(x, w, out, p);
#ifdef PRECIS_HAS_ONEDNN
  if constexpr (std::is_same_v<T, float>)
    if (onednn_conv_forward(DType::f32, s, x.data_ptr(), w.data_ptr(), raw_ptr_or_null(bias), out.data_ptr())) return;
#endif
  im2col_conv_forward<T>(s, x.data_ptr<T>(), w.data_ptr<T>(), ptr_or_null<T>(bias), out.data_ptr<T>());
}

// The wanted gradients (defined outputs) of the f32 or f64 problem.
template <typename T>
void backward(const Tensor& grad_x, const Tensor& grad_w, const Tensor& grad_bias, const Tensor& grad_out,
              const Tensor& x, const Tensor& w, const Conv2dParams& p) {
  const ConvShape s = backward_shape(grad_x, grad_w, grad_out, x, w, p);
#ifdef PRECIS_HAS_ONEDNN
  if constexpr (std::is_same_v<T, float>)
    if (onednn_conv_backward(DType::f32, s, grad_out.data_ptr(), raw_ptr_or_null(x), raw_ptr_or_null(w), raw_ptr_or_null(grad_x),
                             raw_ptr_or_null(grad_w), raw_ptr_or_null(grad_bias)))
      return;
#endif
  if (grad_x.defined()) im2col_conv_backward_input<T>(s, grad_out.data_ptr<T>(), w.data_ptr<T>(), grad_x.data_ptr<T>());
  if (grad_w.defined())
    im2col_conv_backward_weight<T>(s, grad_out.data_ptr<T>(), x.data_ptr<T>(), grad_w.data_ptr<T>(),
                                   mut_ptr_or_null<T>(grad_bias));
}

// ---- the kernels: low precision via oneDNN bf16 or via f32 -------------------------------------

// out: (N, O, Ho, Wo) = conv(x: (N, C, H, W), w: (O, C/g, kH, kW)) + bias: (O).
template <typename T>
void conv2d_kernel(const Tensor& out, const Tensor& x, const Tensor& w, const Tensor& bias, const Conv2dParams& p) {
  const ConvShape s = conv_shape(x, w, out, p);
  if (s.nhwc) {
#ifdef PRECIS_HAS_ONEDNN
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, BFloat16>) {
      if (gemm_conv_preferred(dtype_of<T>(), s, ConvPass::forward) &&
          gemm_conv_forward(dtype_of<T>(), s, x.data_ptr(), w.data_ptr(), raw_ptr_or_null(bias), out.data_ptr()))
        return;
      if (onednn_conv_forward(dtype_of<T>(), s, x.data_ptr(), w.data_ptr(), raw_ptr_or_null(bias), out.data_ptr()))
        return;
    }
#endif
    const Tensor out_c = nchw_like(out);
    conv2d_kernel<T>(out_c, nchw_copy(x), w, bias, p);
    copy_into(out, out_c);
    return;
  }
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
    forward<T>(out, x, w, bias, p);
  } else {
#ifdef PRECIS_HAS_ONEDNN
    if constexpr (std::is_same_v<T, BFloat16>)
      if (onednn_conv_forward(DType::bf16, conv_shape(x, w, out, p), x.data_ptr(), w.data_ptr(),
                              raw_ptr_or_null(bias), out.data_ptr()))
        return;
#endif
    Tensor out_f = f32_like(out);
    forward<float>(out_f, to_f32(x), to_f32(w), to_f32(bias), p);
    copy_into(out, out_f);
  }
}

// grad_x: (N, C, H, W), grad_w: (O, C/g, kH, kW), grad_bias: (O), each when defined, from
// grad_out: (N, O, Ho, Wo), x and w; weight and bias gradients sum over the batch in fp32 (f64 for
// f64).
template <typename T>
void conv2d_backward_kernel(const Tensor& grad_x, const Tensor& grad_w, const Tensor& grad_bias,
                            const Tensor& grad_out, const Tensor& x, const Tensor& w, const Conv2dParams& p) {
  const ConvShape s = backward_shape(grad_x, grad_w, grad_out, x, w, p);
  if (s.nhwc) {
    // The gradients still to compute: the GEMM route takes the passes its shape rule picks, the
    // convolution primitives (or the fallback) the rest.
    Tensor gx = grad_x, gw = grad_w, gb = grad_bias;
#ifdef PRECIS_HAS_ONEDNN
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, BFloat16>) {
      constexpr DType dt = dtype_of<T>();
      if (gx.defined() && gemm_conv_preferred(dt, s, ConvPass::backward_input) &&
          gemm_conv_backward_input(dt, s, grad_out.data_ptr(), w.data_ptr(), gx.data_ptr()))
        gx = Tensor();
      if (gw.defined() && gemm_conv_preferred(dt, s, ConvPass::backward_weight) &&
          gemm_conv_backward_weight(dt, s, grad_out.data_ptr(), x.data_ptr(), gw.data_ptr(), raw_ptr_or_null(gb))) {
        gw = Tensor();
        gb = Tensor();
      }
      if (!gx.defined() && !gw.defined()) return;
      if (onednn_conv_backward(dt, s, grad_out.data_ptr(), raw_ptr_or_null(x), raw_ptr_or_null(w),
                               raw_ptr_or_null(gx), raw_ptr_or_null(gw), raw_ptr_or_null(gb)))
        return;
    }
#endif
    const Tensor gx_c = nchw_like(gx);
    conv2d_backward_kernel<T>(gx_c, gw, gb, nchw_copy(grad_out), nchw_copy(x), w, p);
    copy_into(gx, gx_c);
    return;
  }
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
    backward<T>(grad_x, grad_w, grad_bias, grad_out, x, w, p);
  } else {
#ifdef PRECIS_HAS_ONEDNN
    if constexpr (std::is_same_v<T, BFloat16>)
      if (onednn_conv_backward(DType::bf16, backward_shape(grad_x, grad_w, grad_out, x, w, p), grad_out.data_ptr(),
                               raw_ptr_or_null(x), raw_ptr_or_null(w), raw_ptr_or_null(grad_x), raw_ptr_or_null(grad_w), raw_ptr_or_null(grad_bias)))
        return;
#endif
    Tensor gx_f = f32_like(grad_x), gw_f = f32_like(grad_w), gb_f = f32_like(grad_bias);
    backward<float>(gx_f, gw_f, gb_f, to_f32(grad_out), grad_w.defined() ? to_f32(x) : Tensor(),
                    grad_x.defined() ? to_f32(w) : Tensor(), p);
    copy_into(grad_x, gx_f);
    copy_into(grad_w, gw_f);
    copy_into(grad_bias, gb_f);
  }
}

template <typename T>
void register_for() {
  constexpr DType dt = dtype_of<T>();
  register_kernel<kernels::Conv2dKernel>(OpId::conv2d, DeviceType::cpu, dt, &conv2d_kernel<T>);
  register_kernel<kernels::Conv2dBackwardKernel>(OpId::conv2d_backward, DeviceType::cpu, dt,
                                                 &conv2d_backward_kernel<T>);
}

}  // namespace

void register_conv_kernels() {
  register_for<float>();
  register_for<double>();
  register_for<Half>();
  register_for<BFloat16>();
}

}  // namespace precis::cpu
