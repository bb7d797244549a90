#pragma once
// The fused optimizer updates, shared by the CPU kernels (optim/fused_update.cpp) and the CUDA
// multi-tensor-apply kernels (optim/cuda/fused_update.cu). Internal header: plain structs over raw
// pointers and host/device inline math, no C++20 library headers, so that nvcc compiles it.
//
// One update reads each buffer of a parameter once and writes it once: the gradient (any of the
// accepted dtypes, converted to the compute type), the parameter or its fp32 master, the states,
// and for an f16/bf16 parameter the rounded master written back into the parameter.
//
// The element functions follow the operation order of PyTorch's single-tensor implementations
// (torch.optim.SGD / Adam / AdamW with foreach=False) as its vectorised CPU kernels execute them:
// add(alpha), lerp and addcmul are fused multiply-adds there (Vectorized::fmadd), mul, div and
// addcdiv are not; scalars are rounded to the compute type as PyTorch passes Python floats to its
// kernels. The fused steps are written as explicit fma() and the file that compiles the CPU
// kernels forbids any other contraction (fused_update.cpp), so f32 SGD trajectories equal
// PyTorch's bit for bit. Adam's differ by an ulp now and then: PyTorch's f32 sqrt (MKL VML) is
// not correctly rounded, ours is.
#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#define PRECIS_HD __host__ __device__
#else
#define PRECIS_HD
#endif

namespace precis::optim::detail {

using std::fma;
using std::pow;
using std::sqrt;

/// Element type codes; the values of precis::DType (core/dtype.h), restated for nvcc.
enum KernelDType : int { kF32 = 0, kF64 = 1, kF16 = 2, kBF16 = 3 };

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
  float* step = nullptr;
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

/// The loss scaler's inputs: each points to one f32 on the parameters' device, or is null.
/// The gradient used is grad * float(1 / *grad_scale); a nonzero *found_inf makes the step a no-op
/// (parameters, states and step counters untouched).
struct ScalerArgs {
  const float* grad_scale = nullptr;
  const float* found_inf = nullptr;
};

/// The reciprocal as GradScaler.unscale_ forms it: in double, rounded to f32.
PRECIS_HD inline float inverse_scale(float scale) { return static_cast<float>(1.0 / static_cast<double>(scale)); }

// ---- SGD ------------------------------------------------------------------------------------------

template <typename C>
struct SgdScalars {
  C neg_lr, momentum, one_minus_dampening, weight_decay;
  bool has_momentum, nesterov, maximize;
};

template <typename C>
PRECIS_HD inline SgdScalars<C> make_sgd_scalars(const SgdHyper& h) {
  return {static_cast<C>(-h.lr), static_cast<C>(h.momentum), static_cast<C>(1.0 - h.dampening),
          static_cast<C>(h.weight_decay), h.momentum != 0.0, h.nesterov, h.maximize};
}

/// p ← p − lr·d with d the (weight-decayed, momentum-averaged, Nesterov-corrected) gradient.
/// `first`: the momentum buffer is new and takes the gradient as it is (no dampening).
template <typename C>
PRECIS_HD inline void sgd_element(C& p, C g, C* buf, bool first, const SgdScalars<C>& s) {
  if (s.maximize) g = -g;
  if (s.weight_decay != C(0)) g = fma(s.weight_decay, p, g);  // grad.add(param, alpha=wd)
  if (s.has_momentum) {
    C b;
    if (first) {
      b = g;
    } else {
      b = *buf * s.momentum;                     // buf.mul_(momentum)
      b = fma(s.one_minus_dampening, g, b);      //    .add_(grad, alpha=1 - dampening)
    }
    *buf = b;
    g = s.nesterov ? fma(s.momentum, b, g) : b;  // grad.add(buf, alpha=momentum)
  }
  p = fma(s.neg_lr, g, p);                       // param.add_(grad, alpha=-lr)
}

// ---- Adam / AdamW -----------------------------------------------------------------------------------

template <typename C>
struct AdamScalars {
  C decay_factor;     // AdamW: 1 - lr·wd
  C weight_decay;     // Adam: added to the gradient
  C w1, one_minus_w1; // lerp weight 1 - beta1 and 1 - w1 (PyTorch's lerp formulation)
  C beta2, one_minus_beta2;
  C bias_correction2_sqrt;
  C eps;
  C neg_step_size;    // -lr / (1 - beta1^step)
  bool has_weight_decay, decoupled, amsgrad, maximize;
};

/// The scalars of step number `step` (>= 1), formed in double as PyTorch does in Python.
template <typename C>
PRECIS_HD inline AdamScalars<C> make_adam_scalars(const AdamHyper& h, double step) {
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

template <typename C>
PRECIS_HD inline C nan_propagating_max(C a, C b) {
  if (a != a) return a;
  if (b != b) return b;
  return a > b ? a : b;
}

/// One Adam(W) element: m, v (and vmax) are updated in place, then p.
template <typename C>
PRECIS_HD inline void adam_element(C& p, C g, C& m, C& v, C* vmax, const AdamScalars<C>& s) {
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

}  // namespace precis::optim::detail

namespace precis::optim::detail {

/// CPU: updates one parameter in one pass, split over the intra-op pool. Reads *found_inf and
/// the step counter itself (no separate host branch), so the CPU and CUDA paths behave alike.
void sgd_update_cpu(const SgdTensor& t, int param_dtype, int grad_dtype, const SgdHyper& h, const ScalerArgs& s);
void adam_update_cpu(const AdamTensor& t, int param_dtype, int grad_dtype, const AdamHyper& h, const ScalerArgs& s);

}  // namespace precis::optim::detail
