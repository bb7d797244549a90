// Class-index loss kernels: fused cross-entropy (log-softmax + NLL + label smoothing) forward and
// backward, and NLL on log-probabilities. Rows are independent and split over the intra-op pool.
//
// Cross-entropy at a 30522-way vocabulary is memory-bound: forward reads each row once from
// memory (max and Σ exp in one pass over L1-sized chunks, row_log_normaliser; Σ w·(max − x) when
// smoothing reads it once more) and writes four numbers per row; backward reads the row and
// writes its gradient in one vectorised pass. f16/bf16 rows are read as they are and widened to
// fp32 chunk by chunk (what autocast's FP32 policy asks for, without the fp32 copy: ops/loss.cpp).
// No (M, C) log-probability tensor is ever materialised. The row routines (max, Σ exp, the
// vectorised exp) are softmax's, from ops/cpu/softmax_rows.h, so both compute the same numbers.
#include <algorithm>
#include <cmath>

#include "core/thread_pool.h"
#include "ops/cpu/cpu_backend.h"
#include "core/dtype_visit.h"
#include "core/opmath.h"
#include "ops/cpu/elementwise_util.h"
#include "ops/cpu/lanes.h"
#include "ops/cpu/softmax_rows.h"
#include "ops/kernels_loss.h"
#include "ops/op_table.h"

namespace precis::cpu {

namespace {

/// Rows per parallel chunk: about 16K elements, since each costs an exp.
int64_t row_grain(int64_t cols) { return std::max<int64_t>(1, 16384 / std::max<int64_t>(cols, 1)); }

template <typename C>
const C* weight_data(const Tensor& weight) {
  return weight.defined() ? static_cast<const C*>(weight.data_ptr()) : nullptr;
}

// Σ_c w_c, or C when there are no class weights.
template <typename C>
C weight_total(const C* w, int64_t classes) {
  if (w == nullptr) return static_cast<C>(classes);
  C s = 0;
  for (int64_t c = 0; c < classes; ++c) s += w[c];
  return s;
}

// Σ_c w_c·(m − x_c) (w null: all ones) over a row, in the compute type. Taken against the row
// max m element by element, so nothing rounds at m's magnitude.
template <typename T>
opmath_t<T> row_weighted_gap(const T* x, const opmath_t<T>* w, int64_t n, opmath_t<T> m) {
  using A = opmath_t<T>;
  A total = 0;
  rows_detail::for_each_block(x, n, [&](const A* b, int64_t off, int64_t k) {
    total += w != nullptr ? lanes_sum<A>(k, [&](int64_t i) { return w[off + i] * (m - b[i]); })
                          : lanes_sum<A>(k, [&](int64_t i) { return m - b[i]; });
  });
  return total;
}

// x: (M, C) contiguous; target: (M) i64; weight: (C) or undefined; loss_rows, weight_rows: (M);
// row_stats: (M, 2) = (max, log Σ exp(x − max)) per row. Accumulates in A = opmath_t<T>.
template <typename T>
void cross_entropy_kernel(const Tensor& loss_rows, const Tensor& weight_rows, const Tensor& row_stats, const Tensor& x,
                          const Tensor& target, const Tensor& weight, int64_t ignore_index, double label_smoothing) {
  using A = opmath_t<T>;
  const int64_t rows = x.size(0), classes = x.size(1);
  const T* xs = static_cast<const T*>(x.data_ptr());
  const int64_t* ts = static_cast<const int64_t*>(target.data_ptr());
  const A* w = weight_data<A>(weight);
  A* loss = static_cast<A*>(loss_rows.data_ptr());
  A* wrow = static_cast<A*>(weight_rows.data_ptr());
  A* stats = static_cast<A*>(row_stats.data_ptr());
  const A eps = static_cast<A>(label_smoothing);
  const A w_total = weight_total(w, classes);
  parallel_for(0, rows, row_grain(classes), [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const T* xr = xs + i * classes;
      const auto [m, log_sum] = row_log_normaliser(xr, classes);
      stats[2 * i] = m;
      stats[2 * i + 1] = log_sum;
      const int64_t t = ts[i];
      if (t == ignore_index) {
        loss[i] = 0;
        wrow[i] = 0;
        continue;
      }
      // −log p_t = log_sum − (x_t − m); Σ_c w_c·(−log p_c) = W·log_sum + Σ_c w_c·(m − x_c).
      const A wt = w != nullptr ? w[t] : A(1);
      A value = (A(1) - eps) * wt * (log_sum - (static_cast<A>(xr[t]) - m));
      if (eps != A(0))
        value += eps / static_cast<A>(classes) * (w_total * log_sum + row_weighted_gap(xr, w, classes, m));
      loss[i] = value;
      wrow[i] = wt;
    }
  });
}

// grad_x: (M, C) contiguous; x: (M, C) contiguous; row_stats: (M, 2); target: (M); grad_rows: (M)
// any stride. Computes in A = opmath_t<T>: one pass per row writing a·softmax − s·w, with
// softmax = exp(x − max)·exp(−log_sum), then the target element.
template <typename T>
void cross_entropy_backward_kernel(const Tensor& grad_x, const Tensor& x, const Tensor& row_stats, const Tensor& target,
                                   const Tensor& weight, const Tensor& grad_rows, int64_t ignore_index,
                                   double label_smoothing) {
  using A = opmath_t<T>;
  const int64_t rows = x.size(0), classes = x.size(1);
  const T* xs = static_cast<const T*>(x.data_ptr());
  T* gs = static_cast<T*>(grad_x.data_ptr());
  const int64_t* ts = static_cast<const int64_t*>(target.data_ptr());
  const A* stats = static_cast<const A*>(row_stats.data_ptr());
  const A* gr = static_cast<const A*>(grad_rows.data_ptr());
  const int64_t gr_stride = grad_rows.stride(0);
  const A* w = weight_data<A>(weight);
  const A eps = static_cast<A>(label_smoothing);
  const A smooth = eps / static_cast<A>(classes);
  const A w_total = weight_total(w, classes);
  parallel_for(0, rows, row_grain(classes), [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const T* xr = xs + i * classes;
      T* out = gs + i * classes;
      const int64_t t = ts[i];
      if (t == ignore_index) {
        std::fill(out, out + classes, T(0.0f));
        continue;
      }
      const A g = gr[i * gr_stride];
      const A wt = w != nullptr ? w[t] : A(1);
      const A a = g * ((A(1) - eps) * wt + smooth * w_total);  // multiplies p
      const A s = g * smooth;                                    // multiplies w_j
      const A hit = g * (A(1) - eps) * wt;                       // subtracted at the target
      const A m = stats[2 * i];
      const A scale = a * std::exp(-stats[2 * i + 1]);
      // o[j] = scale·exp(x_j − m) − s·w_j for the columns [c0, c0 + k) of the row.
      auto finish = [&](A* o, int64_t c0, int64_t k) {
        if (s != A(0)) {
          if (w != nullptr) {
            for (int64_t j = 0; j < k; ++j) o[j] -= s * w[c0 + j];
          } else {
            for (int64_t j = 0; j < k; ++j) o[j] -= s;
          }
        }
        if (t >= c0 && t < c0 + k) o[t - c0] -= hit;
      };
      // In L1-sized chunks, so the smoothing and target terms touch the chunk while it is cached;
      // f16/bf16 chunks are widened into a stack buffer, computed on in place and rounded once.
      if constexpr (std::is_same_v<T, A>) {
        for (int64_t c0 = 0; c0 < classes; c0 += kNormaliserChunk) {
          const int64_t k = std::min(kNormaliserChunk, classes - c0);
          exp_shift_sum(xr + c0, out + c0, k, m, scale);
          finish(out + c0, c0, k);
        }
      } else {
        A buf[kNormaliserChunk];
        for (int64_t c0 = 0; c0 < classes; c0 += kNormaliserChunk) {
          const int64_t k = std::min(kNormaliserChunk, classes - c0);
          load_block<A>(xr + c0, 1, buf, k);
          exp_shift_sum(buf, buf, k, m, scale);
          finish(buf, c0, k);
          store_block<T>(buf, out + c0, 1, k);
        }
      }
    }
  });
}

// x: (M, C) any strides; target: (M) i64; weight: (C) or undefined. Accumulates in opmath_t<T>.
template <typename T>
void nll_loss_kernel(const Tensor& loss_rows, const Tensor& weight_rows, const Tensor& x, const Tensor& target,
                     const Tensor& weight, int64_t ignore_index) {
  using C = opmath_t<T>;
  const int64_t rows = x.size(0);
  const int64_t s0 = x.stride(0), s1 = x.stride(1);
  const T* xs = static_cast<const T*>(x.data_ptr());
  const int64_t* ts = static_cast<const int64_t*>(target.data_ptr());
  const C* w = weight_data<C>(weight);
  C* loss = static_cast<C*>(loss_rows.data_ptr());
  C* wrow = static_cast<C*>(weight_rows.data_ptr());
  for (int64_t i = 0; i < rows; ++i) {
    const int64_t t = ts[i];
    if (t == ignore_index) {
      loss[i] = 0;
      wrow[i] = 0;
      continue;
    }
    const C wt = w != nullptr ? w[t] : C(1);
    loss[i] = -wt * static_cast<C>(xs[i * s0 + t * s1]);
    wrow[i] = wt;
  }
}

}  // namespace

void register_loss_kernels() {
  for (DType dt : {DType::f32, DType::f64, DType::f16, DType::bf16})
    visit_dtype(dt, [&]<typename T>() {
      if constexpr (std::is_floating_point_v<opmath_t<T>>) {
        register_kernel<kernels::CrossEntropyKernel>(OpId::cross_entropy, DeviceType::cpu, dt,
                                                     &cross_entropy_kernel<T>);
        register_kernel<kernels::CrossEntropyBackwardKernel>(OpId::cross_entropy_backward, DeviceType::cpu, dt,
                                                             &cross_entropy_backward_kernel<T>);
        register_kernel<kernels::NllLossKernel>(OpId::nll_loss, DeviceType::cpu, dt, &nll_loss_kernel<T>);
      }
    });
}

}  // namespace precis::cpu
