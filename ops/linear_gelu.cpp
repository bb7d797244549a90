// linear_gelu: gelu(linear(x, W, b)) with the element-wise work of both directions in one pass
// each over the GEMM's output (CPU; the epilogue kernels are ops/cpu/gelu_epilogue.cpp). Where a
// backend has no epilogue kernels (CUDA for now) it is the composite gelu(linear()).
#include <string>

#include "autograd/record.h"
#include "ops/functional.h"
#include "ops/contracts/kernels.h"
#include "ops/contracts/kernels_epilogue.h"
#include "ops/detail/linear_check.h"
#include "ops/op_table.h"
#include "ops/precision.h"
#include "ops/recompute.h"
#include "ops/profiler.h"
#include "tensor/factory.h"

namespace precis {

using autograd::SavedTensor;
using autograd::TensorList;

bool& detail::linear_gelu_saves_derivative() {
  static bool saves = true;
  return saves;
}

// Written out, not declared for the front-end (ops/frontend.h): without the fused epilogue
// kernels it is linear then gelu, whose own nodes are then the graph.
Tensor linear_gelu(const Tensor& x_in, const Tensor& weight_in, const Tensor& bias_in, const std::string& approximate) {
  PRECIS_CHECK(x_in.defined() && weight_in.defined(), "linear_gelu: input or weight is an undefined tensor");
  const auto [x, weight, bias] = apply_precision(OpId::linear_gelu, x_in, weight_in, bias_in);
  detail::check_linear_operands("linear_gelu", x, weight, bias);
  PRECIS_CHECK(approximate == "none" || approximate == "tanh",
               "linear_gelu: approximate must be \"none\" or \"tanh\", got \"", approximate, "\"");
  const double flag = approximate == "tanh" ? 1.0 : 0.0;
  const DeviceType dev = x.device().type;
  if (find_fused_kernel(OpId::gelu_epilogue, dev, x.dtype()) == nullptr ||
      find_fused_kernel(OpId::gelu_epilogue_backward, dev, x.dtype()) == nullptr) {
    // Cast once, by linear_gelu's category, as the fused path is: linear's and gelu's own (a
    // user's override of either) must not apply on one backend and not on the other.
    PrecisionPolicyGuard no_policy(nullptr);
    // And its GEMM is linear_gelu's call for a selective checkpoint's keep policy, as the fused
    // path's is (a policy's linear indices would otherwise shift on a GPU): kept, it is the
    // pre-activation the fused path keeps.
    Tensor pre;
    {
      KeepCountsAs gemm(OpId::linear, OpId::linear_gelu);
      pre = linear(x, weight, bias);
    }
    return gelu(pre, approximate);
  }

  const int64_t in = weight.size(1), outs = weight.size(0);
  Shape out_sizes(x.sizes().begin(), x.sizes().end() - 1);
  const int64_t rows = shape_numel(out_sizes);
  out_sizes.push_back(outs);
  const bool need_x = x.requires_grad(), need_w = weight.requires_grad(),
             need_b = bias.defined() && bias.requires_grad();
  const bool need_grad = autograd::needs_grad({&x, &weight, &bias});
  // A selective checkpoint's forward keeps this call's GEMM output (the pre-activation) for a
  // recomputation that will record the backward, so GELU and its derivative are not applied in
  // place there: the kept tensor is `pre` alone (what PyTorch's gelu saves), and the epilogue pass
  // runs again from it in the recomputation. Keeping the output and the derivative instead held
  // two tensors of this size (the derivative in fp32) where one serves.
  const bool for_backward = need_grad || keeps_for_recompute(OpId::linear_gelu);
  const bool keep_derivative = need_grad && detail::linear_gelu_saves_derivative();
  const TensorOptions opts{.dtype = x.dtype(), .device = x.device()};
  const Tensor pre = kept_or_computed(OpId::linear_gelu, [&, &x = x, &weight = weight, &bias = bias] {
    NoGradGuard no_grad;
    const Tensor x2 = x.reshape({rows, in}).contiguous();
    const Tensor w = weight.contiguous();
    const Tensor b = bias.defined() ? bias.contiguous() : Tensor();
    Tensor p = empty({rows, outs}, opts);
    if (profiler::counting_flops())
      profiler::add_flops(OpId::linear_gelu,
                          2.0 * static_cast<double>(rows) * static_cast<double>(in) * static_cast<double>(outs));
    kernel<kernels::LinearKernel>(OpId::linear, dev, x.dtype()).timed_as(OpId::linear_gelu)(p, x2, w, b);
    // Nothing reads the pre-activation afterwards: GELU in place over the GEMM's output.
    if (!for_backward) kernel<kernels::GeluEpilogueKernel>(OpId::gelu_epilogue, dev, x.dtype())(p, Tensor(), p, flag);
    return p;
  });
  if (!for_backward) return pre.view(out_sizes);
  const DType acc = x.dtype() == DType::f64 ? DType::f64 : DType::f32;
  // Outside a checkpointed region nothing else holds `pre`: with the derivative kept, GELU can
  // overwrite it, as before the GEMM's output was kept for recomputation.
  const Tensor out2 = keep_derivative && !kept_outputs_active() ? pre : empty({rows, outs}, opts);
  const Tensor deriv = keep_derivative ? empty({rows, outs}, {.dtype = acc, .device = x.device()}) : Tensor();
  {
    NoGradGuard no_grad;
    kernel<kernels::GeluEpilogueKernel>(OpId::gelu_epilogue, dev, x.dtype())(out2, deriv, pre, flag);
  }
  const Tensor out = out2.view(out_sizes);
  const Tensor saved = keep_derivative ? deriv : pre;
  if (need_grad) {
    autograd::record(
        OpId::linear_gelu, {x, weight, bias}, {out},
        [sx = SavedTensor(x), sw = SavedTensor(weight), saved, keep_derivative, flag, need_x, need_w, need_b, rows,
         in, outs](const TensorList& g) -> TensorList {
          const Tensor g2 = g[0].reshape({rows, outs}).contiguous();
          const Tensor g_pre = empty({rows, outs}, {.dtype = g2.dtype(), .device = g2.device()});
          // The bias gradient comes out of the same pass; for one column the sum kernel takes its
          // row-reduction order instead, so that case is left to it.
          Tensor gx, gw, gb;
          if (need_b && outs > 1) gb = empty({outs}, {.dtype = g2.dtype(), .device = g2.device()});
          kernel<kernels::GeluEpilogueBackwardKernel>(OpId::gelu_epilogue_backward, g2.device().type, g2.dtype())(
              g_pre, gb, g2, saved, keep_derivative, flag);
          if (need_b && outs == 1) gb = sum(g_pre, {0});
          const Tensor x = sx.unpack("linear_gelu");
          if (need_x) gx = matmul(g_pre, sw.unpack("linear_gelu")).reshape(x.sizes());
          if (need_w) gw = matmul(g_pre.t(), x.reshape({rows, in}));
          return {gx, gw, gb};
        });
  }
  return out;
}

}  // namespace precis
