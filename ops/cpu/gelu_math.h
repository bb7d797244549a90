#pragma once
// gelu and its derivative, shared by the gelu / gelu_backward kernels (ops/cpu/unary.cpp) and
// linear_gelu's epilogue kernels (ops/cpu/gelu_epilogue.cpp), so that the fused op evaluates the
// very same arithmetic as the unfused pair and its outputs and gradients can be bit for bit the
// pair's. The erf form in fp32 (f32, and f16/bf16 computing in fp32) is ops/cpu/vec_gelu.h's
// explicit-SIMD function, whose bits do not depend on the split; the tanh form and f64 are
// Eigen array expressions.
#include <Eigen/Core>
#include <unsupported/Eigen/SpecialFunctions>

#include "ops/cpu/elementwise_util.h"
#include "ops/cpu/vec_exp.h"
#include "ops/cpu/vec_gelu.h"

namespace precis::cpu::gelu_math {

template <typename C>
using Arr = Eigen::Array<C, Eigen::Dynamic, 1>;
template <typename C>
using ArrMap = Eigen::Map<Arr<C>>;
template <typename C>
using ConstArrMap = Eigen::Map<const Arr<C>>;

/// The grain of gelu's kernels (and of the epilogue's, which must split work identically for its
/// results to be the pair's: Eigen evaluates a block's tail, and an unaligned head, with scalar
/// code whose last bits can differ from the vector code's).
inline constexpr int64_t kGrain = 8192;

inline constexpr double kSqrt1_2 = 0.70710678118654752440;     // 1/√2
inline constexpr double kInvSqrt2Pi = 0.39894228040143267794;  // 1/√(2π)
inline constexpr double kSqrt2OverPi = 0.79788456080286535588;  // √(2/π)
inline constexpr double kGeluCoeff = 0.044715;

/// dst = gelu(x) in x's scalar type; tanh_form: the tanh approximation, else the erf form.
template <typename D, typename X>
void gelu(D& dst, const X& x, bool tanh_form) {
  using C = typename D::Scalar;
  if constexpr (std::is_same_v<C, float>) {
    if (!tanh_form) return gelu_erf(x.data(), dst.data(), nullptr, x.size());
  }
  if (tanh_form) {
    dst = C(0.5) * x * (C(1) + (C(kSqrt2OverPi) * (x + C(kGeluCoeff) * x * x * x)).tanh());
  } else {
    // f64: Eigen's erf. max(0) guards 1 + erf against an approximation overshooting erf < -1.
    dst = C(0.5) * x * (C(1) + (x * C(kSqrt1_2)).erf()).max(C(0));
  }
}

/// e = exp(e) in place: vec_exp.h's vectorised exp for fp32, Eigen's for f64.
template <typename C>
void exp_in_place(ArrMap<C>& e) {
  if constexpr (std::is_same_v<C, float>) {
    exp_array(e.data(), e.data(), e.size());
  } else {
    e = e.exp();
  }
}

/// Calls assign(d) with d the Eigen expression of gelu'(x) (x: at most kBlock elements; d reads
/// stack buffers that live only during the call). gelu_backward assigns g·d, linear_gelu's
/// forward d itself, so both round the same products.
template <typename C, typename X, typename Assign>
void with_derivative(const X& x, bool tanh_form, Assign&& assign) {
  if (tanh_form) {
    // y = ½x(1 + t), t = tanh(u), u = k(x + c·x³): y' = ½(1 + t) + ½x(1 − t²)·k(1 + 3c·x²).
    // With e = exp(−2|u|): ½(1 + t) = 1/(1 + e) for u >= 0 and e/(1 + e) for u < 0, and
    // 1 − t² = 4e/(1 + e)². Neither cancels where t is near ±1 (|x| > 2), where 1 − t·t and
    // 1 + t lost up to 3.5x the f32 tolerance (measured over [-8, 8]; now 0.06x).
    alignas(64) C ubuf[kBlock];
    alignas(64) C ebuf[kBlock];
    ArrMap<C> u(ubuf, x.size()), e(ebuf, x.size());
    u = C(kSqrt2OverPi) * (x + C(kGeluCoeff) * x * x * x);
    e = C(-2) * u.abs();
    exp_in_place(e);
    assign((u >= C(0)).select(C(1), e) / (C(1) + e) +
           C(2) * x * e / (C(1) + e).square() * C(kSqrt2OverPi) * (C(1) + C(3 * kGeluCoeff) * x * x));
  } else {
    // y = x·Φ(x): y' = Φ(x) + x·φ(x), φ(x) = exp(−x²/2)/√(2π).
    alignas(64) C ebuf[kBlock];
    ArrMap<C> e(ebuf, x.size());
    e = C(-0.5) * x * x;
    exp_in_place(e);
    assign(C(0.5) * (C(1) + (x * C(kSqrt1_2)).erf()).max(C(0)) + x * e * C(kInvSqrt2Pi));
  }
}

/// dst = g·gelu'(x) (gelu_backward's values). x: at most kBlock elements.
template <typename C, typename D, typename G, typename X>
void gelu_backward(D& dst, const G& g, const X& x, bool tanh_form) {
  if constexpr (std::is_same_v<C, float>) {
    if (!tanh_form) return gelu_erf_backward(g.data(), x.data(), dst.data(), x.size());
  }
  with_derivative<C>(x, tanh_form, [&](const auto& d) { dst = g * d; });
}

/// dst = gelu'(x), the very values gelu_backward multiplies by g. x: at most kBlock elements.
template <typename C, typename D, typename X>
void derivative(D& dst, const X& x, bool tanh_form) {
  if constexpr (std::is_same_v<C, float>) {
    if (!tanh_form) return gelu_erf(x.data(), nullptr, dst.data(), x.size());
  }
  with_derivative<C>(x, tanh_form, [&](const auto& d) { dst = d; });
}

/// The erf form's gelu and gelu' in one pass: out = gelu(x) and deriv = gelu'(x), bit for bit
/// what gelu() and derivative() give. fp32: vec_gelu.h's one pass. f64: one erf per element, kept
/// in a buffer, and so is x·φ(x), which with_derivative's code rounds before adding Φ(x) but which
/// GCC fused into an FMA with that sum here when it was one expression (the last bits then
/// differed). x: at most kBlock elements; out may be x itself, deriv may not.
template <typename C, typename X, typename O, typename D>
void gelu_and_derivative_erf(O& out, D& deriv, const X& x) {
  if constexpr (std::is_same_v<C, float>) {
    gelu_erf(x.data(), out.data(), deriv.data(), x.size());
  } else {
    alignas(64) C erf_buf[kBlock];
    alignas(64) C ebuf[kBlock];
    alignas(64) C pbuf[kBlock];
    ArrMap<C> erf(erf_buf, x.size()), e(ebuf, x.size()), xphi(pbuf, x.size());
    erf = (x * C(kSqrt1_2)).erf();
    e = C(-0.5) * x * x;
    exp_in_place(e);
    xphi = x * e * C(kInvSqrt2Pi);
    deriv = C(0.5) * (C(1) + erf).max(C(0)) + xphi;
    out = C(0.5) * x * (C(1) + erf).max(C(0));
  }
}

}  // namespace precis::cpu::gelu_math
