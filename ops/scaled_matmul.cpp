// scaled_matmul: the fp8 GEMM's operand checks and its amax, and scaled_fp8_cast, the recipe's
// cast (docs/fp8.md). Kernels: ops/cpu/scaled_matmul.cpp, ops/cuda/scaled_matmul.cpp (the GEMM);
// ops/cpu/fp8_cast.cpp, ops/cuda/fp8_cast.cu (the cast).
#include <string>

#include "core/grad_mode.h"
#include "ops/frontend.h"
#include "ops/functional.h"
#include "ops/contracts/kernels.h"
#include "ops/op_table.h"
#include "ops/profiler.h"
#include "tensor/factory.h"

namespace precis {

namespace {

void check_operands(const Tensor& a, const Tensor& b, const Tensor& sa, const Tensor& sb, const ScaledMatmulOptions& o) {
  PRECIS_CHECK(a.defined() && b.defined() && sa.defined() && sb.defined(),
               "scaled_matmul: an operand or scale is an undefined tensor");
  const auto all = [&] {
    return "a is " + a.describe() + ", b is " + b.describe() + ", a_scale_inv is " + sa.describe() +
           ", b_scale_inv is " + sb.describe();
  };
  PRECIS_CHECK_DTYPE(is_float8(a.dtype()) && is_float8(b.dtype()),
                     "scaled_matmul: a and b must be f8_e4m3 or f8_e5m2, ", all(),
                     "; cast with the scale first (a_fp8 = (a * scale).to(DType::f8_e4m3), a_scale_inv = 1 / scale), "
                     "or use matmul for bf16/f32 operands");
  PRECIS_CHECK_DTYPE(!(a.dtype() == DType::f8_e5m2 && b.dtype() == DType::f8_e5m2),
                     "scaled_matmul: a and b are both f8_e5m2 (", all(),
                     "); no fp8 GEMM library takes that pair: make one operand f8_e4m3 (the fp8 recipes pair E5M2 "
                     "gradients with E4M3 activations and weights)");
  PRECIS_CHECK_DTYPE(sa.dtype() == DType::f32 && sb.dtype() == DType::f32,
                     "scaled_matmul: the scale-inverses must be f32, ", all(), "; convert with .to(DType::f32)");
  PRECIS_CHECK_DTYPE(o.out_dtype == DType::bf16 || o.out_dtype == DType::f32, "scaled_matmul: out_dtype ",
                     dtype_name(o.out_dtype), " is not supported (", all(), "); choose DType::bf16 or DType::f32");
  PRECIS_CHECK_DEVICE(a.device() == b.device() && sa.device() == a.device() && sb.device() == a.device(),
                      "scaled_matmul: operands and scales are on different devices: ", all(),
                      "; move them with .to(device) (the scales stay on the device so no step waits for the host)");
  PRECIS_CHECK_SHAPE(a.dim() == 2 && b.dim() == 2, "scaled_matmul: a and b must be 2-D (M, K) and (K, N), ", all(),
                     "; flatten the leading dims with .reshape({-1, K})");
  PRECIS_CHECK_SHAPE(a.size(1) == b.size(0), "scaled_matmul: incompatible shapes: ", all(),
                     "; expected a.size(1) == b.size(0)");
  PRECIS_CHECK_SHAPE(sa.numel() == 1 && sb.numel() == 1,
                     "scaled_matmul: the scale-inverses must hold one value each (per-tensor scaling), ", all());
}

// scaled_fp8_cast(x, scale, dtype): x is the operand; scale and the fp8 dtype are parameters.
struct ScaledFp8CastOp {
  static constexpr OpId id = OpId::fp8_scaled_cast;
  static constexpr const char* name = "scaled_fp8_cast";
  static constexpr detail::Domain domain = detail::Domain::floating;
  static constexpr const char* names[] = {"x"};
  static ScaledFp8Cast forward(detail::OpContext<detail::NoSaved>&, const std::array<Tensor, 1>& in,
                               const Tensor& scale, DType fp8_dtype) {
    const Tensor& x = in[0];
    const auto all = [&] { return "x is " + x.describe() + ", scale is " + (scale.defined() ? scale.describe() : "undefined"); };
    PRECIS_CHECK(scale.defined(), "scaled_fp8_cast: the scale is undefined (", all(), ")");
    PRECIS_CHECK_DTYPE(is_float8(fp8_dtype), "scaled_fp8_cast: the target dtype must be f8_e4m3 or f8_e5m2, got ",
                       dtype_name(fp8_dtype), " (", all(), ")");
    PRECIS_CHECK_DTYPE(scale.dtype() == DType::f32, "scaled_fp8_cast: the scale must be f32, ", all(),
                       "; convert it with .to(DType::f32)");
    PRECIS_CHECK_DEVICE(scale.device() == x.device(), "scaled_fp8_cast: x and scale are on different devices: ", all(),
                        "; keep the scale on x's device (no step waits for the host)");
    PRECIS_CHECK_SHAPE(scale.numel() == 1, "scaled_fp8_cast: the scale must hold one value (per-tensor scaling), ",
                       all());
    NoGradGuard no_grad;
    const Tensor xc = x.detach().contiguous();
    ScaledFp8Cast r{empty(x.sizes(), {.dtype = fp8_dtype, .device = x.device()}),
                    empty({}, {.dtype = DType::f32, .device = x.device()})};
    kernel<kernels::Fp8ScaledCastKernel>(id, x.device().type, x.dtype())(
        r.data.view({x.numel()}), r.amax, xc.view({x.numel()}), scale.reshape({}));
    return r;
  }
};

}  // namespace

ScaledFp8Cast scaled_fp8_cast(const Tensor& x, const Tensor& scale, DType fp8_dtype) {
  return detail::call<ScaledFp8CastOp>({x}, scale, fp8_dtype);
}

ScaledMatmulResult scaled_matmul(const Tensor& a, const Tensor& b, const Tensor& a_scale_inv,
                                 const Tensor& b_scale_inv, const ScaledMatmulOptions& options) {
  check_operands(a, b, a_scale_inv, b_scale_inv, options);
  NoGradGuard no_grad;
  const int64_t m = a.size(0), k = a.size(1), n = b.size(1);
  ScaledMatmulResult r;
  r.out = empty({m, n}, {.dtype = options.out_dtype, .device = a.device()});
  if (m > 0 && n > 0) {
    if (k == 0) {
      r.out.fill_(0.0);
    } else {
      if (profiler::counting_flops())
        profiler::add_flops(OpId::scaled_matmul, 2.0 * static_cast<double>(m) * static_cast<double>(k) *
                                                     static_cast<double>(n));
      kernel<kernels::ScaledMatmulKernel>(OpId::scaled_matmul, a.device().type, a.dtype())(
          r.out, a, b, a_scale_inv.reshape({}), b_scale_inv.reshape({}), options.fast_accum);
    }
  }
  if (options.compute_amax) {
    // One more pass over out, on its device: max reports a NaN if out holds one, which the
    // scaling recipes treat as "keep the previous scale".
    r.amax = r.out.numel() == 0 ? zeros({}, {.device = a.device()}) : max(abs(r.out)).to(DType::f32);
  }
  return r;
}

}  // namespace precis
