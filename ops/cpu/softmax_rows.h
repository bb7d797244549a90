#pragma once
// Softmax building blocks on one contiguous row, shared by the softmax / log_softmax kernels
// (ops/cpu/softmax.cpp) and the fused cross-entropy kernel, so both compute exactly the same
// numbers. T is the storage type (float, double, Half, BFloat16); math runs in A = opmath_t<T>
// (fp32 for f16/bf16). Rows of f16/bf16 are widened in kBlock-sized stack blocks, so nothing
// here allocates. Everything is numerically stable: exponentials are taken of x − max(x) <= 0.
//
// Typical use (cross-entropy forward and backward of one row of logits):
//   const auto [m, log_sum] = row_log_normaliser(logits, n);
//   loss = log_sum − (logits[target] − m);                   // never (m + log_sum) − x: that
//                                                            //   rounds at |m|'s scale
//   row_exp_affine(logits, dlogits, n, m, g / exp(log_sum)); // dlogits = g·softmax, then
//   dlogits[target] -= g;                                    //   minus g at the target
// The exponentials (ops/cpu/vec_exp.h) run on explicit fp32 SIMD (AVX2, or AVX-512 where the
// CPU has it); f64 rows use the library exp.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "core/dtype_visit.h"
#include "core/opmath.h"
#include "ops/cpu/elementwise_util.h"
#include "ops/cpu/lanes.h"
#include "ops/cpu/vec_exp.h"

namespace precis::cpu {

namespace rows_detail {

// Calls f(block, offset, m) over [0, n) in blocks of the compute type A: the row itself when T is
// A, else kBlock-sized widened copies.
template <typename T, typename F>
inline void for_each_block(const T* x, int64_t n, F&& f) {
  using A = opmath_t<T>;
  if constexpr (std::is_same_v<T, A>) {
    f(x, int64_t(0), n);
  } else {
    A buf[kBlock];
    for (int64_t b = 0; b < n; b += kBlock) {
      const int64_t m = std::min(kBlock, n - b);
      load_block<A>(x + b, 1, buf, m);
      f(static_cast<const A*>(buf), b, m);
    }
  }
}

// As for_each_block over two rows of the same length.
template <typename T, typename F>
inline void for_each_block2(const T* x, const T* y, int64_t n, F&& f) {
  using A = opmath_t<T>;
  if constexpr (std::is_same_v<T, A>) {
    f(x, y, int64_t(0), n);
  } else {
    A bx[kBlock], by[kBlock];
    for (int64_t b = 0; b < n; b += kBlock) {
      const int64_t m = std::min(kBlock, n - b);
      load_block<A>(x + b, 1, bx, m);
      load_block<A>(y + b, 1, by, m);
      f(static_cast<const A*>(bx), static_cast<const A*>(by), b, m);
    }
  }
}

inline float lanes_max(const float* x, int64_t n) { return row_max_f32(x, n); }
template <typename A>
inline A lanes_max(const A* x, int64_t n) {
  A acc[kLanes];
  for (int64_t k = 0; k < kLanes; ++k) acc[k] = -std::numeric_limits<A>::infinity();
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int64_t k = 0; k < kLanes; ++k) acc[k] = x[i + k] > acc[k] ? x[i + k] : acc[k];
  for (int64_t k = 0; i + k < n; ++k) acc[k] = x[i + k] > acc[k] ? x[i + k] : acc[k];
  for (int64_t w = kLanes / 2; w > 0; w /= 2)
    for (int64_t k = 0; k < w; ++k) acc[k] = acc[k + w] > acc[k] ? acc[k + w] : acc[k];
  return acc[0];
}

}  // namespace rows_detail

/// max(x) over a row (−inf for an empty row). NaNs are skipped here; they still make the
/// softmax of their row NaN through the sum of exponentials.
template <typename T>
inline opmath_t<T> row_max(const T* x, int64_t n) {
  using A = opmath_t<T>;
  A m = -std::numeric_limits<A>::infinity();
  rows_detail::for_each_block(x, n, [&](const A* b, int64_t, int64_t k) { m = std::max(m, rows_detail::lanes_max(b, k)); });
  return m;
}

/// Σ exp(x − shift) over a row, accumulated in A.
template <typename T>
inline opmath_t<T> row_sum_exp(const T* x, int64_t n, opmath_t<T> shift) {
  using A = opmath_t<T>;
  A s = 0;
  rows_detail::for_each_block(x, n, [&](const A* b, int64_t, int64_t k) {
    s += exp_shift_sum(b, static_cast<A*>(nullptr), k, shift, A(1));
  });
  return s;
}

/// Elements per chunk of row_log_normaliser's single pass: 8 KiB of fp32, so a chunk read from
/// memory for its maximum is still in L1 when its exponentials read it again.
inline constexpr int64_t kNormaliserChunk = 2048;

/// The log-softmax normaliser of a row as {max, log Σ exp(x − max)}, kept apart so that
/// log_softmax(x)_i = (x_i − max) − log_sum loses nothing when |max| is large (the sum
/// max + log_sum would round at max's scale). NaN log_sum if x has a NaN or max is ±inf
/// (a row of −inf too); −inf for an empty row.
///
/// One pass over memory (a 30522-wide row of logits is read once, not twice): per chunk of
/// kNormaliserChunk elements, the chunk's max m_c (from memory), then, with the running max
/// M = max(M, m_c), the running sum rescaled by exp(M_old − M) when M grew and Σ exp(x − M) over
/// the chunk (from L1). f16/bf16 chunks are widened to fp32 once, into a stack buffer. A row of
/// at most one chunk gives exactly the two-pass numbers (max, then Σ exp); longer rows differ from
/// them only by the rescaling's rounding (a few fp32 ulps of the sum).
///
/// With `keep` (n compute-type values) the pass also stores each e_j = exp(x_j − M_c) there, M_c
/// the running max after x_j's chunk (0 for −inf and NaN for NaN in a chunk of only those), and
/// `chunk_max` (one per chunk) receives each M_c: what cross_entropy_with_grad (ops/cpu/loss.cpp)
/// needs to form the gradient without a second exp per element. The arithmetic is the same either
/// way, so the normaliser is bit for bit the one without them.
template <typename T>
struct RowNormaliser {
  opmath_t<T> max;
  opmath_t<T> log_sum;
};
template <typename T>
inline RowNormaliser<T> row_log_normaliser(const T* x, int64_t n, opmath_t<T>* keep = nullptr,
                                           opmath_t<T>* chunk_max = nullptr) {
  using A = opmath_t<T>;
  constexpr A kNegInf = -std::numeric_limits<A>::infinity();
  A m = kNegInf, s = 0;
  // One chunk b of k values (chunk number c); dst, if not null, receives its exponentials.
  auto chunk = [&](const A* b, int64_t k, A* dst, int64_t c) {
    const A cm = rows_detail::lanes_max(b, k);  // NaNs skipped
    if (cm == kNegInf) {
      // Only −inf and NaN here: exp(x − M) is 0 for −inf whatever M becomes; a NaN poisons the sum.
      for (int64_t i = 0; i < k; ++i) {
        const bool nan = b[i] != b[i];
        if (nan) s = std::numeric_limits<A>::quiet_NaN();
        if (dst != nullptr) dst[i] = nan ? std::numeric_limits<A>::quiet_NaN() : A(0);
      }
    } else {
      if (cm > m) {
        s *= std::exp(m - cm);  // 0 (or NaN) times exp(−inf) = 0 on the first finite chunk
        m = cm;
      }
      s += exp_shift_sum(b, dst, k, m, A(1));
    }
    if (chunk_max != nullptr) chunk_max[c] = m;
  };
  for (int64_t c = 0; c < n; c += kNormaliserChunk) {
    const int64_t k = std::min(kNormaliserChunk, n - c);
    A* dst = keep != nullptr ? keep + c : nullptr;
    if constexpr (std::is_same_v<T, A>) {
      chunk(x + c, k, dst, c / kNormaliserChunk);
    } else if (dst != nullptr) {
      load_block<A>(x + c, 1, dst, k);  // widened in place, then exponentiated in place
      chunk(dst, k, dst, c / kNormaliserChunk);
    } else {
      A buf[kNormaliserChunk];
      load_block<A>(x + c, 1, buf, k);
      chunk(buf, k, nullptr, c / kNormaliserChunk);
    }
  }
  if (m == kNegInf && n > 0) return {m, std::numeric_limits<A>::quiet_NaN()};
  return {m, std::log(s)};
}

/// log Σ exp(x) over a row, stably (max-shifted). −inf for a row of −inf; NaN if x has a NaN.
template <typename T>
inline opmath_t<T> row_logsumexp(const T* x, int64_t n) {
  using A = opmath_t<T>;
  const A m = row_max(x, n);
  if (m == -std::numeric_limits<A>::infinity()) return m;
  return m + std::log(row_sum_exp(x, n, m));
}

/// y[i] = scale·exp(x[i] − shift) over a row; y may be another storage type U, or alias x.
/// shift must be >= max(x) (the row max, or a log-sum-exp).
template <typename T, typename U>
inline void row_exp_affine(const T* x, U* y, int64_t n, opmath_t<T> shift, opmath_t<T> scale) {
  using A = opmath_t<T>;
  rows_detail::for_each_block(x, n, [&](const A* b, int64_t off, int64_t k) {
    if constexpr (std::is_same_v<U, A>) {
      exp_shift_sum(b, y + off, k, shift, scale);
    } else {
      A out[kBlock];
      for (int64_t j = 0; j < k; j += kBlock) {
        const int64_t m = std::min(kBlock, k - j);
        exp_shift_sum(b + j, out, m, shift, scale);
        store_block<U>(out, y + off + j, 1, m);
      }
    }
  });
}

/// y = softmax(x) over a row: exp(x − max) / Σ exp(x − max). y may alias x.
template <typename T, typename U>
inline void row_softmax(const T* x, U* y, int64_t n) {
  using A = opmath_t<T>;
  const A m = row_max(x, n);
  if constexpr (std::is_same_v<T, A> && std::is_same_v<U, A>) {
    // One exponential per element: write exp(x − max) and sum it, then scale in place.
    const A s = exp_shift_sum(x, y, n, m, A(1));
    const A inv = A(1) / s;
    for (int64_t i = 0; i < n; ++i) y[i] *= inv;
  } else {
    row_exp_affine(x, y, n, m, A(1) / row_sum_exp(x, n, m));
  }
}

/// y = log_softmax(x) over a row: (x − max) − log Σ exp(x − max). y may alias x.
template <typename T, typename U>
inline void row_log_softmax(const T* x, U* y, int64_t n) {
  using A = opmath_t<T>;
  const auto [m, log_sum] = row_log_normaliser(x, n);
  // Named captures: clang before 16 cannot capture structured bindings implicitly.
  rows_detail::for_each_block(x, n, [&, &m = m, &log_sum = log_sum](const A* b, int64_t off, int64_t k) {
    if constexpr (std::is_same_v<U, A>) {
      for (int64_t i = 0; i < k; ++i) y[off + i] = (b[i] - m) - log_sum;
    } else {
      A out[kBlock];
      for (int64_t j = 0; j < k; j += kBlock) {
        const int64_t mm = std::min(kBlock, k - j);
        for (int64_t i = 0; i < mm; ++i) out[i] = (b[j + i] - m) - log_sum;
        store_block<U>(out, y + off + j, 1, mm);
      }
    }
  });
}

/// Softmax backward over a row: dx = y·(g − Σ g·y), y the forward output. dx may alias g.
template <typename T>
inline void row_softmax_backward(const T* g, const T* y, T* dx, int64_t n) {
  using A = opmath_t<T>;
  A dot = 0;
  rows_detail::for_each_block2(g, y, n, [&](const A* gb, const A* yb, int64_t, int64_t k) {
    dot += lanes_sum<A>(k, [&](int64_t i) { return gb[i] * yb[i]; });
  });
  rows_detail::for_each_block2(g, y, n, [&](const A* gb, const A* yb, int64_t off, int64_t k) {
    if constexpr (std::is_same_v<T, A>) {
      for (int64_t i = 0; i < k; ++i) dx[off + i] = yb[i] * (gb[i] - dot);
    } else {
      A out[kBlock];
      for (int64_t i = 0; i < k; ++i) out[i] = yb[i] * (gb[i] - dot);
      store_block<T>(out, dx + off, 1, k);
    }
  });
}

/// Log-softmax backward over a row: dx = g − exp(y)·Σ g, y the forward output. dx may alias g.
template <typename T>
inline void row_log_softmax_backward(const T* g, const T* y, T* dx, int64_t n) {
  using A = opmath_t<T>;
  A total = 0;
  rows_detail::for_each_block(g, n, [&](const A* gb, int64_t, int64_t k) {
    total += lanes_sum<A>(k, [&](int64_t i) { return gb[i]; });
  });
  if constexpr (std::is_same_v<T, A>) {
    if (dx != g) {
      // exp(y) straight into dx, then combined in place.
      exp_shift_sum(y, dx, n, A(0), A(1));
      for (int64_t i = 0; i < n; ++i) dx[i] = g[i] - dx[i] * total;
      return;
    }
  }
  rows_detail::for_each_block2(g, y, n, [&](const A* gb, const A* yb, int64_t off, int64_t k) {
    A e[kBlock];
    for (int64_t j = 0; j < k; j += kBlock) {
      const int64_t m = std::min(kBlock, k - j);
      exp_shift_sum(yb + j, e, m, A(0), A(1));
      for (int64_t i = 0; i < m; ++i) e[i] = gb[j + i] - e[i] * total;
      if constexpr (std::is_same_v<T, A>) std::copy(e, e + m, dx + off + j);
      else store_block<T>(e, dx + off + j, 1, m);
    }
  });
}

}  // namespace precis::cpu
