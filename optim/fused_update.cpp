// CPU fused optimizer updates: one pass per parameter over contiguous buffers, in blocks of
// kBlock elements so that f16/bf16 gradients and parameters are converted with the vectorised
// bulk conversions (core/half.h) and the inner loops run over plain float/double arrays.
#include <algorithm>
#include <type_traits>

#include "core/error.h"
#include "core/half.h"
#include "core/thread_pool.h"

// The element math (fused_update.h) says where it fuses multiply-adds, as PyTorch's kernels do;
// GCC would contract other multiply-adds into FMA by default in C++ when -mfma is on, changing
// last bits, so contraction is off for this file.
#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include "optim/fused_update.h"

namespace precis::optim::detail {
namespace {

constexpr int64_t kBlock = 512;    // elements converted per block (stack buffers)
constexpr int64_t kGrain = 16384;  // elements per parallel chunk, at least

template <typename P>
using compute_t = std::conditional_t<std::is_same_v<P, double>, double, float>;

template <typename T>
constexpr bool kLowPrecision = std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;

/// The gradient block as compute-type values, scaled by inv_scale when `scaled`: either a pointer
/// into the gradient itself (same type, no scaling) or `buf` filled with converted values.
template <typename G, typename C>
const C* load_grad(const G* g, C* buf, int64_t n, bool scaled, C inv_scale) {
  if constexpr (std::is_same_v<G, C>) {
    if (!scaled) return g;
    for (int64_t i = 0; i < n; ++i) buf[i] = g[i] * inv_scale;
    return buf;
  } else {
    static_assert(std::is_same_v<C, float>);
    if constexpr (std::is_same_v<G, Half>) {
      half_to_float(g, buf, n);
    } else if constexpr (std::is_same_v<G, BFloat16>) {
      bfloat16_to_float(g, buf, n);
    } else {
      for (int64_t i = 0; i < n; ++i) buf[i] = static_cast<float>(g[i]);
    }
    if (scaled)
      for (int64_t i = 0; i < n; ++i) buf[i] = buf[i] * inv_scale;
    return buf;
  }
}

/// Writes the rounded fp32 master block into the low-precision parameter.
template <typename P>
void store_low_precision(const float* master, P* param, int64_t n) {
  if constexpr (std::is_same_v<P, Half>) {
    float_to_half(master, param, n);
  } else {
    float_to_bfloat16(master, param, n);
  }
}

/// The parameter values the update works on: the master copy for f16/bf16, else the parameter.
template <typename P>
compute_t<P>* working_values(void* param, float* master) {
  if constexpr (kLowPrecision<P>) {
    return master;
  } else {
    return static_cast<P*>(param);
  }
}

template <typename P, typename G>
void sgd_cpu(const SgdTensor& t, const SgdHyper& h, const ScalerArgs& sc) {
  using C = compute_t<P>;
  if (sc.found_inf != nullptr && *sc.found_inf != 0.0f) return;
  // The momentum buffer is new (takes the gradient as it is) until one step has been applied.
  const bool first = t.step != nullptr && *t.step == 0.0f;
  const SgdScalars<C> s = make_sgd_scalars<C>(h);
  const bool scaled = sc.grad_scale != nullptr;
  const C inv_scale = scaled ? static_cast<C>(inverse_scale(*sc.grad_scale)) : C(1);
  C* p_all = working_values<P>(t.param, t.master);
  const G* g_all = static_cast<const G*>(t.grad);
  C* buf_all = static_cast<C*>(t.momentum_buffer);
  // param, grad, buffer: (numel,)
  parallel_for(0, t.numel, kGrain, [&](int64_t begin, int64_t end) {
    C gbuf[kBlock];
    for (int64_t b0 = begin; b0 < end; b0 += kBlock) {
      const int64_t n = std::min(kBlock, end - b0);
      C* p = p_all + b0;
      const C* g = load_grad<G, C>(g_all + b0, gbuf, n, scaled, inv_scale);
      C* buf = buf_all ? buf_all + b0 : nullptr;
      if (buf) {
        for (int64_t i = 0; i < n; ++i) sgd_element<C>(p[i], g[i], buf + i, first, s);
      } else {
        for (int64_t i = 0; i < n; ++i) sgd_element<C>(p[i], g[i], nullptr, first, s);
      }
      if constexpr (kLowPrecision<P>) store_low_precision<P>(p, static_cast<P*>(t.param) + b0, n);
    }
  });
  if (t.step != nullptr) *t.step = *t.step + 1.0f;
}

template <typename P, typename G>
void adam_cpu(const AdamTensor& t, const AdamHyper& h, const ScalerArgs& sc) {
  using C = compute_t<P>;
  if (sc.found_inf != nullptr && *sc.found_inf != 0.0f) return;
  const float step = *t.step + 1.0f;  // f32 like PyTorch's state["step"]
  const AdamScalars<C> s = make_adam_scalars<C>(h, static_cast<double>(step));
  const bool scaled = sc.grad_scale != nullptr;
  const C inv_scale = scaled ? static_cast<C>(inverse_scale(*sc.grad_scale)) : C(1);
  C* p_all = working_values<P>(t.param, t.master);
  const G* g_all = static_cast<const G*>(t.grad);
  C* m_all = static_cast<C*>(t.exp_avg);
  C* v_all = static_cast<C*>(t.exp_avg_sq);
  C* vmax_all = static_cast<C*>(t.max_exp_avg_sq);
  // param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq: (numel,)
  parallel_for(0, t.numel, kGrain / 2, [&](int64_t begin, int64_t end) {
    C gbuf[kBlock];
    for (int64_t b0 = begin; b0 < end; b0 += kBlock) {
      const int64_t n = std::min(kBlock, end - b0);
      C* p = p_all + b0;
      const C* g = load_grad<G, C>(g_all + b0, gbuf, n, scaled, inv_scale);
      C* m = m_all + b0;
      C* v = v_all + b0;
      if (vmax_all) {
        C* vmax = vmax_all + b0;
        for (int64_t i = 0; i < n; ++i) adam_element<C>(p[i], g[i], m[i], v[i], vmax + i, s);
      } else {
        for (int64_t i = 0; i < n; ++i) adam_element<C>(p[i], g[i], m[i], v[i], nullptr, s);
      }
      if constexpr (kLowPrecision<P>) store_low_precision<P>(p, static_cast<P*>(t.param) + b0, n);
    }
  });
  *t.step = step;
}

/// Calls f.template operator()<P, G>() for the accepted (param, grad) dtype pairs: the same dtype,
/// or an f32 gradient for an f16/bf16 parameter.
template <typename F>
void visit_param_grad(int param_dtype, int grad_dtype, F&& f) {
  if (param_dtype == grad_dtype) {
    switch (param_dtype) {
      case kF32: return f.template operator()<float, float>();
      case kF64: return f.template operator()<double, double>();
      case kF16: return f.template operator()<Half, Half>();
      case kBF16: return f.template operator()<BFloat16, BFloat16>();
    }
  } else if (grad_dtype == kF32) {
    if (param_dtype == kF16) return f.template operator()<Half, float>();
    if (param_dtype == kBF16) return f.template operator()<BFloat16, float>();
  }
  PRECIS_INTERNAL_ASSERT(false, "unchecked (param, grad) dtype pair ", param_dtype, ", ", grad_dtype);
}

}  // namespace

void sgd_update_cpu(const SgdTensor& t, int param_dtype, int grad_dtype, const SgdHyper& h, const ScalerArgs& s) {
  visit_param_grad(param_dtype, grad_dtype, [&]<typename P, typename G>() { sgd_cpu<P, G>(t, h, s); });
}

void adam_update_cpu(const AdamTensor& t, int param_dtype, int grad_dtype, const AdamHyper& h, const ScalerArgs& s) {
  visit_param_grad(param_dtype, grad_dtype, [&]<typename P, typename G>() { adam_cpu<P, G>(t, h, s); });
}

}  // namespace precis::optim::detail
