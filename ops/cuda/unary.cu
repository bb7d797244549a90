// Unary element-wise kernels (neg ... erf) and the backward kernels of relu and gelu on CUDA
// devices. f16/bf16 load into fp32, compute and round once on store; f64 computes in f64;
// integers (neg, abs, relu) in their own type. The formulas and edge cases follow the CPU kernels
// (ops/cpu/unary.cpp): relu passes NaN, sigmoid saturates without NaN, pow has exact special
// exponents, gelu's erf form clamps 1 + erf at 0.
#include "ops/cuda/device_math.cuh"

namespace precis::cuda {

namespace {

constexpr double kSqrt1_2 = 0.70710678118654752440;     // 1/√2
constexpr double kInvSqrt2Pi = 0.39894228040143267794;  // 1/√(2π)
constexpr double kSqrt2OverPi = 0.79788456080286535588;  // √(2/π)
constexpr double kGeluCoeff = 0.044715;

// The CUDA math library overloads exp, log, ... for float and double (no float→double promotion),
// so one template serves both compute types.
template <typename M>
__device__ __forceinline__ M gelu_forward(M x, bool tanh_form) {
  if (tanh_form) return M(0.5) * x * (M(1) + ::tanh(M(kSqrt2OverPi) * (x + M(kGeluCoeff) * x * x * x)));
  const M one_plus = M(1) + ::erf(x * M(kSqrt1_2));
  return M(0.5) * x * (one_plus > M(0) ? one_plus : M(0));
}

template <typename M>
__device__ __forceinline__ M pow_scalar(M x, M e) {
  // Common exponents as multiplies/roots, exactly as the CPU kernel.
  if (e == M(0)) return M(1);  // x^0 = 1 even for NaN
  if (e == M(1)) return x;
  if (e == M(2)) return x * x;
  if (e == M(3)) return x * x * x;
  if (e == M(0.5)) return ::sqrt(x);
  if (e == M(-0.5)) return M(1) / ::sqrt(x);
  if (e == M(-1)) return M(1) / x;
  if (e == M(-2)) return M(1) / (x * x);
  return ::pow(x, e);
}

// M: the compute type; param: pow's exponent or gelu's flag, already in M.
template <UnaryOp Op, typename M>
__device__ __forceinline__ M apply(M x, M param) {
  if constexpr (Op == UnaryOp::neg) return -x;
  else if constexpr (Op == UnaryOp::abs) {
    if constexpr (std::is_floating_point_v<M>) return ::fabs(x);  // abs(-0.0) is +0.0, as on the CPU
    else return x < M(0) ? -x : x;
  }
  else if constexpr (Op == UnaryOp::relu) {
    if constexpr (std::is_floating_point_v<M>) return (x > M(0) || x != x) ? x : M(0);  // NaN passes
    else return x > M(0) ? x : M(0);
  } else if constexpr (Op == UnaryOp::exp) return ::exp(x);
  else if constexpr (Op == UnaryOp::log) return ::log(x);
  else if constexpr (Op == UnaryOp::sqrt) return ::sqrt(x);
  else if constexpr (Op == UnaryOp::rsqrt) return M(1) / ::sqrt(x);  // exact division, not the rsqrt approximation
  else if constexpr (Op == UnaryOp::tanh) return ::tanh(x);
  else if constexpr (Op == UnaryOp::sigmoid) return M(1) / (M(1) + ::exp(-x));
  else if constexpr (Op == UnaryOp::gelu) return gelu_forward(x, param != M(0));
  else if constexpr (Op == UnaryOp::pow) return pow_scalar(x, param);
  else if constexpr (Op == UnaryOp::silu) return x / (M(1) + ::exp(-x));
  else return ::erf(x);
}

// out, x: (numel) contiguous.
template <UnaryOp Op, typename T>
__global__ void unary_contiguous_kernel(T* __restrict__ out, const T* __restrict__ x, opmath_t<T> param, int64_t n) {
  PRECIS_GRID_STRIDE_LOOP(i, n) { out[i] = store_op<T>(apply<Op>(load_op(x[i]), param)); }
}

// Operands 0, 1 = out, x over calc's shape.
template <UnaryOp Op, typename T>
__global__ void unary_strided_kernel(T* __restrict__ out, const T* __restrict__ x, opmath_t<T> param, int64_t n,
                                     const OffsetCalc calc) {
  PRECIS_GRID_STRIDE_LOOP(i, n) {
    int64_t off[2];
    compute_offsets<2>(calc, i, off);
    out[off[0]] = store_op<T>(apply<Op>(load_op(x[off[1]]), param));
  }
}

constexpr bool has_integer_kernel(UnaryOp op) {
  return op == UnaryOp::neg || op == UnaryOp::abs || op == UnaryOp::relu;
}

template <UnaryOp Op>
void launch_op(DType dtype, void* out, const void* x, double param, const ElementwiseLaunch& l) {
  visit_device_dtype(dtype, [&]<typename T>() {
    // Instantiate only the supported (op, dtype) pairs; the caller checked unary_supported.
    if constexpr (std::is_floating_point_v<opmath_t<T>> ||
                  (has_integer_kernel(Op) && std::is_integral_v<T> && !std::is_same_v<T, bool>)) {
      T* o = static_cast<T*>(out);
      const T* px = static_cast<const T*>(x);
      const auto p = static_cast<opmath_t<T>>(param);
      if (l.contiguous) {
        unary_contiguous_kernel<Op, T><<<grid_for(l.numel), kThreads, 0, l.stream>>>(o, px, p, l.numel);
      } else {
        unary_strided_kernel<Op, T><<<grid_for(l.numel), kThreads, 0, l.stream>>>(o, px, p, l.numel, l.calc);
      }
    }
  });
}

// ---- relu / gelu backward: out = grad · f'(x) ----------------------------------------------------

template <ActivationBackward Op, typename M>
__device__ __forceinline__ M backward(M g, M x, bool tanh_form) {
  if constexpr (Op == ActivationBackward::relu) {
    return x <= M(0) ? M(0) : g;  // the gradient at 0 is 0; NaN x passes g (threshold_backward)
  } else if (tanh_form) {
    // y = ½x(1 + t), t = tanh(u), u = k(x + c·x³): y' = ½(1 + t) + ½x(1 − t²)·k(1 + 3c·x²),
    // written with e = exp(−2|u|) so nothing cancels where t is near ±1 (as the CPU kernel).
    const M u = M(kSqrt2OverPi) * (x + M(kGeluCoeff) * x * x * x);
    const M e = ::exp(M(-2) * ::fabs(u));
    const M inv = M(1) / (M(1) + e);
    const M half_one_plus_t = u >= M(0) ? inv : e * inv;
    return g * (half_one_plus_t + M(2) * x * e * inv * inv * M(kSqrt2OverPi) * (M(1) + M(3 * kGeluCoeff) * x * x));
  } else {
    // y = x·Φ(x): y' = Φ(x) + x·φ(x)
    const M one_plus = M(1) + ::erf(x * M(kSqrt1_2));
    M x_phi = x * ::exp(M(-0.5) * x * x) * M(kInvSqrt2Pi);
    // fp32 (and f16/bf16) as the CPU's vec_gelu.h, which clamps x: x·φ(x) is 0 at ±inf, so
    // gelu'(+inf) = 1 and gelu'(-inf) = 0 rather than inf·0. f64 keeps NaN there, as the CPU's.
    if constexpr (std::is_same_v<M, float>) x_phi = ::isinf(x) ? M(0) : x_phi;
    return g * (M(0.5) * (one_plus > M(0) ? one_plus : M(0)) + x_phi);
  }
}

// out, grad, x: (numel) contiguous.
template <ActivationBackward Op, typename T>
__global__ void backward_contiguous_kernel(T* __restrict__ out, const T* __restrict__ grad, const T* __restrict__ x,
                                           bool tanh_form, int64_t n) {
  PRECIS_GRID_STRIDE_LOOP(i, n) { out[i] = store_op<T>(backward<Op>(load_op(grad[i]), load_op(x[i]), tanh_form)); }
}

// Operands 0, 1, 2 = out, grad, x over calc's shape.
template <ActivationBackward Op, typename T>
__global__ void backward_strided_kernel(T* __restrict__ out, const T* __restrict__ grad, const T* __restrict__ x,
                                        bool tanh_form, int64_t n, const OffsetCalc calc) {
  PRECIS_GRID_STRIDE_LOOP(i, n) {
    int64_t off[3];
    compute_offsets<3>(calc, i, off);
    out[off[0]] = store_op<T>(backward<Op>(load_op(grad[off[1]]), load_op(x[off[2]]), tanh_form));
  }
}

template <ActivationBackward Op>
void launch_backward_op(DType dtype, void* out, const void* grad, const void* x, bool tanh_form,
                        const ElementwiseLaunch& l) {
  visit_device_dtype(dtype, [&]<typename T>() {
    if constexpr (std::is_floating_point_v<opmath_t<T>>) {
      T* o = static_cast<T*>(out);
      const T* pg = static_cast<const T*>(grad);
      const T* px = static_cast<const T*>(x);
      if (l.contiguous) {
        backward_contiguous_kernel<Op, T><<<grid_for(l.numel), kThreads, 0, l.stream>>>(o, pg, px, tanh_form, l.numel);
      } else {
        backward_strided_kernel<Op, T><<<grid_for(l.numel), kThreads, 0, l.stream>>>(o, pg, px, tanh_form, l.numel,
                                                                                     l.calc);
      }
    }
  });
}

constexpr bool is_floating_dtype(DType t) {
  return t == DType::f32 || t == DType::f64 || t == DType::f16 || t == DType::bf16;
}

}  // namespace

bool unary_supported(UnaryOp op, DType dtype) {
  return is_floating_dtype(dtype) || (has_integer_kernel(op) && (dtype == DType::i32 || dtype == DType::i64));
}

void launch_unary(UnaryOp op, DType dtype, void* out, const void* x, double param, const ElementwiseLaunch& l) {
  PRECIS_INTERNAL_ASSERT(unary_supported(op, dtype), "launch_unary: unsupported dtype ", dtype_name(dtype));
  if (l.numel == 0) return;
  switch (op) {
    case UnaryOp::neg: launch_op<UnaryOp::neg>(dtype, out, x, param, l); break;
    case UnaryOp::abs: launch_op<UnaryOp::abs>(dtype, out, x, param, l); break;
    case UnaryOp::exp: launch_op<UnaryOp::exp>(dtype, out, x, param, l); break;
    case UnaryOp::log: launch_op<UnaryOp::log>(dtype, out, x, param, l); break;
    case UnaryOp::sqrt: launch_op<UnaryOp::sqrt>(dtype, out, x, param, l); break;
    case UnaryOp::rsqrt: launch_op<UnaryOp::rsqrt>(dtype, out, x, param, l); break;
    case UnaryOp::tanh: launch_op<UnaryOp::tanh>(dtype, out, x, param, l); break;
    case UnaryOp::sigmoid: launch_op<UnaryOp::sigmoid>(dtype, out, x, param, l); break;
    case UnaryOp::relu: launch_op<UnaryOp::relu>(dtype, out, x, param, l); break;
    case UnaryOp::gelu: launch_op<UnaryOp::gelu>(dtype, out, x, param, l); break;
    case UnaryOp::pow: launch_op<UnaryOp::pow>(dtype, out, x, param, l); break;
    case UnaryOp::erf: launch_op<UnaryOp::erf>(dtype, out, x, param, l); break;
    case UnaryOp::silu: launch_op<UnaryOp::silu>(dtype, out, x, param, l); break;
  }
  PRECIS_CUDA_CHECK(cudaGetLastError(), "launching the unary kernel (", dtype_name(dtype), ", ", l.numel,
                    " elements)");
}

void launch_activation_backward(ActivationBackward op, DType dtype, void* out, const void* grad, const void* x,
                                double param, const ElementwiseLaunch& l) {
  PRECIS_INTERNAL_ASSERT(is_floating_dtype(dtype), "launch_activation_backward: unsupported dtype ",
                         dtype_name(dtype));
  if (l.numel == 0) return;
  const bool tanh_form = param != 0.0;
  if (op == ActivationBackward::relu) {
    launch_backward_op<ActivationBackward::relu>(dtype, out, grad, x, tanh_form, l);
  } else {
    launch_backward_op<ActivationBackward::gelu>(dtype, out, grad, x, tanh_form, l);
  }
  PRECIS_CUDA_CHECK(cudaGetLastError(), "launching the activation backward kernel (", dtype_name(dtype), ", ",
                    l.numel, " elements)");
}

}  // namespace precis::cuda
