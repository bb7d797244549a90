// CPU softmax / log_softmax forward and their fused backward kernels. A contiguous tensor seen
// as (outer, D, inner) with D the softmax dim: inner == 1 runs the contiguous row routines of
// ops/cpu/softmax_rows.h over the outer rows; otherwise blocks of kColumnBlock adjacent inner
// positions are processed together, each step over D touching a contiguous run (vectorised
// across the block). Math and accumulation in opmath_t (fp32 for f16/bf16, f64 for f64).
#include <algorithm>
#include <cmath>
#include <limits>

#include "core/thread_pool.h"
#include "ops/cpu/cpu_backend.h"
#include "core/dtype_visit.h"
#include "core/opmath.h"
#include "ops/cpu/elementwise_util.h"
#include "ops/cpu/softmax_rows.h"
#include "ops/contracts/kernels_norm.h"
#include "ops/op_table.h"

namespace precis::cpu {

namespace {

// Inner positions handled together by the strided (dim not last) path.
constexpr int64_t kColumnBlock = 64;
// Elements per parallel chunk: softmax costs a few passes and an exponential per element.
constexpr int64_t kSoftmaxGrain = 16384;


// Runs body(outer_index, inner_begin, inner_count) over every (outer, inner block) pair, in
// parallel; body handles one block of adjacent inner positions across the whole dim.
template <typename Body>
void for_each_column_block(const kernels::DimSplit& l, Body&& body) {
  const int64_t nblocks = (l.inner + kColumnBlock - 1) / kColumnBlock;
  const int64_t per_task = std::min(l.inner, kColumnBlock) * l.dim;
  const int64_t grain = std::max<int64_t>(1, kSoftmaxGrain / std::max<int64_t>(per_task, 1));
  parallel_for(0, l.outer * nblocks, grain, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      const int64_t o = t / nblocks, j0 = (t % nblocks) * kColumnBlock;
      body(o, j0, std::min(kColumnBlock, l.inner - j0));
    }
  });
}

template <typename Row>
void for_each_outer_row(const kernels::DimSplit& l, Row&& row) {
  const int64_t grain = std::max<int64_t>(1, kSoftmaxGrain / std::max<int64_t>(l.dim, 1));
  parallel_for(0, l.outer, grain, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) row(r);
  });
}

// y = softmax or log_softmax along dim. x, y: (outer, D, inner) contiguous.
template <typename T, bool kLog>
void softmax_kernel(const Tensor& y, const Tensor& x, int64_t dim) {
  using A = opmath_t<T>;
  const kernels::DimSplit l = kernels::split_at_dim(x, dim);
  if (x.numel() == 0) return;
  const T* xp = x.data_ptr<T>();
  T* yp = y.data_ptr<T>();
  if (l.inner == 1) {
    for_each_outer_row(l, [&](int64_t r) {
      if constexpr (kLog) row_log_softmax(xp + r * l.dim, yp + r * l.dim, l.dim);
      else row_softmax(xp + r * l.dim, yp + r * l.dim, l.dim);
    });
    return;
  }
  // x: (outer, D, inner) — per block of inner positions: running max, then Σ exp, then write.
  for_each_column_block(l, [&](int64_t o, int64_t j0, int64_t nj) {
    A mx[kColumnBlock], sum[kColumnBlock], v[kColumnBlock];
    std::fill(mx, mx + nj, -std::numeric_limits<A>::infinity());
    std::fill(sum, sum + nj, A(0));
    const T* base = xp + o * l.dim * l.inner + j0;
    T* ybase = yp + o * l.dim * l.inner + j0;
    for (int64_t d = 0; d < l.dim; ++d) {
      load_block<A>(base + d * l.inner, 1, v, nj);
      for (int64_t j = 0; j < nj; ++j) mx[j] = v[j] > mx[j] ? v[j] : mx[j];
    }
    for (int64_t d = 0; d < l.dim; ++d) {
      load_block<A>(base + d * l.inner, 1, v, nj);
      for (int64_t j = 0; j < nj; ++j) v[j] -= mx[j];
      exp_shift_sum(v, v, nj, A(0), A(1));
      for (int64_t j = 0; j < nj; ++j) sum[j] += v[j];
    }
    if constexpr (kLog) {
      for (int64_t j = 0; j < nj; ++j) sum[j] = std::log(sum[j]);
    } else {
      for (int64_t j = 0; j < nj; ++j) sum[j] = A(1) / sum[j];
    }
    for (int64_t d = 0; d < l.dim; ++d) {
      load_block<A>(base + d * l.inner, 1, v, nj);
      if constexpr (kLog) {
        for (int64_t j = 0; j < nj; ++j) v[j] = (v[j] - mx[j]) - sum[j];
      } else {
        for (int64_t j = 0; j < nj; ++j) v[j] -= mx[j];
        exp_shift_sum(v, v, nj, A(0), A(1));
        for (int64_t j = 0; j < nj; ++j) v[j] *= sum[j];
      }
      store_block<T>(v, ybase + d * l.inner, 1, nj);
    }
  });
}

// Fused backward along dim. softmax: dx = y·(g − Σ g·y); log_softmax: dx = g − exp(y)·Σ g.
// dx, g, y: (outer, D, inner) contiguous.
template <typename T, bool kLog>
void softmax_backward_kernel(const Tensor& dx, const Tensor& grad, const Tensor& y, int64_t dim) {
  using A = opmath_t<T>;
  const kernels::DimSplit l = kernels::split_at_dim(y, dim);
  if (y.numel() == 0) return;
  const T* gp = grad.data_ptr<T>();
  const T* yp = y.data_ptr<T>();
  T* dp = dx.data_ptr<T>();
  if (l.inner == 1) {
    for_each_outer_row(l, [&](int64_t r) {
      const int64_t off = r * l.dim;
      if constexpr (kLog) row_log_softmax_backward(gp + off, yp + off, dp + off, l.dim);
      else row_softmax_backward(gp + off, yp + off, dp + off, l.dim);
    });
    return;
  }
  for_each_column_block(l, [&](int64_t o, int64_t j0, int64_t nj) {
    A acc[kColumnBlock], gv[kColumnBlock], yv[kColumnBlock];
    std::fill(acc, acc + nj, A(0));
    const int64_t base = o * l.dim * l.inner + j0;
    for (int64_t d = 0; d < l.dim; ++d) {
      load_block<A>(gp + base + d * l.inner, 1, gv, nj);
      if constexpr (kLog) {
        for (int64_t j = 0; j < nj; ++j) acc[j] += gv[j];
      } else {
        load_block<A>(yp + base + d * l.inner, 1, yv, nj);
        for (int64_t j = 0; j < nj; ++j) acc[j] += gv[j] * yv[j];
      }
    }
    for (int64_t d = 0; d < l.dim; ++d) {
      load_block<A>(gp + base + d * l.inner, 1, gv, nj);
      load_block<A>(yp + base + d * l.inner, 1, yv, nj);
      if constexpr (kLog) {
        exp_shift_sum(yv, yv, nj, A(0), A(1));
        for (int64_t j = 0; j < nj; ++j) gv[j] = gv[j] - yv[j] * acc[j];
      } else {
        for (int64_t j = 0; j < nj; ++j) gv[j] = yv[j] * (gv[j] - acc[j]);
      }
      store_block<T>(gv, dp + base + d * l.inner, 1, nj);
    }
  });
}

}  // namespace

void register_softmax_kernels() {
  for (DType dt : {DType::f32, DType::f64, DType::f16, DType::bf16}) {
    visit_dtype(dt, [&]<typename T>() {
      if constexpr (std::is_floating_point_v<opmath_t<T>>) {
        register_kernel<kernels::SoftmaxKernel>(OpId::softmax, DeviceType::cpu, dt, &softmax_kernel<T, false>);
        register_kernel<kernels::SoftmaxKernel>(OpId::log_softmax, DeviceType::cpu, dt, &softmax_kernel<T, true>);
        register_kernel<kernels::SoftmaxBackwardKernel>(OpId::softmax_backward, DeviceType::cpu, dt,
                                                        &softmax_backward_kernel<T, false>);
        register_kernel<kernels::SoftmaxBackwardKernel>(OpId::log_softmax_backward, DeviceType::cpu, dt,
                                                        &softmax_backward_kernel<T, true>);
      }
    });
  }
}

}  // namespace precis::cpu
