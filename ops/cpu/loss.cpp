// Class-index loss kernels: fused cross-entropy (log-softmax + NLL + label smoothing) forward and
// backward, and NLL on log-probabilities. Rows are independent and split over the intra-op pool.
//
// Cross-entropy at a 30522-way vocabulary is memory-bound: forward reads each row once from
// memory (max) and once more from cache (Σ exp, and Σ w·x when smoothing), and writes three
// numbers per row; backward reads the row and writes its gradient in one vectorised pass. No
// (M, C) log-probability tensor is ever materialised.
#include <algorithm>
#include <cmath>

#include <Eigen/Core>

#include "core/thread_pool.h"
#include "ops/cpu/cpu_backend.h"
#include "ops/cpu/dispatch.h"
#include "ops/cpu/elementwise_util.h"
#include "ops/cpu/logsumexp_row.h"
#include "ops/cpu/vec_exp.h"
#include "ops/kernels_loss.h"
#include "ops/op_table.h"

namespace precis::cpu {

namespace {

template <typename C>
using Arr = Eigen::Array<C, Eigen::Dynamic, 1>;

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

// x: (M, C) contiguous; target: (M) i64; weight: (C) or undefined; loss_rows, weight_rows, lse:
// (M) contiguous. Accumulates in C = opmath_t<T>.
template <typename T>
void cross_entropy_kernel(const Tensor& loss_rows, const Tensor& weight_rows, const Tensor& lse_out, const Tensor& x,
                          const Tensor& target, const Tensor& weight, int64_t ignore_index, double label_smoothing) {
  using C = opmath_t<T>;
  const int64_t rows = x.size(0), classes = x.size(1);
  const T* xs = static_cast<const T*>(x.data_ptr());
  const int64_t* ts = static_cast<const int64_t*>(target.data_ptr());
  const C* w = weight_data<C>(weight);
  C* loss = static_cast<C*>(loss_rows.data_ptr());
  C* wrow = static_cast<C*>(weight_rows.data_ptr());
  C* lse = static_cast<C*>(lse_out.data_ptr());
  const C eps = static_cast<C>(label_smoothing);
  const C w_total = weight_total(w, classes);
  parallel_for(0, rows, row_grain(classes), [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const T* xr = xs + i * classes;
      const C l = row_logsumexp(xr, classes);
      lse[i] = l;
      const int64_t t = ts[i];
      if (t == ignore_index) {
        loss[i] = 0;
        wrow[i] = 0;
        continue;
      }
      const C wt = w != nullptr ? w[t] : C(1);
      C value = (C(1) - eps) * wt * (l - static_cast<C>(xr[t]));
      if (eps != C(0)) value += eps / static_cast<C>(classes) * (w_total * l - row_weighted_sum(xr, w, classes));
      loss[i] = value;
      wrow[i] = wt;
    }
  });
}

// grad_x: (M, C) contiguous; x: (M, C) contiguous; lse, target: (M); grad_rows: (M) any stride.
// Computes in C = opmath_t<T>; one pass per row (exp, scale, store), then the target element.
template <typename T>
void cross_entropy_backward_kernel(const Tensor& grad_x, const Tensor& x, const Tensor& lse_in, const Tensor& target,
                                   const Tensor& weight, const Tensor& grad_rows, int64_t ignore_index,
                                   double label_smoothing) {
  using C = opmath_t<T>;
  using Map = Eigen::Map<Arr<C>>;
  using ConstMap = Eigen::Map<const Arr<C>>;
  const int64_t rows = x.size(0), classes = x.size(1);
  const T* xs = static_cast<const T*>(x.data_ptr());
  T* gs = static_cast<T*>(grad_x.data_ptr());
  const int64_t* ts = static_cast<const int64_t*>(target.data_ptr());
  const C* lse = static_cast<const C*>(lse_in.data_ptr());
  const C* gr = static_cast<const C*>(grad_rows.data_ptr());
  const int64_t gr_stride = grad_rows.stride(0);
  const C* w = weight_data<C>(weight);
  const C eps = static_cast<C>(label_smoothing);
  const C smooth = eps / static_cast<C>(classes);
  const C w_total = weight_total(w, classes);
  parallel_for(0, rows, row_grain(classes), [&](int64_t b, int64_t e) {
    alignas(64) C xbuf[kBlock];
    alignas(64) C obuf[kBlock];
    for (int64_t i = b; i < e; ++i) {
      const T* xr = xs + i * classes;
      T* out = gs + i * classes;
      const int64_t t = ts[i];
      if (t == ignore_index) {
        std::fill(out, out + classes, T(0));
        continue;
      }
      const C g = gr[i * gr_stride];
      const C wt = w != nullptr ? w[t] : C(1);
      const C a = g * ((C(1) - eps) * wt + smooth * w_total);  // multiplies p
      const C s = g * smooth;                                    // multiplies w_j
      const C hit = g * (C(1) - eps) * wt;                       // subtracted at the target
      const C l = lse[i];
#ifdef PRECIS_HAVE_VEC_EXP
      if constexpr (std::is_same_v<C, float>) {
        if constexpr (std::is_same_v<T, float>) {
          exp_affine_f32(xr, classes, l, a, s, w, out);
          out[t] -= hit;
        } else {
          for (int64_t c0 = 0; c0 < classes; c0 += kBlock) {
            const int64_t k = std::min(kBlock, classes - c0);
            load_block<C>(xr + c0, 1, xbuf, k);
            exp_affine_f32(xbuf, k, l, a, s, w != nullptr ? w + c0 : nullptr, obuf);
            if (t >= c0 && t < c0 + k) obuf[t - c0] -= hit;
            store_block<T>(obuf, out + c0, 1, k);
          }
        }
        continue;
      }
#endif
      if constexpr (std::is_same_v<T, C>) {
        Map o(out, classes);
        if (w != nullptr) {
          o = (ConstMap(xr, classes) - l).exp() * a - ConstMap(w, classes) * s;
        } else {
          o = (ConstMap(xr, classes) - l).exp() * a - s;
        }
        out[t] -= hit;
      } else {
        for (int64_t c0 = 0; c0 < classes; c0 += kBlock) {
          const int64_t k = std::min(kBlock, classes - c0);
          load_block<C>(xr + c0, 1, xbuf, k);
          Map o(obuf, k);
          if (w != nullptr) {
            o = (ConstMap(xbuf, k) - l).exp() * a - ConstMap(w + c0, k) * s;
          } else {
            o = (ConstMap(xbuf, k) - l).exp() * a - s;
          }
          if (t >= c0 && t < c0 + k) obuf[t - c0] -= hit;
          store_block<T>(obuf, out + c0, 1, k);
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
