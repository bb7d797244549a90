#pragma once
// The per-element and per-row math of the normalisation, softmax and class-index loss kernels,
// written once as host/device functions: the CUDA kernels (ops/cuda/norm.cu, softmax.cu,
// loss.cu) call them, and the CPU tests (tests/ops/norm_math_test.cpp) compose them on the host into the same row algorithms
// and check the results against the CPU kernels (ops/cpu/norm.cpp, softmax.cpp, loss.cpp), whose
// formulas they follow term by term. Internal header: nvcc compiles it, so plain structs and
// PRECIS_HD functions only. A is the compute type (float for f32/f16/bf16, double for f64);
// statistics and per-row finishes are done in double, as the CPU kernels do.
#include <cmath>
#include <cstdint>

#include "core/opmath.h"

namespace precis::kernels {

// ---- statistics --------------------------------------------------------------------------------

/// 1/sqrt(var + eps), in double, rounded once to A.
template <typename A>
PRECIS_HD_INLINE A norm_rstd(double var, double eps) {
  return static_cast<A>(1.0 / std::sqrt(var + eps));
}

/// Mean and biased variance of a batch-norm channel from the shifted sums s1 = Σ(x − k),
/// s2 = Σ(x − k)² over its m elements (k: the channel's first element, so a large mean costs no
/// precision). The variance is clamped at 0 (the one-pass form can round below it).
struct ShiftedMoments {
  double mean, var;
};
PRECIS_HD_INLINE ShiftedMoments moments_from_shifted_sums(double k, double s1, double s2, int64_t m) {
  const double dm = s1 / static_cast<double>(m);
  const double v = s2 / static_cast<double>(m) - dm * dm;
  return {k + dm, v > 0.0 ? v : 0.0};
}

/// A running statistic after one batch: (1 − momentum)·running + momentum·batch.
PRECIS_HD_INLINE double running_update(double running, double batch, double momentum) {
  return (1.0 - momentum) * running + momentum * batch;
}

/// The unbiased variance of m elements from the biased one (m > 1; m = 1 divides by zero, as the
/// CPU kernel and PyTorch do).
PRECIS_HD_INLINE double unbiased_variance(double biased, int64_t m) {
  return biased * static_cast<double>(m) / static_cast<double>(m - 1);
}

// ---- forward elements --------------------------------------------------------------------------

/// Batch / group norm output: (x − mean)·scale + shift with scale = w·rstd. Centring first keeps
/// the result accurate when |mean| or scale is large.
template <typename A>
PRECIS_HD_INLINE A norm_affine(A x, A mean, A scale, A shift) {
  return (x - mean) * scale + shift;
}

/// Layer norm output: (x − mean)·rstd·w + b, with has_w / has_b saying whether the parameters
/// exist (their values are ignored otherwise). Same operation order as the CPU kernel.
template <typename A>
PRECIS_HD_INLINE A layer_norm_element(A x, A mean, A rstd, bool has_w, A w, bool has_b, A b) {
  A y = (x - mean) * rstd;
  if (has_w) y = y * w;
  if (has_b) y = y + b;
  return y;
}

// ---- backward coefficients -----------------------------------------------------------------------

/// dx = a·g + b·(x − mean) + c, the affine form of every norm backward.
struct NormGradCoefs {
  double a, b, c;
};

/// Batch norm, per channel: w (1 without a weight), rstd, sg = Σ g and sgx = Σ g·(x − mean) over
/// the m elements of the channel. Training: dx = w·rstd·(g − sg/m − (x − mean)·rstd²·sgx/m);
/// eval: dx = g·w·rstd.
PRECIS_HD_INLINE NormGradCoefs batch_norm_grad_coefs(double w, double rstd, double sg, double sgx, int64_t m,
                                                     bool training) {
  if (!training) return {w * rstd, 0.0, 0.0};
  const double md = static_cast<double>(m);
  return {w * rstd, -w * rstd * rstd * rstd * sgx / md, -w * rstd * sg / md};
}

/// Group norm, per (sample, group) of l elements: with dy = g·w_c, sdy = Σ dy and
/// sdyx = Σ dy·x̂, dx = rstd·(dy − sdy/l − x̂·sdyx/l). Returns b and c of the affine form; a is
/// w_c·rstd per channel (group_norm_grad_a).
PRECIS_HD_INLINE NormGradCoefs group_norm_grad_coefs(double rstd, double sdy, double sdyx, int64_t l) {
  const double ld = static_cast<double>(l);
  return {0.0, -rstd * rstd * sdyx / ld, -rstd * sdy / ld};
}

/// Layer norm dx for one element: rstd·(g·w − m1 − x̂·m2) with m1 = mean(g·w), m2 = mean(g·w·x̂)
/// over the row (w = 1 without a weight: pass gw = g).
template <typename A>
PRECIS_HD_INLINE A layer_norm_grad_element(A gw, A xhat, A rstd, A m1, A m2) {
  return rstd * (gw - m1 - xhat * m2);
}

// ---- softmax -------------------------------------------------------------------------------------

/// softmax element: exp(x − max)·inv_sum, inv_sum = 1 / Σ exp(x − max).
template <typename A>
PRECIS_HD_INLINE A softmax_element(A x, A max, A inv_sum) {
  using std::exp;
  return exp(x - max) * inv_sum;
}

/// log_softmax element: (x − max) − log_sum, log_sum = log Σ exp(x − max).
template <typename A>
PRECIS_HD_INLINE A log_softmax_element(A x, A max, A log_sum) {
  return (x - max) - log_sum;
}

/// softmax backward: y·(g − Σ g·y).
template <typename A>
PRECIS_HD_INLINE A softmax_grad_element(A g, A y, A sum_gy) {
  return y * (g - sum_gy);
}

/// log_softmax backward: g − exp(y)·Σ g.
template <typename A>
PRECIS_HD_INLINE A log_softmax_grad_element(A g, A y, A sum_g) {
  using std::exp;
  return g - exp(y) * sum_g;
}

// ---- class-index losses ------------------------------------------------------------------------------

/// One row's cross-entropy with label smoothing eps (ops/contracts/kernels_loss.h): with m the row max,
/// log_sum = log Σ exp(x − m), x_t the target logit, w_t its class weight, w_total = Σ w_c and
/// gap = Σ w_c·(m − x_c) (needed only when eps ≠ 0):
/// (1 − eps)·w_t·(log_sum − (x_t − m)) + eps/C·(w_total·log_sum + gap).
template <typename A>
PRECIS_HD_INLINE A cross_entropy_row_loss(A m, A log_sum, A x_t, A w_t, A eps, int64_t classes, A w_total, A gap) {
  A value = (A(1) - eps) * w_t * (log_sum - (x_t - m));
  if (eps != A(0)) value += eps / static_cast<A>(classes) * (w_total * log_sum + gap);
  return value;
}

/// The per-row constants of the cross-entropy gradient: grad_x_j = scale·exp(x_j − m) − s·w_j
/// − [j = t]·hit (ops/contracts/kernels_loss.h), for the row gradient g.
template <typename A>
struct CrossEntropyGradCoefs {
  A scale, s, hit;
};
template <typename A>
PRECIS_HD_INLINE CrossEntropyGradCoefs<A> cross_entropy_grad_coefs(A g, A w_t, A eps, int64_t classes, A w_total,
                                                                   A log_sum) {
  using std::exp;
  const A smooth = eps / static_cast<A>(classes);
  const A a = g * ((A(1) - eps) * w_t + smooth * w_total);
  return {a * exp(-log_sum), g * smooth, g * (A(1) - eps) * w_t};
}

/// One element of the cross-entropy gradient from cross_entropy_grad_coefs (w_j = 1 without class
/// weights; is_target: j is the row's target).
template <typename A>
PRECIS_HD_INLINE A cross_entropy_grad_element(A x, A m, const CrossEntropyGradCoefs<A>& k, A w_j, bool is_target) {
  using std::exp;
  A o = k.scale * exp(x - m);
  if (k.s != A(0)) o -= k.s * w_j;
  if (is_target) o -= k.hit;
  return o;
}

}  // namespace precis::kernels
