#pragma once
// Row routines of the softmax family for one contiguous row of n elements: the maximum, the sum of
// exp(x − shift) and the log-sum-exp, in the compute type (fp32 for f32/f16/bf16, f64 for f64).
// Written to be shared by every kernel that normalises rows (cross_entropy now; softmax and
// log_softmax can reuse it). f32/f64 rows are read in place through Eigen maps (vectorised max,
// exp and sum); f16/bf16 rows are converted kBlock elements at a time into a stack buffer.
// Include only from ops/cpu/*.cpp (it pulls in Eigen).
#include <cmath>
#include <cstdint>
#include <limits>

#include <Eigen/Core>

#include "ops/cpu/dispatch.h"
#include "ops/cpu/elementwise_util.h"
#include "ops/cpu/vec_exp.h"

namespace precis::cpu {

/// max_j x_j in the compute type; −inf for an empty row. A NaN anywhere makes the later sums NaN
/// whatever this returns, so NaN propagation is left to those.
template <typename T>
opmath_t<T> row_max(const T* x, int64_t n) {
  using C = opmath_t<T>;
  C m = -std::numeric_limits<C>::infinity();
  if constexpr (std::is_same_v<T, C>) {
    if (n > 0) m = Eigen::Map<const Eigen::Array<C, Eigen::Dynamic, 1>>(x, n).maxCoeff();
  } else {
    alignas(64) C buf[kBlock];
    for (int64_t b = 0; b < n; b += kBlock) {
      const int64_t k = std::min(kBlock, n - b);
      load_block<C>(x + b, 1, buf, k);
      m = std::max(m, Eigen::Map<const Eigen::Array<C, Eigen::Dynamic, 1>>(buf, k).maxCoeff());
    }
  }
  return m;
}

/// Σ_j exp(x_j − shift), accumulated in the compute type.
template <typename T>
opmath_t<T> row_sum_exp(const T* x, int64_t n, opmath_t<T> shift) {
  using C = opmath_t<T>;
  using Map = Eigen::Map<const Eigen::Array<C, Eigen::Dynamic, 1>>;
#ifdef PRECIS_HAVE_VEC_EXP
  if constexpr (std::is_same_v<T, float>) return sum_exp_f32(x, n, shift);
#endif
  if constexpr (std::is_same_v<T, C>) {
    return n > 0 ? (Map(x, n) - shift).exp().sum() : C(0);
  } else {
    alignas(64) C buf[kBlock];
    C s = 0;
    for (int64_t b = 0; b < n; b += kBlock) {
      const int64_t k = std::min(kBlock, n - b);
      load_block<C>(x + b, 1, buf, k);
#ifdef PRECIS_HAVE_VEC_EXP
      s += sum_exp_f32(buf, k, shift);
#else
      s += (Map(buf, k) - shift).exp().sum();
#endif
    }
    return s;
  }
}

/// log Σ_j exp(x_j), stable (shifted by the maximum). NaN for a row holding NaN or +inf (as
/// PyTorch's log_softmax), −inf for an empty or all −inf row.
template <typename T>
opmath_t<T> row_logsumexp(const T* x, int64_t n) {
  using C = opmath_t<T>;
  const C m = row_max(x, n);
  if (std::isinf(m) && m < 0) return m;  // empty or all −inf: exp would give 0/0
  return m + std::log(row_sum_exp(x, n, m));
}

/// Σ_j w_j·x_j (w undefined: plain Σ_j x_j), accumulated in the compute type. w: the compute type.
template <typename T>
opmath_t<T> row_weighted_sum(const T* x, const opmath_t<T>* w, int64_t n) {
  using C = opmath_t<T>;
  using Map = Eigen::Map<const Eigen::Array<C, Eigen::Dynamic, 1>>;
  if constexpr (std::is_same_v<T, C>) {
    if (n == 0) return C(0);
    return w != nullptr ? (Map(x, n) * Map(w, n)).sum() : Map(x, n).sum();
  } else {
    alignas(64) C buf[kBlock];
    C s = 0;
    for (int64_t b = 0; b < n; b += kBlock) {
      const int64_t k = std::min(kBlock, n - b);
      load_block<C>(x + b, 1, buf, k);
      s += w != nullptr ? (Map(buf, k) * Map(w + b, k)).sum() : Map(buf, k).sum();
    }
    return s;
  }
}

}  // namespace precis::cpu
