#pragma once
// The per-element math of the optimizer and gradient-clipping kernels, written once for the CPU
// kernels (ops/cpu/optim.cpp, ops/cpu/clip.cpp) and the CUDA kernels (ops/cuda/optim.cu,
// ops/cuda/clip.cu), and tested on the host against double references
// (tests/ops/optim_math_test.cpp). Also the raw-pointer argument structs both backends launch
// with. Internal header: nvcc compiles it, so plain structs and PRECIS_HD inline functions only.
//
// The update functions follow the operation order of PyTorch's single-tensor implementations
// (torch.optim.SGD / Adam / AdamW with foreach=False) as its vectorised CPU kernels execute them:
// add(alpha), lerp and addcmul are fused multiply-adds there (Vectorized::fmadd), mul, div and
// addcdiv are not; scalars are rounded to the compute type as PyTorch passes Python floats to its
// kernels. The fused steps are written as explicit fma() and the file that compiles the CPU
// kernels forbids any other contraction (ops/cpu/optim.cpp), so f32 SGD trajectories equal
// PyTorch's bit for bit. Adam's differ by an ulp now and then: PyTorch's f32 sqrt (MKL VML) is
// not correctly rounded, ours is. nvcc may contract the remaining multiply-adds: CUDA results
// agree with the CPU's to rounding, not bit for bit.
#include <cmath>
#include <cstdint>
#include <limits>

#include "core/opmath.h"

namespace precis::kernels {

using std::fabs;
using std::fma;
using std::pow;
using std::sqrt;

// ---- arguments ------------------------------------------------------------------------------------

struct SgdHyper {
  double lr = 0, momentum = 0, dampening = 0, weight_decay = 0;
  bool nesterov = false, maximize = false;
};

struct AdamHyper {
  double lr = 0, beta1 = 0, beta2 = 0, eps = 0, weight_decay = 0;
  bool amsgrad = false, decoupled_weight_decay = false, maximize = false;
};

/// One parameter's buffers, each `numel` contiguous elements on one device. `param`: the model
/// parameter (param dtype); `grad`: its gradient (param dtype, or f32 for an f16/bf16 param);
/// `master`: the fp32 master copy, non-null exactly when the parameter is f16/bf16; the states:
/// fp32 (f64 for an f64 parameter); `step`: one f32 counter of applied steps.
struct SgdTensor {
  void* param = nullptr;
  const void* grad = nullptr;
  float* master = nullptr;
  void* momentum_buffer = nullptr;  // null when momentum == 0
  float* step = nullptr;            // null when momentum == 0
  int64_t numel = 0;
};

struct AdamTensor {
  void* param = nullptr;
  const void* grad = nullptr;
  float* master = nullptr;
  void* exp_avg = nullptr;
  void* exp_avg_sq = nullptr;
  void* max_exp_avg_sq = nullptr;  // null unless amsgrad
  float* step = nullptr;
  int64_t numel = 0;
};

/// The inputs of a step that live on the parameters' device, each null when absent, read by the
/// kernel when it runs (so that a step captured in a CUDA graph reads the values of each replay).
/// The loss scaler's: one f32 each; the gradient used is grad * float(1 / *grad_scale), and a
/// nonzero *found_inf makes the step a no-op (parameters, states and step counters untouched).
/// A capturable optimizer's scheduled hyperparameters (optim/optimizer.h): two f64, the lr and the
/// momentum-like coefficient (SGD's momentum, Adam's beta1), replacing the host values of the
/// hyperparameter struct (apply_scheduled).
struct StepInputs {
  const float* grad_scale = nullptr;
  const float* found_inf = nullptr;
  const double* scheduled = nullptr;
};

/// The hyperparameters with the scheduled values of `in` in place of the host ones.
template <typename Hyper>
PRECIS_HD_INLINE Hyper apply_scheduled(Hyper h, const StepInputs& in) {
  if (in.scheduled != nullptr) {
    h.lr = in.scheduled[0];
    if constexpr (requires { h.momentum; }) {
      h.momentum = in.scheduled[1];
    } else {
      h.beta1 = in.scheduled[1];
    }
  }
  return h;
}

/// The reciprocal as GradScaler.unscale_ forms it: in double, rounded to f32.
PRECIS_HD_INLINE float inverse_scale(float scale) { return static_cast<float>(1.0 / static_cast<double>(scale)); }

// ---- SGD ------------------------------------------------------------------------------------------

template <typename C>
struct SgdScalars {
  C neg_lr, momentum, one_minus_dampening, weight_decay;
  bool has_momentum, nesterov, maximize;
};

template <typename C>
PRECIS_HD_INLINE SgdScalars<C> make_sgd_scalars(const SgdHyper& h) {
  return {static_cast<C>(-h.lr), static_cast<C>(h.momentum), static_cast<C>(1.0 - h.dampening),
          static_cast<C>(h.weight_decay), h.momentum != 0.0, h.nesterov, h.maximize};
}

/// p ← p − lr·d with d the (weight-decayed, momentum-averaged, Nesterov-corrected) gradient.
/// `first`: the momentum buffer is new and takes the gradient as it is (no dampening).
template <typename C>
PRECIS_HD_INLINE void sgd_element(C& p, C g, C* buf, bool first, const SgdScalars<C>& s) {
  if (s.maximize) g = -g;
  if (s.weight_decay != C(0)) g = fma(s.weight_decay, p, g);  // grad.add(param, alpha=wd)
  if (s.has_momentum) {
    C b;
    if (first) {
      b = g;
    } else {
      b = *buf * s.momentum;                 // buf.mul_(momentum)
      b = fma(s.one_minus_dampening, g, b);  //    .add_(grad, alpha=1 - dampening)
    }
    *buf = b;
    g = s.nesterov ? fma(s.momentum, b, g) : b;  // grad.add(buf, alpha=momentum)
  }
  p = fma(s.neg_lr, g, p);  // param.add_(grad, alpha=-lr)
}

// ---- Adam / AdamW -----------------------------------------------------------------------------------

template <typename C>
struct AdamScalars {
  C decay_factor;      // AdamW: 1 - lr·wd
  C weight_decay;      // Adam: added to the gradient
  C w1, one_minus_w1;  // lerp weight 1 - beta1 and 1 - w1 (PyTorch's lerp formulation)
  C beta2, one_minus_beta2;
  C bias_correction2_sqrt;
  C eps;
  C neg_step_size;  // -lr / (1 - beta1^step)
  bool has_weight_decay, decoupled, amsgrad, maximize;
};

/// The scalars of step number `step` (>= 1), formed in double as PyTorch does in Python.
template <typename C>
PRECIS_HD_INLINE AdamScalars<C> make_adam_scalars(const AdamHyper& h, double step) {
  AdamScalars<C> s;
  s.decay_factor = static_cast<C>(1.0 - h.lr * h.weight_decay);
  s.weight_decay = static_cast<C>(h.weight_decay);
  s.w1 = static_cast<C>(1.0 - h.beta1);
  s.one_minus_w1 = C(1) - s.w1;
  s.beta2 = static_cast<C>(h.beta2);
  s.one_minus_beta2 = static_cast<C>(1.0 - h.beta2);
  const double bias_correction1 = 1.0 - pow(h.beta1, step);
  const double bias_correction2 = 1.0 - pow(h.beta2, step);
  s.bias_correction2_sqrt = static_cast<C>(pow(bias_correction2, 0.5));
  s.eps = static_cast<C>(h.eps);
  s.neg_step_size = static_cast<C>(-(h.lr / bias_correction1));
  s.has_weight_decay = h.weight_decay != 0.0;
  s.decoupled = h.decoupled_weight_decay;
  s.amsgrad = h.amsgrad;
  s.maximize = h.maximize;
  return s;
}

/// max(a, b), NaN if either is NaN (torch.maximum).
template <typename C>
PRECIS_HD_INLINE C nan_propagating_max(C a, C b) {
  if (a != a) return a;
  if (b != b) return b;
  return a > b ? a : b;
}

/// One Adam(W) element: m, v (and vmax) are updated in place, then p.
template <typename C>
PRECIS_HD_INLINE void adam_element(C& p, C g, C& m, C& v, C* vmax, const AdamScalars<C>& s) {
  if (s.maximize) g = -g;
  if (s.has_weight_decay) {
    if (s.decoupled) {
      p = p * s.decay_factor;
    } else {
      g = fma(s.weight_decay, p, g);
    }
  }
  // exp_avg.lerp_(grad, 1 - beta1), in lerp's two numerically preferred forms.
  const C diff = g - m;
  m = s.w1 < C(0.5) ? fma(s.w1, diff, m) : fma(-diff, s.one_minus_w1, g);
  // exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
  C vv = v * s.beta2;
  vv = fma(s.one_minus_beta2 * g, g, vv);
  v = vv;
  if (s.amsgrad) {
    vv = nan_propagating_max(*vmax, vv);
    *vmax = vv;
  }
  C denom = sqrt(vv) / s.bias_correction2_sqrt;
  denom = denom + s.eps;
  p = p + s.neg_step_size * m / denom;  // addcdiv_: not fused
}

// ---- gradient norms and clipping ------------------------------------------------------------------
// A p-norm is accumulated in f64 as the "power sum" Σ|x|^p (Σx² for p = 2, Σ|x| for p = 1, and
// max|x| for p = inf, NaN winning); power sums of blocks and tensors combine by the same rule,
// and norm_root turns the total into the norm. Every backend accumulates an element the same
// way; only the grouping of the partial sums differs (documented per kernel).

enum class NormKind : uint8_t { inf, one, two, general };

/// Calls f.template operator()<K>() with K the norm kind as a compile-time constant (host code:
/// the kernels of each backend are instantiated per kind).
template <typename F>
void visit_norm_kind(NormKind k, F&& f) {
  switch (k) {
    case NormKind::inf: return f.template operator()<NormKind::inf>();
    case NormKind::one: return f.template operator()<NormKind::one>();
    case NormKind::two: return f.template operator()<NormKind::two>();
    case NormKind::general: return f.template operator()<NormKind::general>();
  }
}

/// The kind of the p-norm (p > 0; inf for +infinity).
PRECIS_HD_INLINE NormKind norm_kind(double p) {
  if (p > 1.7976931348623157e308) return NormKind::inf;
  if (p == 1.0) return NormKind::one;
  if (p == 2.0) return NormKind::two;
  return NormKind::general;
}

/// max(acc, a), or the quiet NaN if either is NaN (the inf-norm's combine).
PRECIS_HD_INLINE double nan_max(double acc, double a) {
  return (a != a || acc != acc) ? std::numeric_limits<double>::quiet_NaN() : (acc < a ? a : acc);
}

/// acc with element x added to the power sum of kind K. (A template on the kind, so that the
/// inner loops have no switch.)
template <NormKind K>
PRECIS_HD_INLINE double norm_accumulate(double acc, double x, double p) {
  if constexpr (K == NormKind::two) {
    return acc + x * x;
  } else if constexpr (K == NormKind::one) {
    return acc + fabs(x);
  } else if constexpr (K == NormKind::inf) {
    return nan_max(acc, fabs(x));
  } else {
    return acc + pow(fabs(x), p);
  }
}

/// Two power sums combined: a + b, or the NaN-propagating max for the inf-norm.
PRECIS_HD_INLINE double norm_combine(double a, double b, NormKind k) {
  return k == NormKind::inf ? nan_max(a, b) : a + b;
}

/// The norm of a power sum: sqrt for p = 2, the p-th root in general.
PRECIS_HD_INLINE double norm_root(double power_sum, NormKind k, double p) {
  switch (k) {
    case NormKind::inf:
    case NormKind::one: return power_sum;
    case NormKind::two: return sqrt(power_sum);
    case NormKind::general: break;
  }
  return pow(power_sum, 1.0 / p);
}

/// The factor clip_grad_norm_ multiplies a gradient by, formed as PyTorch does in the norm's
/// dtype: max_norm · (1 / (total + 1e-6)) with the total norm rounded to A — f32 (A = float) for
/// f32, f16 and bf16 gradients, f64 (A = double) for f64 ones (PyTorch's total norm of f64
/// gradients is f64; an f32 factor moved f64 runs off their reference by ~1e-8 a clipped step).
/// A gradient is scaled only when that total is finite in A and the factor is below 1
/// (clip_scales); otherwise it keeps its bits. (A total finite in f64 but past f32's range is inf
/// as the f32 factor sees it, and gave a factor of 0: every gradient zeroed, the step applied.)
template <typename A = float>
PRECIS_HD_INLINE A clip_coefficient(double total, double max_norm) {
  return static_cast<A>(max_norm) * (A(1) / (static_cast<A>(total) + static_cast<A>(1e-6)));
}
template <typename A>
PRECIS_HD_INLINE bool clip_scales(double total, A coef) {
  const A t = static_cast<A>(total);
  return t - t == A(0) && coef < A(1);  // finite: inf - inf and NaN - NaN are NaN
}

/// x clamped to [-hi, hi]; NaN stays NaN (it compares false both ways).
template <typename C>
PRECIS_HD_INLINE C clip_value_element(C x, C hi) {
  if (x > hi) return hi;
  if (x < -hi) return -hi;
  return x;
}

}  // namespace precis::kernels
