#include "optim/clip_grad.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

#include "autograd/grad_mode.h"
#include "core/half.h"
#include "core/thread_pool.h"
#include "core/dtype_visit.h"
#include "core/opmath.h"
#include "tensor/factory.h"

namespace precis::optim {
namespace {

constexpr int64_t kBlock = 8192;  // elements per partial result (fixed: results independent of threads)
constexpr int64_t kConvert = 512;

enum class NormKind { Inf, One, Two, General };

NormKind kind_of(double p) {
  if (std::isinf(p) && p > 0) return NormKind::Inf;
  if (p == 1.0) return NormKind::One;
  if (p == 2.0) return NormKind::Two;
  return NormKind::General;
}

/// Floats of the block [i, i + n) of a gradient of element type T (converted for f16/bf16).
template <typename T>
const auto* block_values(const T* data, int64_t n, float* buf) {
  if constexpr (std::is_same_v<T, Half>) {
    half_to_float(data, buf, n);
    return static_cast<const float*>(buf);
  } else if constexpr (std::is_same_v<T, BFloat16>) {
    bfloat16_to_float(data, buf, n);
    return static_cast<const float*>(buf);
  } else {
    return data;
  }
}

/// sum |x|^p (or max |x| for the inf-norm; NaN if any element is NaN) of one contiguous gradient.
// g: (numel,), accumulated in f64 per block of kBlock elements, blocks combined in order.
template <typename T>
double norm_contribution(const T* data, int64_t numel, NormKind kind, double p) {
  const int64_t nblocks = (numel + kBlock - 1) / kBlock;
  std::vector<double> partial(static_cast<size_t>(nblocks), 0.0);
  parallel_for(0, nblocks, 4, [&](int64_t b0, int64_t b1) {
    float buf[kConvert];
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t begin = b * kBlock, end = std::min(numel, begin + kBlock);
      double acc = 0.0;
      for (int64_t i = begin; i < end; i += kConvert) {
        const int64_t n = std::min(kConvert, end - i);
        const auto* x = block_values<T>(data + i, n, buf);
        switch (kind) {
          case NormKind::Two:
            for (int64_t j = 0; j < n; ++j) acc += static_cast<double>(x[j]) * static_cast<double>(x[j]);
            break;
          case NormKind::One:
            for (int64_t j = 0; j < n; ++j) acc += std::abs(static_cast<double>(x[j]));
            break;
          case NormKind::Inf:
            for (int64_t j = 0; j < n; ++j) {
              const double a = std::abs(static_cast<double>(x[j]));
              acc = (a != a || acc != acc) ? std::numeric_limits<double>::quiet_NaN() : std::max(acc, a);
            }
            break;
          case NormKind::General:
            for (int64_t j = 0; j < n; ++j) acc += std::pow(std::abs(static_cast<double>(x[j])), p);
            break;
        }
      }
      partial[static_cast<size_t>(b)] = acc;
    }
  });
  double total = 0.0;
  for (double v : partial) {
    if (kind == NormKind::Inf) {
      total = (v != v || total != total) ? std::numeric_limits<double>::quiet_NaN() : std::max(total, v);
    } else {
      total += v;
    }
  }
  return total;
}

Tensor contiguous_cpu_grad(const Tensor& p, size_t index, const char* op) {
  Tensor g = p.grad();
  if (!g.defined()) return g;
  PRECIS_CHECK_T(NotImplementedError, g.device().is_cpu(), op, ": gradient ", index, " is ", g.describe(),
                 "; clipping CUDA gradients is not implemented yet");
  PRECIS_CHECK_DTYPE(g.is_floating_point(), op, ": gradient ", index, " is ", g.describe(), "; expected a floating dtype");
  return g.is_contiguous() ? g : g.contiguous();
}

/// Combines per-tensor contributions into the total norm.
double combine(const std::vector<double>& contributions, NormKind kind, double p) {
  double acc = 0.0;
  for (double c : contributions) {
    if (kind == NormKind::Inf) {
      acc = (c != c || acc != acc) ? std::numeric_limits<double>::quiet_NaN() : std::max(acc, c);
    } else {
      acc += c;
    }
  }
  switch (kind) {
    case NormKind::Inf:
    case NormKind::One: return acc;
    case NormKind::Two: return std::sqrt(acc);
    case NormKind::General: return std::pow(acc, 1.0 / p);
  }
  return acc;
}

/// Multiplies every gradient by coef (in the gradient's compute type) in place. CUDA gradients
/// (reached through GradScaler::clip_grad_norm_, whose norms come from the device) go through the
/// mul kernel, which rounds the same way.
void scale_grads(const std::vector<Tensor>& params, double coef) {
  for (const Tensor& p : params) {
    Tensor g = p.grad();
    if (!g.defined()) continue;
    if (g.is_contiguous() && g.device().is_cpu()) {
      visit_dtype(g.dtype(), [&]<typename T>() {
        if constexpr (std::is_floating_point_v<T> || std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
          using C = opmath_t<T>;
          T* data = static_cast<T*>(g.data_ptr());
          const C c = static_cast<C>(coef);
          // g: (numel,), scaled in its compute type (fp32 for f16/bf16)
          parallel_for(0, g.numel(), 32768, [&](int64_t b, int64_t e) {
            for (int64_t i = b; i < e; ++i) data[i] = T(static_cast<C>(static_cast<C>(data[i]) * c));
          });
        }
      });
    } else {
      g.copy_(g * coef);
    }
    g.bump_version();
  }
}

Tensor finish(const std::vector<Tensor>& params, double max_norm, double total, const char* what,
              bool error_if_nonfinite, const std::vector<double>& per_param) {
  if (!std::isfinite(total)) {
    if (error_if_nonfinite) {
      std::string bad;
      for (size_t i = 0; i < params.size(); ++i) {
        if (i < per_param.size() && !std::isfinite(per_param[i]))
          bad += precis::detail::str_cat(bad.empty() ? "" : ", ", "parameter ", i, " (", params[i].describe(), ")");
      }
      throw ValueError(precis::detail::str_cat(
          "clip_grad_norm_: the total ", what, " of the gradients is ", total, "; non-finite gradients: ",
          bad.empty() ? "none found per tensor (the total overflowed)" : bad,
          ". Pass error_if_nonfinite = false to get the norm back and skip the step instead"));
    }
    return scalar_tensor(total, {.dtype = DType::f32});  // gradients untouched: the caller skips the step
  }
  // As PyTorch, in f32: clip_coef = max_norm * reciprocal(total + 1e-6), clamped to 1.
  const float total_f = static_cast<float>(total);
  const float coef = static_cast<float>(max_norm) * (1.0f / (total_f + 1e-6f));
  if (coef < 1.0f) {
    NoGradGuard no_grad;
    scale_grads(params, coef);
  }
  return scalar_tensor(total_f, {.dtype = DType::f32});
}

}  // namespace

std::vector<double> grad_norms(const std::vector<Tensor>& params, double norm_type) {
  PRECIS_CHECK(norm_type > 0, "grad_norms: norm_type must be > 0 (or INFINITY), got ", norm_type);
  const NormKind kind = kind_of(norm_type);
  std::vector<double> out(params.size(), 0.0);
  for (size_t i = 0; i < params.size(); ++i) {
    const Tensor g = contiguous_cpu_grad(params[i], i, "grad_norms");
    if (!g.defined()) continue;
    double c = 0.0;
    visit_dtype(g.dtype(), [&]<typename T>() {
      if constexpr (std::is_floating_point_v<T> || std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>)
        c = norm_contribution<T>(static_cast<const T*>(g.data_ptr()), g.numel(), kind, norm_type);
    });
    out[i] = combine({c}, kind, norm_type);
  }
  return out;
}

Tensor clip_grad_norm_(const std::vector<Tensor>& params, double max_norm, double norm_type,
                       bool error_if_nonfinite) {
  PRECIS_CHECK(norm_type > 0, "clip_grad_norm_: norm_type must be > 0 (or INFINITY), got ", norm_type);
  PRECIS_CHECK(max_norm >= 0, "clip_grad_norm_: max_norm must be >= 0, got ", max_norm);
  const NormKind kind = kind_of(norm_type);
  std::vector<double> contributions(params.size(), 0.0);
  for (size_t i = 0; i < params.size(); ++i) {
    const Tensor g = contiguous_cpu_grad(params[i], i, "clip_grad_norm_");
    if (!g.defined()) continue;
    visit_dtype(g.dtype(), [&]<typename T>() {
      if constexpr (std::is_floating_point_v<T> || std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>)
        contributions[i] = norm_contribution<T>(static_cast<const T*>(g.data_ptr()), g.numel(), kind, norm_type);
    });
  }
  const double total = combine(contributions, kind, norm_type);
  return finish(params, max_norm, total, (std::to_string(norm_type) + "-norm").c_str(), error_if_nonfinite,
                contributions);
}

Tensor clip_grad_norm_(const std::vector<Tensor>& params, double max_norm,
                       const std::vector<double>& per_param_sq_norms, bool error_if_nonfinite) {
  PRECIS_CHECK(max_norm >= 0, "clip_grad_norm_: max_norm must be >= 0, got ", max_norm);
  PRECIS_CHECK_SHAPE(per_param_sq_norms.size() == params.size(), "clip_grad_norm_: got ", per_param_sq_norms.size(),
                     " precomputed squared norms for ", params.size(), " parameters");
  std::vector<double> used(params.size(), 0.0);
  for (size_t i = 0; i < params.size(); ++i) {
    if (!params[i].grad().defined()) continue;
    PRECIS_CHECK(!(per_param_sq_norms[i] < 0), "clip_grad_norm_: precomputed squared norm ", i, " is negative (",
                 per_param_sq_norms[i], ")");
    used[i] = per_param_sq_norms[i];
  }
  return finish(params, max_norm, combine(used, NormKind::Two, 2.0), "2-norm", error_if_nonfinite, used);
}

Tensor clip_grad_norm_(const std::vector<Tensor>& params, double max_norm, const Tensor& per_param_sq_norms,
                       bool error_if_nonfinite) {
  PRECIS_CHECK_SHAPE(per_param_sq_norms.defined() && per_param_sq_norms.dim() == 1, "clip_grad_norm_: the precomputed "
                     "squared norms must be a 1-D tensor, got ",
                     per_param_sq_norms.defined() ? per_param_sq_norms.describe() : std::string("an undefined tensor"));
  PRECIS_CHECK_DTYPE(per_param_sq_norms.dtype() == DType::f32 || per_param_sq_norms.dtype() == DType::f64,
                     "clip_grad_norm_: the precomputed squared norms must be f32 or f64, got ",
                     per_param_sq_norms.describe());
  return clip_grad_norm_(params, max_norm, per_param_sq_norms.to_vector<double>(), error_if_nonfinite);
}

void clip_grad_value_(const std::vector<Tensor>& params, double clip_value) {
  PRECIS_CHECK(clip_value >= 0, "clip_grad_value_: clip_value must be >= 0, got ", clip_value);
  NoGradGuard no_grad;
  for (size_t i = 0; i < params.size(); ++i) {
    Tensor g = params[i].grad();
    if (!g.defined()) continue;
    PRECIS_CHECK_T(NotImplementedError, g.device().is_cpu(), "clip_grad_value_: gradient ", i, " is ", g.describe(),
                   "; clipping CUDA gradients is not implemented yet");
    Tensor c = g.is_contiguous() ? g : g.contiguous();
    visit_dtype(c.dtype(), [&]<typename T>() {
      if constexpr (std::is_floating_point_v<T> || std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
        using C = opmath_t<T>;
        T* data = static_cast<T*>(c.data_ptr());
        const C hi = static_cast<C>(clip_value);
        // g: (numel,); NaN compares false both ways and stays
        parallel_for(0, c.numel(), 32768, [&](int64_t b, int64_t e) {
          for (int64_t k = b; k < e; ++k) {
            const C x = static_cast<C>(data[k]);
            if (x > hi) data[k] = T(hi);
            else if (x < -hi) data[k] = T(-hi);
          }
        });
      }
    });
    if (!c.is_same(g)) g.copy_(c);
    g.bump_version();
  }
}

}  // namespace precis::optim
