// max_pool2d, avg_pool2d, adaptive_avg_pool2d, each declared once for the op front-end
// (ops/frontend.h): argument checks, output geometry (ceil_mode as PyTorch), unbatched input, and
// their backward through the *_backward kernels. Kernels: ops/cpu/pool.cpp.
#include <limits>
#include <string>

#include "core/checked_math.h"
#include "ops/frontend.h"
#include "ops/functional.h"
#include "ops/memory_format.h"
#include "ops/contracts/kernels_conv.h"
#include "ops/op_table.h"
#include "ops/detail/pair_arg.h"
#include "ops/math/pool_math.h"
#include "tensor/factory.h"

namespace precis {

using autograd::SavedTensor;
using autograd::TensorList;
using kernels::Pool2dParams;

using detail::Domain;
using detail::OpContext;

namespace {

// The input's shape; that it is defined and floating the front-end checks (Domain::floating).
void check_input(const char* op, const Tensor& x) {
  PRECIS_CHECK_SHAPE(x.dim() == 3 || x.dim() == 4, op, ": input must be 4-D (N, C, H, W) or 3-D (C, H, W), input is ",
                     x.describe());
  PRECIS_CHECK_SHAPE(x.size(-1) > 0 && x.size(-2) > 0, op, ": input has an empty spatial dim, input is ",
                     x.describe());
}

// Output size along one dim: floor (or ceil) of the window count, where in ceil mode the last
// window must start inside the input or its left padding (as PyTorch). The division rounds toward
// −∞ (PyTorch's div_rtn): in ceil mode a window longer than the padded input still gives one
// output, whose window is clipped to the input.
int64_t pool_out_size(int64_t in, int64_t k, int64_t stride, int64_t pad, int64_t dil, bool ceil_mode) {
  const int64_t span = in + 2 * pad - dil * (k - 1) - 1;
  int64_t out = kernels::floor_div(span + (ceil_mode ? stride - 1 : 0), stride) + 1;
  if (out <= 0) return 0;
  if (ceil_mode && (out - 1) * stride >= in + pad) --out;
  return out;
}

// Fills p's window geometry from the arguments and returns the 4-D output shape.
Shape pool_geometry(const char* op, const Tensor& x, const std::vector<int64_t>& kernel_size,
                    const std::vector<int64_t>& stride, const std::vector<int64_t>& padding,
                    const std::vector<int64_t>& dilation, bool ceil_mode, Pool2dParams& p) {
  detail::pair_arg(op, "kernel_size", kernel_size, p.kernel, 1);
  detail::pair_arg(op, "stride", stride.empty() ? kernel_size : stride, p.stride, 1);
  detail::pair_arg(op, "padding", padding, p.padding, 0);
  detail::pair_arg(op, "dilation", dilation, p.dilation, 1);
  Shape out{x.dim() == 4 ? x.size(0) : 1, x.size(-3), 0, 0};
  for (int d = 0; d < 2; ++d) {
    PRECIS_CHECK(p.padding[d] <= p.kernel[d] / 2, op, ": padding (", p.padding[0], ", ", p.padding[1],
                 ") must be at most half the kernel size (", p.kernel[0], ", ", p.kernel[1], ")");
    const int64_t in = x.size(-2 + d);
    // The caller's kernel size, dilation and padding must keep the window arithmetic in int64
    // (padding is at most half the kernel, checked above).
    const std::optional<int64_t> dilated = checked_mul(p.dilation[d], p.kernel[d] - 1);
    const std::optional<int64_t> padded = checked_add(in, 2 * p.padding[d]);
    PRECIS_CHECK(dilated && padded && checked_add(*padded, p.stride[d]), op, ": kernel_size (", p.kernel[d],
                 "), dilation (", p.dilation[d], "), padding (", p.padding[d], ") or stride (", p.stride[d],
                 ") too large: the window arithmetic overflows int64, input is ", x.describe());
    out[2 + d] = pool_out_size(in, p.kernel[d], p.stride[d], p.padding[d], p.dilation[d], ceil_mode);
    PRECIS_CHECK_SHAPE(out[2 + d] >= 1, op, ": the window (kernel_size ", p.kernel[d],
                       p.dilation[d] != 1 ? ", dilation " + std::to_string(p.dilation[d]) : std::string(),
                       ") is larger than the padded input ", d == 0 ? "height" : "width", " (", in, " + 2·",
                       p.padding[d], "), input is ", x.describe());
  }
  return out;
}

Tensor as_4d(const Tensor& t) { return t.dim() == 4 ? t : t.unsqueeze(0); }

// A channels-last input gets channels-last results and input gradient, as in PyTorch, so a
// channels-last network stays so; the kernels work on NCHW copies (one transpose each way).
bool channels_last_input(const Tensor& x) { return suggest_memory_format(x) == MemoryFormat::ChannelsLast; }
Tensor in_layout(const Tensor& t, bool channels_last) {
  return channels_last && t.defined() ? contiguous(t, MemoryFormat::ChannelsLast) : t;
}

// The 4-D result brought back to the input's rank.
Tensor like_input(const Tensor& out4, const Tensor& x) { return x.dim() == 4 ? out4 : out4.squeeze(0); }

Shape shape_4d(const Shape& s) {
  Shape r = s;
  if (r.size() == 3) r.insert(r.begin(), 1);
  return r;
}

// The input is the one operand (floating, checked by the front-end); the window arguments are
// parameters.
struct MaxPool2d {
  static constexpr OpId id = OpId::max_pool2d;
  static constexpr Domain domain = Domain::floating;
  struct Saved {
    SavedTensor indices;
    Shape x_sizes;
    DeviceType dev = DeviceType::cpu;
    bool cl = false;
    Pool2dParams p;
  };
  // values, and the indices of the maxima when asked for or when the backward needs them.
  static std::tuple<Tensor, Tensor> forward(OpContext<Saved>& ctx, const std::array<Tensor, 1>& in,
                                            const std::vector<int64_t>& kernel_size, const std::vector<int64_t>& stride,
                                            const std::vector<int64_t>& padding, const std::vector<int64_t>& dilation,
                                            bool ceil_mode, bool want_indices) {
    const Tensor& input = in[0];
    check_input("max_pool2d", input);
    Pool2dParams p;
    const Shape out_shape = pool_geometry("max_pool2d", input, kernel_size, stride, padding, dilation, ceil_mode, p);
    const DeviceType dev = input.device().type;
    const bool cl = channels_last_input(input);
    Tensor values, indices;
    {
      NoGradGuard no_grad;
      const Tensor x = as_4d(input).contiguous();
      Tensor out4 = empty(out_shape, {.dtype = input.dtype(), .device = input.device()});
      Tensor idx4 =
          ctx.grad || want_indices ? empty(out_shape, {.dtype = DType::i64, .device = input.device()}) : Tensor();
      if (out4.numel() > 0) kernel<kernels::MaxPool2dKernel>(id, dev, input.dtype())(out4, idx4, x, p);
      values = in_layout(like_input(out4, input), cl);
      if (idx4.defined()) indices = in_layout(like_input(idx4, input), cl);
    }
    if (ctx.grad) ctx.saved = {SavedTensor(indices), input.sizes(), dev, cl, p};
    return {values, indices};
  }
  static TensorList backward(const Saved& s, const TensorList& g) {
    const Tensor go = as_4d(g[0]).contiguous();
    const Tensor idx = as_4d(s.indices.unpack("max_pool2d")).contiguous();
    Tensor gx = empty(shape_4d(s.x_sizes), {.dtype = go.dtype(), .device = go.device()});
    kernel<kernels::MaxPool2dBackwardKernel>(OpId::max_pool2d_backward, s.dev, go.dtype())(gx, go, idx, s.p);
    return {in_layout(gx.view(s.x_sizes), s.cl)};
  }
};

struct AvgPool2d {
  static constexpr OpId id = OpId::avg_pool2d;
  static constexpr Domain domain = Domain::floating;
  struct Saved {
    Shape x_sizes;
    Pool2dParams p;
    DeviceType dev = DeviceType::cpu;
    bool cl = false;
  };
  static Tensor forward(OpContext<Saved>& ctx, const std::array<Tensor, 1>& in, const std::vector<int64_t>& kernel_size,
                        const std::vector<int64_t>& stride, const std::vector<int64_t>& padding, bool ceil_mode,
                        bool count_include_pad, int64_t divisor_override) {
    const Tensor& input = in[0];
    check_input("avg_pool2d", input);
    PRECIS_CHECK(divisor_override >= 0, "avg_pool2d: divisor_override must be positive (or 0 for none), got ",
                 divisor_override);
    Pool2dParams p;
    const Shape out_shape = pool_geometry("avg_pool2d", input, kernel_size, stride, padding, {1, 1}, ceil_mode, p);
    p.count_include_pad = count_include_pad;
    p.divisor_override = divisor_override;
    const DeviceType dev = input.device().type;
    const bool cl = channels_last_input(input);
    Tensor out;
    {
      NoGradGuard no_grad;
      Tensor out4 = empty(out_shape, {.dtype = input.dtype(), .device = input.device()});
      if (out4.numel() > 0)
        kernel<kernels::AvgPool2dKernel>(id, dev, input.dtype())(out4, as_4d(input).contiguous(), p);
      out = in_layout(like_input(out4, input), cl);
    }
    if (ctx.grad) ctx.saved = {input.sizes(), p, dev, cl};
    return out;
  }
  static TensorList backward(const Saved& s, const TensorList& g) {
    const Tensor go = as_4d(g[0]).contiguous();
    Tensor gx = empty(shape_4d(s.x_sizes), {.dtype = go.dtype(), .device = go.device()});
    kernel<kernels::AvgPool2dBackwardKernel>(OpId::avg_pool2d_backward, s.dev, go.dtype())(gx, go, s.p);
    return {in_layout(gx.view(s.x_sizes), s.cl)};
  }
};

struct AdaptiveAvgPool2d {
  static constexpr OpId id = OpId::adaptive_avg_pool2d;
  static constexpr Domain domain = Domain::floating;
  struct Saved {
    Shape x_sizes;
    DeviceType dev = DeviceType::cpu;
    bool cl = false;
  };
  static Tensor forward(OpContext<Saved>& ctx, const std::array<Tensor, 1>& in,
                        const std::vector<int64_t>& output_size) {
    const Tensor& input = in[0];
    check_input("adaptive_avg_pool2d", input);
    int64_t os[2];
    detail::pair_arg("adaptive_avg_pool2d", "output_size", output_size, os, 1);
    const DeviceType dev = input.device().type;
    const bool cl = channels_last_input(input);
    Tensor out;
    {
      NoGradGuard no_grad;
      const Tensor x = as_4d(input).contiguous();
      Tensor out4 = empty({x.size(0), x.size(1), os[0], os[1]}, {.dtype = input.dtype(), .device = input.device()});
      if (out4.numel() > 0) kernel<kernels::AdaptiveAvgPool2dKernel>(id, dev, input.dtype())(out4, x);
      out = in_layout(like_input(out4, input), cl);
    }
    if (ctx.grad) ctx.saved = {input.sizes(), dev, cl};
    return out;
  }
  static TensorList backward(const Saved& s, const TensorList& g) {
    const Tensor go = as_4d(g[0]).contiguous();
    Tensor gx = empty(shape_4d(s.x_sizes), {.dtype = go.dtype(), .device = go.device()});
    kernel<kernels::AdaptiveAvgPool2dBackwardKernel>(OpId::adaptive_avg_pool2d_backward, s.dev, go.dtype())(gx, go);
    return {in_layout(gx.view(s.x_sizes), s.cl)};
  }
};

// ---- 1-D pooling: the 2-D ops over the (N, C, 1, L) view, checked under the 1-D op's name ----

Tensor as_plane(const char* op, const Tensor& input) {
  PRECIS_CHECK_SHAPE(input.dim() == 2 || input.dim() == 3, op, ": input must be 3-D (N, C, L) or 2-D (C, L), input is ",
                     input.describe());
  return input.unsqueeze(-2);
}

struct MaxPool1d {
  static constexpr OpId id = OpId::max_pool1d;
  static constexpr Domain domain = Domain::floating;
  static Tensor forward(OpContext<detail::NoSaved>&, const std::array<Tensor, 1>& in, int64_t kernel_size,
                        std::optional<int64_t> stride, int64_t padding, int64_t dilation, bool ceil_mode) {
    const Tensor x = as_plane("max_pool1d", in[0]);
    const std::vector<int64_t> k{1, kernel_size}, s{1, stride.value_or(kernel_size)}, p{0, padding}, d{1, dilation};
    Pool2dParams unused;
    check_input("max_pool1d", x);
    pool_geometry("max_pool1d", x, k, s, p, d, ceil_mode, unused);
    return max_pool2d(x, k, s, p, d, ceil_mode).squeeze(-2);
  }
};

struct AvgPool1d {
  static constexpr OpId id = OpId::avg_pool1d;
  static constexpr Domain domain = Domain::floating;
  static Tensor forward(OpContext<detail::NoSaved>&, const std::array<Tensor, 1>& in, int64_t kernel_size,
                        std::optional<int64_t> stride, int64_t padding, bool ceil_mode, bool count_include_pad) {
    const Tensor x = as_plane("avg_pool1d", in[0]);
    const std::vector<int64_t> k{1, kernel_size}, s{1, stride.value_or(kernel_size)}, p{0, padding};
    Pool2dParams unused;
    check_input("avg_pool1d", x);
    pool_geometry("avg_pool1d", x, k, s, p, {1, 1}, ceil_mode, unused);
    return avg_pool2d(x, k, s, p, ceil_mode, count_include_pad).squeeze(-2);
  }
};

}  // namespace

Tensor max_pool1d(const Tensor& input, int64_t kernel_size, std::optional<int64_t> stride, int64_t padding,
                  int64_t dilation, bool ceil_mode) {
  return detail::call<MaxPool1d>({input}, kernel_size, stride, padding, dilation, ceil_mode);
}

Tensor avg_pool1d(const Tensor& input, int64_t kernel_size, std::optional<int64_t> stride, int64_t padding,
                  bool ceil_mode, bool count_include_pad) {
  return detail::call<AvgPool1d>({input}, kernel_size, stride, padding, ceil_mode, count_include_pad);
}

Tensor max_pool2d(const Tensor& input, const std::vector<int64_t>& kernel_size, const std::vector<int64_t>& stride,
                  const std::vector<int64_t>& padding, const std::vector<int64_t>& dilation, bool ceil_mode) {
  return std::get<0>(detail::call<MaxPool2d>({input}, kernel_size, stride, padding, dilation, ceil_mode, false));
}

std::tuple<Tensor, Tensor> max_pool2d_with_indices(const Tensor& input, const std::vector<int64_t>& kernel_size,
                                                   const std::vector<int64_t>& stride,
                                                   const std::vector<int64_t>& padding,
                                                   const std::vector<int64_t>& dilation, bool ceil_mode) {
  return detail::call<MaxPool2d>({input}, kernel_size, stride, padding, dilation, ceil_mode, true);
}

Tensor avg_pool2d(const Tensor& input, const std::vector<int64_t>& kernel_size, const std::vector<int64_t>& stride,
                  const std::vector<int64_t>& padding, bool ceil_mode, bool count_include_pad,
                  int64_t divisor_override) {
  return detail::call<AvgPool2d>({input}, kernel_size, stride, padding, ceil_mode, count_include_pad,
                                 divisor_override);
}

Tensor adaptive_avg_pool2d(const Tensor& input, const std::vector<int64_t>& output_size) {
  return detail::call<AdaptiveAvgPool2d>({input}, output_size);
}

}  // namespace precis
