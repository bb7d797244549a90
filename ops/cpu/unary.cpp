// Unary element-wise kernels (neg ... pow_scalar) and the backward kernels of relu and gelu.
// Contiguous f32/f64 rows run as Eigen array expressions on the tensors' memory (vectorised
// exp/log/tanh/erf); every other row (strided, f16/bf16) goes through kBlock-sized buffers in the
// compute type: f16/bf16 compute in fp32, f64 in f64, integers in themselves. gelu and its
// backward in the erf form compute in fp32 through ops/cpu/vec_gelu.h (Φ and φ from one
// exponential, explicit SIMD), the tanh form and f64 as Eigen expressions (ops/cpu/gelu_math.h).
#include <cmath>
#include <limits>
#include <type_traits>

#include <Eigen/Core>
#include <unsupported/Eigen/SpecialFunctions>

#include "ops/cpu/cpu_backend.h"
#include "core/dtype_visit.h"
#include "core/opmath.h"
#include "ops/cpu/elementwise_util.h"
#include "ops/cpu/gelu_math.h"
#include "ops/cpu/loops.h"
#include "ops/contracts/kernels.h"
#include "ops/op_table.h"

namespace precis::cpu {

namespace {

using gelu_math::Arr;  // Eigen's dynamic column array and its maps, shared with gelu's math
using gelu_math::ArrMap;
using gelu_math::ConstArrMap;

/// Transcendental ops cost tens of cycles per element: smaller chunks still amortise a task.
constexpr int64_t kTranscendentalGrain = gelu_math::kGrain;

// Each functor assigns f(x) to dst (both Eigen arrays of the compute type C); `param` is the
// kernel's parameter (pow's exponent, gelu's approximation flag). kIntegers: has i32/i64 kernels.
template <bool Integers>
struct NoParam {  // the base of the ops that take no parameter
  static constexpr bool kIntegers = Integers;
  explicit NoParam(double) {}
};
// The ops that are one Eigen array expression of x.
#define PRECIS_EIGEN_UNARY(Name, integers, expr)                                          \
  struct Name : NoParam<integers> {                                                      \
    using NoParam::NoParam;                                                              \
    template <typename D, typename X> void operator()(D& dst, const X& x) const { dst = expr; } \
  };
PRECIS_EIGEN_UNARY(AbsOp, true, x.abs())
// Eigen's vectorised erf: a rational approximation for f32, about 1e-7 relative to |x|.
PRECIS_EIGEN_UNARY(ErfOp, false, x.erf())
#undef PRECIS_EIGEN_UNARY

// Plain loops where Eigen's packet math is wrong at the edges; the compiler vectorises them (this
// file is built with -fno-math-errno, so std::sqrt is the bare instruction).
template <typename D, typename X, typename F> void each(D& dst, const X& x, F f) {
  using C = typename D::Scalar;
  C* o = dst.data();
  const C* p = x.data();
  for (Eigen::Index i = 0; i < dst.size(); ++i) o[i] = f(p[i]);
}
// Eigen's packet negation is 0 − x, which turns +0 into +0 instead of −0.
struct NegOp : NoParam<true> {
  using NoParam::NoParam;
  template <typename D, typename X> void operator()(D& dst, const X& x) const {
    each(dst, x, [](auto v) { return -v; });
  }
};
// Exact square roots: under EIGEN_FAST_MATH (Eigen's default) its f32 packet sqrt is an
// approximate reciprocal square root with one Newton step: 1-2 ulp off, sqrt(inf) = NaN and
// subnormal inputs flushed to 0 — from the 8th element of a row on, the scalar tail being exact.
template <typename D, typename X> void exact_sqrt(D& dst, const X& x) {
  each(dst, x, [](auto v) { return std::sqrt(v); });
}
struct SqrtOp : NoParam<false> {
  using NoParam::NoParam;
  template <typename D, typename X> void operator()(D& dst, const X& x) const { exact_sqrt(dst, x); }
};
struct LogOp : NoParam<false> {
  using NoParam::NoParam;
  template <typename D, typename X> void operator()(D& dst, const X& x) const { dst = x.log(); }
  // Eigen's vectorised log clamps its argument to the smallest normal number, so a subnormal x
  // gave log(FLT_MIN) = -87.34 (f32) where log(1e-40) is -92.10: those take the scalar log.
  template <typename C> static void fixup(C* out, const C* x, int64_t n) {
    for (int64_t i = 0; i < n; ++i)
      if (x[i] > C(0) && x[i] < std::numeric_limits<C>::min()) out[i] = std::log(x[i]);
  }
};
struct TanhOp : NoParam<false> {
  using NoParam::NoParam;
  template <typename D, typename X> void operator()(D& dst, const X& x) const { dst = x.tanh(); }
  // Eigen's f32 tanh clamps |x| to 7.9053 and returns ±1 beyond, where tanh(8.03) is 1 − 2.4e-7
  // in f32 (PyTorch's value); those take the scalar tanh (f64 is scalar already).
  template <typename C> static void fixup(C* out, const C* x, int64_t n) {
    if constexpr (std::is_same_v<C, float>)
      for (int64_t i = 0; i < n; ++i)
        if (std::abs(x[i]) > 7.9f && std::abs(x[i]) < 9.1f) out[i] = std::tanh(x[i]);
  }
};

struct ExpOp : NoParam<false> {
  using NoParam::NoParam;
  template <typename D, typename X> void operator()(D& dst, const X& x) const { dst = x.exp(); }
  // Eigen 3.4's vectorised exp clamps its argument from below, so exp(-inf) and exp(-1000) come
  // out as a subnormal floor (2.9e-39 in f32, 5.6e-309 in f64) instead of 0, which would leak
  // weight into -inf-masked softmax entries. Below ln(smallest normal) the result is set to 0
  // (flushing true subnormals, an error under 1.2e-38 / 2.3e-308).
  template <typename C> static void fixup(C* out, const C* x, int64_t n) {
    const C lo = std::is_same_v<C, float> ? C(-87.336544750553) : C(-708.39641853226408);
    for (int64_t i = 0; i < n; ++i) out[i] = x[i] < lo ? C(0) : out[i];
  }
};
struct RsqrtOp : NoParam<false> {
  using NoParam::NoParam;
  // 1 / sqrt(x) with the exact root (Eigen's rsqrt and sqrt are approximations, see exact_sqrt):
  // PyTorch's formula, so rsqrt(inf) = 0 and rsqrt(0) = inf.
  template <typename D, typename X> void operator()(D& dst, const X& x) const {
    using C = typename D::Scalar;
    each(dst, x, [](C v) { return C(1) / std::sqrt(v); });
  }
};
struct SigmoidOp : NoParam<false> {
  using NoParam::NoParam;
  // 1 / (1 + e^-x): saturates to 0 for very negative x (e^-x = inf) without producing NaN.
  template <typename D, typename X> void operator()(D& dst, const X& x) const {
    using C = typename D::Scalar;
    dst = C(1) / (C(1) + (-x).exp());
  }
};
struct SiluOp : NoParam<false> {
  using NoParam::NoParam;
  // x / (1 + e^-x): for very negative x, e^-x = inf gives -0, the limit, without NaN.
  template <typename D, typename X> void operator()(D& dst, const X& x) const {
    using C = typename D::Scalar;
    dst = x / (C(1) + (-x).exp());
  }
};
struct ReluOp : NoParam<true> {
  using NoParam::NoParam;
  // Eigen's max(x, 0) returns x when x is NaN (std::max semantics, also in its packet path), so
  // NaN passes through as in PyTorch; select() would not vectorise in Eigen 3.4.
  template <typename D, typename X> void operator()(D& dst, const X& x) const {
    using C = typename D::Scalar;
    dst = x.max(C(0));
  }
};

struct GeluOp {
  static constexpr bool kIntegers = false;
  explicit GeluOp(double approx) : tanh_form(approx != 0.0) {}
  bool tanh_form;
  template <typename D, typename X> void operator()(D& dst, const X& x) const { gelu_math::gelu(dst, x, tanh_form); }
};

struct PowOp {
  static constexpr bool kIntegers = false;
  explicit PowOp(double e) : e(e) {}
  double e;
  // Common exponents as multiplies/roots: exact where std::pow would round, and vectorised.
  template <typename D, typename X> void operator()(D& dst, const X& x) const {
    using C = typename D::Scalar;
    if (e == 0.0) {
      dst.setConstant(C(1));  // PyTorch: x^0 = 1 even for NaN
    } else if (e == 1.0) {
      dst = x;
    } else if (e == 2.0) {
      dst = x * x;
    } else if (e == 3.0) {
      dst = x * x * x;
    } else if (e == 0.5) {
      exact_sqrt(dst, x);
    } else if (e == -0.5) {
      each(dst, x, [](C v) { return C(1) / std::sqrt(v); });
    } else if (e == -1.0) {
      dst = x.inverse();
    } else if (e == -2.0) {
      dst = (x * x).inverse();
    } else {
      const C ce = static_cast<C>(e);
      dst = x.unaryExpr([ce](C v) { return std::pow(v, ce); });
    }
  }
};

// out: dense (contiguous or x's layout; parallel_rows walks it in memory order); x: same shape,
// any strides. Computes in opmath_t<T>.
template <typename T, typename Op, int64_t Grain = kElementwiseGrain>
void unary_kernel(const Tensor& out, const Tensor& x, double param) {
  using C = opmath_t<T>;
  // Ops may define fixup(out, x, n): a pass over the computed values to correct edge cases.
  constexpr bool kHasFixup = requires(C* p) { Op::fixup(p, p, int64_t{0}); };
  const Op op(param);
  T* o = static_cast<T*>(out.data_ptr());
  const T* in = static_cast<const T*>(x.data_ptr());
  parallel_rows<2>(
      {&out, &x},
      [&](std::array<int64_t, 2> off, int64_t n, std::array<int64_t, 2> st) {
        T* op_ = o + off[0];
        const T* xp = in + off[1];
        if constexpr (std::is_same_v<T, C>) {
          if (st[0] == 1 && st[1] == 1) {
            ArrMap<C> dst(op_, n);
            op(dst, ConstArrMap<C>(xp, n));
            if constexpr (kHasFixup) Op::fixup(op_, xp, n);
            return;
          }
        }
        alignas(64) C xbuf[kBlock];
        alignas(64) C obuf[kBlock];
        for (int64_t b = 0; b < n; b += kBlock) {
          const int64_t m = std::min(kBlock, n - b);
          load_block<C>(xp + b * st[1], st[1], xbuf, m);
          ArrMap<C> dst(obuf, m);
          op(dst, ConstArrMap<C>(xbuf, m));
          if constexpr (kHasFixup) Op::fixup(obuf, xbuf, m);
          store_block<T>(obuf, op_ + b * st[0], st[0], m);
        }
      },
      Grain);
}

// Backward functors: dst = grad · f'(x).
struct ReluBackwardOp {
  explicit ReluBackwardOp(double) {}
  // PyTorch's threshold_backward: zero where x <= 0 (the gradient at 0 is 0; NaN x passes g).
  // A plain loop with both loads unconditional vectorises to a blend; Eigen 3.4's select() does
  // not vectorise.
  template <typename D, typename G, typename X> void operator()(D& dst, const G& g, const X& x) const {
    using C = typename D::Scalar;
    C* o = dst.data();
    const C* gp = g.data();
    const C* xp = x.data();
    for (Eigen::Index i = 0; i < dst.size(); ++i) {
      const C gv = gp[i], xv = xp[i];
      o[i] = xv <= C(0) ? C(0) : gv;
    }
  }
};

struct GeluBackwardOp {
  explicit GeluBackwardOp(double approx) : tanh_form(approx != 0.0) {}
  bool tanh_form;
  // callers pass at most kBlock elements (ops/cpu/gelu_math.h keeps temporaries of that size).
  template <typename D, typename G, typename X> void operator()(D& dst, const G& g, const X& x) const {
    using C = typename D::Scalar;
    gelu_math::gelu_backward<C>(dst, g, x, tanh_form);
  }
};

// out: dense (contiguous or the operands' layout); grad, x: out's shape, any strides. Computes in opmath_t<T>, kBlock elements
// at a time (the functors may keep a kBlock temporary on the stack).
template <typename T, typename Op>
void backward_kernel(const Tensor& out, const Tensor& grad, const Tensor& x, double param) {
  using C = opmath_t<T>;
  const Op op(param);
  T* o = static_cast<T*>(out.data_ptr());
  const T* gs = static_cast<const T*>(grad.data_ptr());
  const T* xs = static_cast<const T*>(x.data_ptr());
  parallel_rows<3>(
      {&out, &grad, &x},
      [&](std::array<int64_t, 3> off, int64_t n, std::array<int64_t, 3> st) {
        T* op_ = o + off[0];
        const T* gp = gs + off[1];
        const T* xp = xs + off[2];
        if constexpr (std::is_same_v<T, C>) {
          if (st[0] == 1 && st[1] == 1 && st[2] == 1) {
            for (int64_t b = 0; b < n; b += kBlock) {
              const int64_t m = std::min(kBlock, n - b);
              ArrMap<C> dst(op_ + b, m);
              op(dst, ConstArrMap<C>(gp + b, m), ConstArrMap<C>(xp + b, m));
            }
            return;
          }
        }
        alignas(64) C gbuf[kBlock];
        alignas(64) C xbuf[kBlock];
        alignas(64) C obuf[kBlock];
        for (int64_t b = 0; b < n; b += kBlock) {
          const int64_t m = std::min(kBlock, n - b);
          load_block<C>(gp + b * st[1], st[1], gbuf, m);
          load_block<C>(xp + b * st[2], st[2], xbuf, m);
          ArrMap<C> dst(obuf, m);
          op(dst, ConstArrMap<C>(gbuf, m), ConstArrMap<C>(xbuf, m));
          store_block<T>(obuf, op_ + b * st[0], st[0], m);
        }
      },
      kTranscendentalGrain);
}

constexpr DType kFloating[] = {DType::f32, DType::f64, DType::f16, DType::bf16};
constexpr DType kSigned[] = {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i32, DType::i64};

template <typename Op, int64_t Grain, size_t N>
void register_unary(OpId op, const DType (&dtypes)[N]) {
  for (DType dt : dtypes)
    visit_dtype(dt, [&]<typename T>() {
      if constexpr (std::is_floating_point_v<opmath_t<T>> || (Op::kIntegers && std::is_integral_v<T> &&
                                                                !std::is_same_v<T, bool>))
        register_kernel<kernels::UnaryKernel>(op, DeviceType::cpu, dt, &unary_kernel<T, Op, Grain>);
    });
}

template <typename Op>
void register_backward(OpId op) {
  for (DType dt : kFloating)
    visit_dtype(dt, [&]<typename T>() {
      if constexpr (std::is_floating_point_v<opmath_t<T>>)
        register_kernel<kernels::BinaryKernel>(op, DeviceType::cpu, dt, &backward_kernel<T, Op>);
    });
}

}  // namespace

void register_unary_kernels() {
  constexpr int64_t kCheap = kElementwiseGrain;
  constexpr int64_t kCostly = kTranscendentalGrain;
  register_unary<NegOp, kCheap>(OpId::neg, kSigned);
  register_unary<AbsOp, kCheap>(OpId::abs, kSigned);
  register_unary<ReluOp, kCheap>(OpId::relu, kSigned);
  register_unary<ExpOp, kCostly>(OpId::exp, kFloating);
  register_unary<LogOp, kCostly>(OpId::log, kFloating);
  register_unary<SqrtOp, kCheap>(OpId::sqrt, kFloating);
  register_unary<RsqrtOp, kCheap>(OpId::rsqrt, kFloating);
  register_unary<TanhOp, kCostly>(OpId::tanh, kFloating);
  register_unary<SigmoidOp, kCostly>(OpId::sigmoid, kFloating);
  register_unary<GeluOp, kCostly>(OpId::gelu, kFloating);
  register_unary<PowOp, kCostly>(OpId::pow_scalar, kFloating);
  register_unary<ErfOp, kCostly>(OpId::erf, kFloating);
  register_unary<SiluOp, kCostly>(OpId::silu, kFloating);
  register_backward<ReluBackwardOp>(OpId::relu_backward);
  register_backward<GeluBackwardOp>(OpId::gelu_backward);
}

}  // namespace precis::cpu
