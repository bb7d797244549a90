// conv2d: operand checks, output geometry, unbatched input, and the backward (input, weight and
// bias gradients from the one backward kernel); conv_transpose2d, its adjoint, on the same
// kernels. Kernels: ops/cpu/conv*.cpp.
#include <algorithm>
#include <limits>
#include <string>

#include "ops/frontend.h"
#include "ops/recompute.h"
#include "core/checked_math.h"
#include "ops/functional.h"
#include "ops/contracts/kernels_conv.h"
#include "ops/memory_format.h"
#include "ops/op_table.h"
#include "ops/detail/pair_arg.h"
#include "ops/profiler.h"
#include "tensor/factory.h"

namespace precis {

using autograd::SavedTensor;
using autograd::TensorList;
using kernels::Conv2dParams;
using detail::Domain;
using detail::OpContext;

namespace {

std::string operands(const Tensor& x, const Tensor& w, const Tensor& b) {
  std::string s = "input is " + x.describe() + ", weight is " + w.describe();
  if (b.defined()) s += ", bias is " + b.describe();
  return s;
}

// The output height or width, or a value < 1 when the (dilated) kernel does not fit. The
// geometry was checked by check_conv2d, so nothing here overflows.
int64_t conv_out_size(int64_t in, int64_t k, int64_t stride, int64_t pad, int64_t dil) {
  const int64_t span = in + 2 * pad - dil * (k - 1) - 1;
  return span < 0 ? 0 : span / stride + 1;
}

// The dtypes and ranks of a convolution's operands (defined operands on one device are the
// front-end's checks); `weight_layout` says what the weight's four dims are.
void check_conv_operands(const char* op, const Tensor& x, const Tensor& w, const Tensor& b, const char* weight_layout) {
  const bool floating = x.is_floating_point() && w.is_floating_point() && (!b.defined() || b.is_floating_point());
  PRECIS_CHECK_DTYPE(floating, op, ": expects floating operands, ", operands(x, w, b), "; convert with .to(DType::f32)");
  const bool same_dtype = w.dtype() == x.dtype() && (!b.defined() || b.dtype() == x.dtype());
  PRECIS_CHECK_DTYPE(same_dtype, op, ": operands have different dtypes: ", operands(x, w, b),
                     "; convert them with .to(DType::", dtype_name(w.dtype()), ") (or run under autocast)");
  PRECIS_CHECK_SHAPE(x.dim() == 3 || x.dim() == 4, op, ": input must be 4-D (N, C, H, W) or 3-D (C, H, W), ",
                     operands(x, w, b));
  PRECIS_CHECK_SHAPE(w.dim() == 4, op, ": weight must be 4-D ", weight_layout, ", ", operands(x, w, b));
}

// `op` names the op the user called: conv1d checks its (N, C, 1, L) view here too.
Conv2dParams check_conv2d(const Tensor& x, const Tensor& w, const Tensor& b, const std::vector<int64_t>& stride,
                          const std::vector<int64_t>& padding, const std::vector<int64_t>& dilation, int64_t groups,
                          const char* op = "conv2d") {
  check_conv_operands(op, x, w, b, "(out_channels, in_channels / groups, kH, kW)");
  Conv2dParams p;
  detail::pair_arg(op, "stride", stride, p.stride, 1);
  detail::pair_arg(op, "padding", padding, p.padding, 0);
  detail::pair_arg(op, "dilation", dilation, p.dilation, 1);
  PRECIS_CHECK(groups >= 1, op, ": groups must be >= 1, got ", groups);
  p.groups = groups;
  const int64_t c = x.size(-3), o = w.size(0);
  PRECIS_CHECK_SHAPE(o % groups == 0, op, ": out_channels (weight.size(0) = ", o,
                     ") must be divisible by groups = ", groups, ": ", operands(x, w, b));
  // groups is the caller's (with out_channels 0 any value divides it): the product may overflow.
  const std::optional<int64_t> expected_c = checked_mul(w.size(1), groups);
  PRECIS_CHECK_SHAPE(expected_c && c == *expected_c, op, ": input has ", c, " channels but weight expects ",
                     w.size(1), " · groups (", groups, ") = ",
                     expected_c ? std::to_string(*expected_c) : std::string("more than int64 holds"), ": ",
                     operands(x, w, b), groups > 1 ? "" : "; weight is (out_channels, in_channels / groups, kH, kW)");
  PRECIS_CHECK_SHAPE(!b.defined() || (b.dim() == 1 && b.size(0) == o), op, ": bias must be (", o, "), ",
                     operands(x, w, b));
  for (int d = 0; d < 2; ++d) {
    const int64_t in = x.size(-2 + d), k = w.size(2 + d);
    // Padding and dilation are the caller's: the padded input and the dilated kernel must fit in
    // int64 before they are compared.
    const std::optional<int64_t> dilated = checked_mul(p.dilation[d], k - 1);
    const std::optional<int64_t> twice_pad = checked_mul(p.padding[d], 2);
    const std::optional<int64_t> padded = twice_pad ? checked_add(in, *twice_pad) : std::nullopt;
    PRECIS_CHECK(dilated && padded && *dilated < std::numeric_limits<int64_t>::max(), op, ": padding (",
                 p.padding[d], ") or dilation (", p.dilation[d], ") too large: the padded input or the dilated kernel ",
                 "overflows int64: ", operands(x, w, b));
    const int64_t span = *dilated + 1;
    PRECIS_CHECK_SHAPE(span <= *padded, op, ": the kernel (", k, " with dilation ", p.dilation[d],
                       " spans ", span, ") is larger than the padded input ", d == 0 ? "height" : "width", " (",
                       in, " + 2·", p.padding[d], "): ", operands(x, w, b));
  }
  return p;
}

Tensor as_4d(const Tensor& t) { return t.dim() == 4 ? t : t.unsqueeze(0); }

// Channels-last (NHWC) operands: a channels-last input keeps that layout through the convolution,
// and the output and the input gradient follow it (as PyTorch's channels_last). cuDNN's Tensor
// Core kernels and oneDNN's nhwc kernels work on it in place; converting would cost two
// transposes per layer (docs/design/cpu-conv.md). On CUDA the weight and its gradient are
// channels-last too (cuDNN wants one layout for all); the CPU kernels take a contiguous weight.
bool keeps_channels_last(const Tensor& x) { return suggest_memory_format(x) == MemoryFormat::ChannelsLast; }
Tensor to_channels_last(const Tensor& t) { return contiguous(t, MemoryFormat::ChannelsLast); }
Tensor empty_channels_last(const Shape& s, const TensorOptions& options) {
  return empty({s[0], s[2], s[3], s[1]}, options).permute({0, 3, 1, 2});
}
// Nominal FLOPs of a convolution producing out (N, O, Ho, Wo) with a weight (O, C / groups, kH, kW):
// a multiply and an add per weight element per output element.
double conv_flops(const Tensor& out, const Shape& w_sizes) {
  return 2.0 * static_cast<double>(out.numel()) * static_cast<double>(w_sizes[1] * w_sizes[2] * w_sizes[3]);
}
double conv_flops(const Tensor& out, const Tensor& w) { return conv_flops(out, w.sizes()); }

// What conv2d's and conv_transpose2d's backward read: the input when the weight (conv2d: or the
// bias) needs a gradient, the weight when the input does, and the geometry and layout.
struct ConvSaved {
  SavedTensor x, w;
  Shape x_sizes, w_sizes;
  bool need_x = false, need_w = false, need_b = false;
  Conv2dParams p;
  DeviceType dev = DeviceType::cpu;
  DType dtype = DType::f32;
  bool nhwc = false, weight_nhwc = false;
};

// conv2d(input, weight, bias): the stride, padding, dilation and groups are parameters.
struct Conv2d {
  static constexpr OpId id = OpId::conv2d;
  static constexpr Domain domain = Domain::any;  // check_conv2d checks, naming every operand
  static constexpr const char* names[] = {"input", "weight", "bias"};
  static constexpr unsigned optional = 0b100;
  using Saved = ConvSaved;
  static Tensor forward(OpContext<Saved>& ctx, const std::array<Tensor, 3>& in, const std::vector<int64_t>& stride,
                        const std::vector<int64_t>& padding, const std::vector<int64_t>& dilation, int64_t groups) {
    // (An autocast cast keeps a channels-last input channels-last: Tensor::to(DType) keeps the layout.)
    const Tensor &input = in[0], &weight = in[1], &bias = in[2];
    const Conv2dParams p = check_conv2d(input, weight, bias, stride, padding, dilation, groups);
    const DeviceType dev = input.device().type;
    const DType dtype = input.dtype();
    const bool nhwc = keeps_channels_last(input);
    const bool weight_nhwc = nhwc && dev == DeviceType::cuda;
    const Tensor out = kept_or_computed(OpId::conv2d, [&] {
      NoGradGuard no_grad;  // the views and copies below are internal
      const Tensor x = nhwc ? input : as_4d(input).contiguous();
      const int64_t n = x.size(0), h = x.size(2), w = x.size(3), o = weight.size(0);
      const int64_t ho = conv_out_size(h, weight.size(2), p.stride[0], p.padding[0], p.dilation[0]);
      const int64_t wo = conv_out_size(w, weight.size(3), p.stride[1], p.padding[1], p.dilation[1]);
      const TensorOptions options{.dtype = dtype, .device = input.device()};
      Tensor out4 = nhwc ? empty_channels_last({n, o, ho, wo}, options) : empty({n, o, ho, wo}, options);
      if (profiler::counting_flops()) profiler::add_flops(OpId::conv2d, conv_flops(out4, weight));
      if (out4.numel() > 0)
        kernel<kernels::Conv2dKernel>(OpId::conv2d, dev, dtype)(
            out4, x, weight_nhwc ? to_channels_last(weight) : weight.contiguous(),
            bias.defined() ? bias.contiguous() : Tensor(), p);
      return input.dim() == 4 ? out4 : out4.squeeze(0);
    });
    if (ctx.grad) {
      const bool need_x = input.requires_grad(), need_w = weight.requires_grad();
      const bool need_b = bias.defined() && bias.requires_grad();
      ctx.saved = {need_w || need_b ? SavedTensor(input) : SavedTensor(), need_x ? SavedTensor(weight) : SavedTensor(),
                   input.sizes(), weight.sizes(), need_x, need_w, need_b, p, dev, dtype, nhwc, weight_nhwc};
    }
    return out;
  }
  static TensorList backward(const Saved& s, const TensorList& g) {
    const bool nhwc = s.nhwc;
    const Tensor go = nhwc ? to_channels_last(g[0]) : as_4d(g[0]).contiguous();
    const TensorOptions options{.dtype = s.dtype, .device = go.device()};
    Shape x_sizes4 = s.x_sizes;
    if (x_sizes4.size() == 3) x_sizes4.insert(x_sizes4.begin(), 1);
    // The bias gradient comes with the weight gradient's pass, so gw is computed (and dropped)
    // when only the bias needs a gradient.
    auto alloc = [&](const Shape& sizes) { return nhwc ? empty_channels_last(sizes, options) : empty(sizes, options); };
    Tensor gx4 = s.need_x ? alloc(x_sizes4) : Tensor();
    Tensor gw = s.need_w || s.need_b ? (s.weight_nhwc ? alloc(s.w_sizes) : empty(s.w_sizes, options)) : Tensor();
    Tensor gb = s.need_b ? empty({s.w_sizes[0]}, options) : Tensor();
    if (go.numel() == 0) {  // an empty batch or no output channels: the sums are empty
      for (Tensor* t : {&gx4, &gw, &gb})
        if (t->defined()) t->zero_();
    } else {
      auto layout = [&](const Tensor& t) { return nhwc ? to_channels_last(t) : as_4d(t).contiguous(); };
      const Tensor x = gw.defined() ? layout(s.x.unpack("conv2d")) : Tensor();
      const Tensor w =
          s.need_x ? (s.weight_nhwc ? layout(s.w.unpack("conv2d")) : s.w.unpack("conv2d").contiguous()) : Tensor();
      // The input gradient is a convolution of the forward's size, and so is the weight's.
      if (profiler::counting_flops())
        profiler::add_flops(OpId::conv2d_backward,
                            conv_flops(go, s.w_sizes) * ((s.need_x ? 1 : 0) + (gw.defined() ? 1 : 0)));
      kernel<kernels::Conv2dBackwardKernel>(OpId::conv2d_backward, s.dev, s.dtype)(gx4, gw, gb, go, x, w, s.p);
    }
    // A channels-last input gets a channels-last gradient (as PyTorch's); the weight's gradient is
    // made contiguous for the optimizers, which read gradients densely.
    const Tensor gx = s.need_x ? (nhwc ? gx4 : gx4.view(s.x_sizes)) : Tensor();
    if (!s.need_w) gw = Tensor();
    if (s.weight_nhwc && gw.defined()) gw = gw.contiguous();
    return {gx, gw, gb};
  }
};

// ---- conv_transpose2d ----------------------------------------------------------------------------
// The adjoint of conv2d: out = conv2d's input gradient for grad_out = input. conv2d's three
// kernels run with the roles exchanged, so it has conv2d's devices, dtypes and layouts.

struct TransposeGeometry {
  Conv2dParams p;  // the conv2d whose input gradient the forward is
  int64_t out_channels = 0, out_h = 0, out_w = 0;
};

TransposeGeometry check_conv_transpose2d(const Tensor& x, const Tensor& w, const Tensor& b,
                                         const std::vector<int64_t>& stride, const std::vector<int64_t>& padding,
                                         const std::vector<int64_t>& output_padding, int64_t groups,
                                         const std::vector<int64_t>& dilation) {
  const char* op = "conv_transpose2d";
  check_conv_operands(op, x, w, b, "(in_channels, out_channels / groups, kH, kW)");
  TransposeGeometry t;
  int64_t extra[2];
  detail::pair_arg(op, "stride", stride, t.p.stride, 1);
  detail::pair_arg(op, "padding", padding, t.p.padding, 0);
  detail::pair_arg(op, "output_padding", output_padding, extra, 0);
  detail::pair_arg(op, "dilation", dilation, t.p.dilation, 1);
  PRECIS_CHECK(groups >= 1, op, ": groups must be >= 1, got ", groups);
  t.p.groups = groups;
  const int64_t c = x.size(-3);
  PRECIS_CHECK_SHAPE(c == w.size(0), op, ": input has ", c, " channels but weight.size(0) is ", w.size(0), ": ",
                     operands(x, w, b), "; weight is (in_channels, out_channels / groups, kH, kW)");
  PRECIS_CHECK_SHAPE(c % groups == 0, op, ": in_channels (", c, ") must be divisible by groups = ", groups, ": ",
                     operands(x, w, b));
  const std::optional<int64_t> o = checked_mul(w.size(1), groups);
  PRECIS_CHECK_SHAPE(o.has_value(), op, ": out_channels (weight.size(1) · groups) overflows int64: ",
                     operands(x, w, b));
  t.out_channels = *o;
  PRECIS_CHECK_SHAPE(!b.defined() || (b.dim() == 1 && b.size(0) == t.out_channels), op, ": bias must be (",
                     t.out_channels, "), ", operands(x, w, b));
  int64_t* out_size[2] = {&t.out_h, &t.out_w};
  for (int d = 0; d < 2; ++d) {
    PRECIS_CHECK(extra[d] < t.p.stride[d], op, ": output_padding (", extra[0], ", ", extra[1],
                 ") must be smaller than stride (", t.p.stride[0], ", ", t.p.stride[1], ")",
                 t.p.dilation[d] > t.p.stride[d] ? " (PyTorch also takes it below dilation; precis does not: pad() the "
                                                   "output by the difference instead)"
                                                 : "");
    // (in − 1)·stride − 2·padding + dilation·(k − 1) + output_padding + 1, from the caller's values.
    const int64_t in = x.size(-2 + d), k = w.size(2 + d);
    const std::optional<int64_t> grown = checked_mul(std::max<int64_t>(in - 1, 0), t.p.stride[d]);
    const std::optional<int64_t> span = checked_mul(t.p.dilation[d], k - 1);
    const std::optional<int64_t> twice_pad = checked_mul(t.p.padding[d], 2);
    const std::optional<int64_t> sum = grown && span ? checked_add(*grown, *span) : std::nullopt;
    PRECIS_CHECK(sum && twice_pad && *sum < std::numeric_limits<int64_t>::max() - extra[d], op,
                 ": stride, padding or dilation too large: the output size overflows int64: ", operands(x, w, b));
    const int64_t size = *sum - *twice_pad + extra[d] + 1;
    PRECIS_CHECK_SHAPE(size >= 1 || in == 0, op, ": the output ", d == 0 ? "height" : "width", " would be ", size,
                       " = (", in, " − 1)·", t.p.stride[d], " − 2·", t.p.padding[d], " + ", t.p.dilation[d], "·(", k,
                       " − 1) + ", extra[d], " + 1; lower the padding: ", operands(x, w, b));
    *out_size[d] = in == 0 ? 0 : size;
  }
  return t;
}

struct ConvTranspose2d {
  static constexpr OpId id = OpId::conv_transpose2d;
  static constexpr Domain domain = Domain::any;  // check_conv_transpose2d checks, naming every operand
  static constexpr const char* names[] = {"input", "weight", "bias"};
  static constexpr unsigned optional = 0b100;
  using Saved = ConvSaved;
  static Tensor forward(OpContext<Saved>& ctx, const std::array<Tensor, 3>& in, const std::vector<int64_t>& stride,
                        const std::vector<int64_t>& padding, const std::vector<int64_t>& output_padding,
                        int64_t groups, const std::vector<int64_t>& dilation) {
    const Tensor &input = in[0], &weight = in[1], &bias = in[2];
    const TransposeGeometry t =
        check_conv_transpose2d(input, weight, bias, stride, padding, output_padding, groups, dilation);
    const DeviceType dev = input.device().type;
    const DType dtype = input.dtype();
    const bool nhwc = keeps_channels_last(input);
    const bool weight_nhwc = nhwc && dev == DeviceType::cuda;
    // f16/bf16 with a bias on the CPU: the kernel's fp32 sums and the bias are added in fp32 and
    // rounded once, as PyTorch's oneDNN deconvolution does; the low-precision kernel rounds its
    // output, and a bias added after that would round twice (1.2× the bf16 tolerance where the
    // bias cancels the sum). On CUDA the bias is added to the rounded output, as PyTorch's cuDNN
    // path does: cuDNN's input-gradient pass takes no bias, and its f16 Tensor Cores are the point.
    const bool widen = bias.defined() && is_low_precision(dtype) && dev == DeviceType::cpu;
    const DType kernel_dtype = widen ? DType::f32 : dtype;
    Tensor out;
    {
      NoGradGuard no_grad;  // the views, copies and the bias add below are internal
      const Tensor x = (nhwc ? input : as_4d(input).contiguous()).to(kernel_dtype);
      const TensorOptions options{.dtype = kernel_dtype, .device = input.device()};
      const Shape out_shape{x.size(0), t.out_channels, t.out_h, t.out_w};
      Tensor out4 = nhwc ? empty_channels_last(out_shape, options) : empty(out_shape, options);
      if (profiler::counting_flops()) profiler::add_flops(OpId::conv_transpose2d, conv_flops(x, weight));
      if (out4.numel() > 0) {
        if (x.numel() == 0) {
          out4.zero_();  // no input channels: the bias alone
        } else {
          const Tensor w = weight.to(kernel_dtype);
          kernel<kernels::Conv2dBackwardKernel>(OpId::conv2d_backward, dev, kernel_dtype)(
              out4, Tensor(), Tensor(), x, Tensor(), weight_nhwc ? to_channels_last(w) : w.contiguous(), t.p);
        }
        if (bias.defined()) out4 = add(out4, bias.to(kernel_dtype).view({1, t.out_channels, 1, 1}));
      }
      if (widen) out4 = out4.to(dtype);
      out = input.dim() == 4 ? out4 : out4.squeeze(0);
    }
    if (ctx.grad) {
      const bool need_x = input.requires_grad(), need_w = weight.requires_grad();
      const bool need_b = bias.defined() && bias.requires_grad();
      ctx.saved = {need_w ? SavedTensor(input) : SavedTensor(), need_x ? SavedTensor(weight) : SavedTensor(),
                   input.sizes(), weight.sizes(), need_x, need_w, need_b, t.p, dev, dtype, nhwc, weight_nhwc};
    }
    return out;
  }
  static TensorList backward(const Saved& s, const TensorList& g) {
    auto layout = [&](const Tensor& t) { return s.nhwc ? to_channels_last(t) : as_4d(t).contiguous(); };
    const Tensor go = layout(g[0]);  // (N, O, Ho, Wo)
    const TensorOptions options{.dtype = s.dtype, .device = go.device()};
    auto alloc = [&](const Shape& sizes) { return s.nhwc ? empty_channels_last(sizes, options) : empty(sizes, options); };
    Shape x_sizes4 = s.x_sizes;
    if (x_sizes4.size() == 3) x_sizes4.insert(x_sizes4.begin(), 1);
    const bool empty_sum = go.numel() == 0;  // no output elements: the gradients are empty sums
    if (profiler::counting_flops())  // each gradient is a convolution of the forward's size
      profiler::add_flops(OpId::conv_transpose2d, 2.0 * static_cast<double>(shape_numel(x_sizes4)) *
                                                      static_cast<double>(s.w_sizes[1] * s.w_sizes[2] * s.w_sizes[3]) *
                                                      ((s.need_x ? 1 : 0) + (s.need_w ? 1 : 0)));
    Tensor gx;
    if (s.need_x) {
      // The input's gradient is conv2d of the output's gradient.
      Tensor gx4 = alloc(x_sizes4);
      if (gx4.numel() > 0) {
        if (empty_sum) {
          gx4.zero_();
        } else {
          const Tensor w = s.w.unpack("conv_transpose2d");
          kernel<kernels::Conv2dKernel>(OpId::conv2d, s.dev, s.dtype)(
              gx4, go, s.weight_nhwc ? to_channels_last(w) : w.contiguous(), Tensor(), s.p);
        }
      }
      gx = s.nhwc ? gx4 : gx4.view(s.x_sizes);
    }
    Tensor gw;
    if (s.need_w) {
      // conv2d's weight gradient with the roles exchanged: the output's gradient is its input, the
      // input its output gradient.
      gw = s.weight_nhwc ? alloc(s.w_sizes) : empty(s.w_sizes, options);
      const Tensor x = layout(s.x.unpack("conv_transpose2d"));
      if (empty_sum || x.numel() == 0) {
        gw.zero_();
      } else {
        kernel<kernels::Conv2dBackwardKernel>(OpId::conv2d_backward, s.dev, s.dtype)(Tensor(), gw, Tensor(), x, go,
                                                                                       Tensor(), s.p);
      }
      if (s.weight_nhwc) gw = gw.contiguous();
    }
    const Tensor gb = s.need_b ? sum(go, {0, 2, 3}) : Tensor();
    return {gx, gw, gb};
  }
};

// conv1d: conv2d over a height of 1. Its own checks name conv1d and the 3-D shapes the user gave.
struct Conv1d {
  static constexpr OpId id = OpId::conv1d;
  static constexpr Domain domain = Domain::any;  // conv2d checks the dtypes, naming every operand
  static constexpr const char* names[] = {"input", "weight", "bias"};
  static constexpr unsigned optional = 0b100;
  static Tensor forward(OpContext<detail::NoSaved>&, const std::array<Tensor, 3>& in, int64_t stride, int64_t padding,
                        int64_t dilation, int64_t groups) {
    const Tensor &input = in[0], &weight = in[1], &bias = in[2];
    PRECIS_CHECK_SHAPE(input.dim() == 2 || input.dim() == 3, "conv1d: input must be 3-D (N, C, L) or 2-D (C, L), ",
                       operands(input, weight, bias));
    PRECIS_CHECK_SHAPE(weight.dim() == 3, "conv1d: weight must be 3-D (out_channels, in_channels / groups, K), ",
                       operands(input, weight, bias));
    const Tensor x = input.unsqueeze(-2), w = weight.unsqueeze(-2);
    check_conv2d(x, w, bias, {1, stride}, {0, padding}, {1, dilation}, groups, "conv1d");
    return conv2d(x, w, bias, {1, stride}, {0, padding}, {1, dilation}, groups).squeeze(-2);
  }
};

}  // namespace

Tensor conv1d(const Tensor& input, const Tensor& weight, const Tensor& bias, int64_t stride, int64_t padding,
              int64_t dilation, int64_t groups) {
  return detail::call<Conv1d>({input, weight, bias}, stride, padding, dilation, groups);
}

Tensor conv2d(const Tensor& input, const Tensor& weight, const Tensor& bias, const std::vector<int64_t>& stride,
              const std::vector<int64_t>& padding, const std::vector<int64_t>& dilation, int64_t groups) {
  return detail::call<Conv2d>({input, weight, bias}, stride, padding, dilation, groups);
}

Tensor conv_transpose2d(const Tensor& input, const Tensor& weight, const Tensor& bias, const std::vector<int64_t>& stride,
                        const std::vector<int64_t>& padding, const std::vector<int64_t>& output_padding,
                        int64_t groups, const std::vector<int64_t>& dilation) {
  return detail::call<ConvTranspose2d>({input, weight, bias}, stride, padding, output_padding, groups, dilation);
}

}  // namespace precis
