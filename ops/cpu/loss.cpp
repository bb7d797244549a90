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
//
// With the rows in cache the pair is bound by its exps instead (one per logit each, ~0.5 ns with
// AVX-512), so cross_entropy_with_grad, for a caller that knows the loss gradient before the loss
// (linear_cross_entropy), does both with one exp per logit by keeping the row's exponentials.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "ops/cpu/cpu_backend.h"
#include "ops/cpu/cross_entropy_rows.h"
#include "core/dtype_visit.h"
#include "core/opmath.h"
#include "ops/cpu/elementwise_util.h"
#include "ops/cpu/lanes.h"
#include "ops/cpu/softmax_rows.h"
#include "ops/contracts/kernels_loss.h"
#include "ops/op_table.h"

namespace precis::cpu {

namespace {

// A row whose target is outside [0, C): the front-end checks targets on the CPU before any
// kernel runs, but on a device it only records the check (ops/device_asserts.h), and the tests'
// fake device (tests/support/fake_cuda) runs these kernels there. They then give the row NaN, as
// the CUDA kernels do (ops/contracts/kernels_loss.h), instead of reading out of bounds.
template <typename A>
constexpr A kNaN = std::numeric_limits<A>::quiet_NaN();


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

// The loss of a row whose target t is not ignored, from its normaliser (m, log_sum); wt = w[t].
// −log p_t = log_sum − (x_t − m); Σ_c w_c·(−log p_c) = W·log_sum + Σ_c w_c·(m − x_c).
// Not inlined (nor RowGrad::finish): -mfma lets the compiler contract a·b + c differently in
// each caller it is inlined into, and the fused kernel must give the forward kernel's bits.
template <typename T, typename A = opmath_t<T>>
[[gnu::noinline]] A row_loss(const T* xr, int64_t classes, int64_t t, const A* w, A wt, A w_total, A eps, A m, A log_sum) {
  A value = (A(1) - eps) * wt * (log_sum - (static_cast<A>(xr[t]) - m));
  if (eps != A(0))
    value += eps / static_cast<A>(classes) * (w_total * log_sum + row_weighted_gap(xr, w, classes, m));
  return value;
}

// The gradient's per-row coefficients (CrossEntropyBackwardKernel's formula): grad_j =
// scale·exp(x_j − m) − s·w_j − [j = t]·hit, with scale = a·exp(−log_sum).
template <typename A>
struct RowGrad {
  A scale, s, hit;
  int64_t t;
  const A* w;
  RowGrad(A g, A wt, A eps, A smooth, A w_total, A log_sum, int64_t target, const A* weights)
      : scale(g * ((A(1) - eps) * wt + smooth * w_total) * std::exp(-log_sum)),
        s(g * smooth),
        hit(g * (A(1) - eps) * wt),
        t(target),
        w(weights) {}
  // Subtracts the smoothing and target terms from o, the columns [c0, c0 + k) of the row.
  [[gnu::noinline]] void finish(A* o, int64_t c0, int64_t k) const {
    if (s != A(0)) {
      if (w != nullptr) {
        for (int64_t j = 0; j < k; ++j) o[j] -= s * w[c0 + j];
      } else {
        for (int64_t j = 0; j < k; ++j) o[j] -= s;
      }
    }
    if (t >= c0 && t < c0 + k) o[t - c0] -= hit;
  }
};

}  // namespace

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
      if (t < 0 || t >= classes) {  // reachable only unchecked, on the tests' fake device: NaN
        loss[i] = wrow[i] = kNaN<A>;
        continue;
      }
      const A wt = w != nullptr ? w[t] : A(1);
      loss[i] = row_loss(xr, classes, t, w, wt, w_total, eps, m, log_sum);
      wrow[i] = wt;
    }
  });
}

namespace {

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
      if (t < 0 || t >= classes) {  // reachable only unchecked, on the tests' fake device: NaN
        std::fill(out, out + classes, static_cast<T>(kNaN<A>));
        continue;
      }
      const A wt = w != nullptr ? w[t] : A(1);
      const RowGrad<A> rg(gr[i * gr_stride], wt, eps, smooth, w_total, stats[2 * i + 1], t, w);
      const A m = stats[2 * i], scale = rg.scale;
      // In L1-sized chunks, so the smoothing and target terms touch the chunk while it is cached;
      // f16/bf16 chunks are widened into a stack buffer, computed on in place and rounded once.
      if constexpr (std::is_same_v<T, A>) {
        for (int64_t c0 = 0; c0 < classes; c0 += kNormaliserChunk) {
          const int64_t k = std::min(kNormaliserChunk, classes - c0);
          exp_shift_sum(xr + c0, out + c0, k, m, scale);
          rg.finish(out + c0, c0, k);
        }
      } else {
        A buf[kNormaliserChunk];
        for (int64_t c0 = 0; c0 < classes; c0 += kNormaliserChunk) {
          const int64_t k = std::min(kNormaliserChunk, classes - c0);
          load_block<A>(xr + c0, 1, buf, k);
          exp_shift_sum(buf, buf, k, m, scale);
          rg.finish(buf, c0, k);
          store_block<T>(buf, out + c0, 1, k);
        }
      }
    }
  });
}

// The fused kernel's operands, checked (the pair it replaces trusts its caller, but this one is
// reached by direct kernel calls only, and a wrong layout here would write out of bounds).
void check_with_grad_operands(const Tensor& loss_rows, const Tensor& weight_rows, const Tensor& row_stats,
                              const Tensor& grad_x, const Tensor& x, const Tensor& target, const Tensor& weight,
                              const Tensor& grad_rows) {
  const char* op = "cross_entropy_with_grad";
  auto all = [&] {
    std::string d = "x " + x.describe() + ", grad_x " + grad_x.describe() + ", target " + target.describe() +
                    ", grad_rows " + grad_rows.describe() + ", loss_rows " + loss_rows.describe() + ", weight_rows " +
                    weight_rows.describe() + ", row_stats " + row_stats.describe();
    if (weight.defined()) d += ", weight " + weight.describe();
    return d;
  };
  PRECIS_CHECK_SHAPE(x.dim() == 2 && x.is_contiguous() && grad_x.sizes() == x.sizes() && grad_x.is_contiguous(), op,
                     ": x and grad_x must be (M, C) contiguous of one shape, got ", all(),
                     "; call it through linear_cross_entropy or make them .contiguous()");
  const int64_t M = x.size(0), C = x.size(1);
  PRECIS_CHECK_SHAPE(loss_rows.sizes() == Shape{M} && loss_rows.is_contiguous() && weight_rows.sizes() == Shape{M} &&
                         weight_rows.is_contiguous() && row_stats.sizes() == (Shape{M, 2}) &&
                         row_stats.is_contiguous() && target.sizes() == Shape{M} && target.is_contiguous() &&
                         grad_rows.sizes() == Shape{M} &&
                         (!weight.defined() || (weight.sizes() == Shape{C} && weight.is_contiguous())),
                     op, ": expected loss_rows, weight_rows, target and grad_rows (", M, "), row_stats (", M,
                     ", 2) and weight (", C, "), contiguous but for grad_rows, got ", all());
  const DType acc = x.dtype() == DType::f64 ? DType::f64 : DType::f32;
  PRECIS_CHECK_DTYPE(grad_x.dtype() == x.dtype() && target.dtype() == DType::i64 && loss_rows.dtype() == acc &&
                         weight_rows.dtype() == acc && row_stats.dtype() == acc && grad_rows.dtype() == acc &&
                         (!weight.defined() || weight.dtype() == acc),
                     op, ": grad_x must have x's dtype, target i64 and the rest ", dtype_name(acc), ", got ", all());
  // One host memory: the CPU's, or the tests' fake CUDA device's (tests/support/fake_cuda).
  bool same = true;
  for (const Tensor* t : {&loss_rows, &weight_rows, &row_stats, &grad_x, &x, &target, &grad_rows, &weight})
    same = same && (!t->defined() || t->device() == x.device());
  PRECIS_CHECK_DEVICE(same, op, ": the kernel needs every operand on one device, got ", all());
  PRECIS_CHECK(grad_x.data_ptr() != x.data_ptr() || M * C == 0, op,
               ": grad_x must not alias x (its first pass writes exponentials there), got ", all());
}

}  // namespace

// CrossEntropyKernel and CrossEntropyBackwardKernel in one pass over the logits with one exp per
// element: per row, the normaliser pass of row_log_normaliser (the same chunks, running max and
// rescaled sum, so row_stats and the loss are bit for bit the forward kernel's) also stores each
// e_j = exp(x_j − M_c), M_c the running max after its chunk c; then the gradient pass writes
// scale·f_c·e_j − s·w_j (− hit at the target), f_c = exp(M_c − m), with no exp per element. Where
// M_c = m (the chunk holding the row max and every chunk after it: all of a row of at most 2048),
// f_c is exactly 1 and grad_x is bit for bit the backward kernel's; in the chunks before, e_j·f_c
// differs from exp(x_j − m) by the vectorised exp's error at another argument: a few fp32 ulps
// (the tests bound it), usually nothing after rounding to bf16. The e_j are kept in grad_x's row
// when it has the compute type (f32, f64), else in an fp32 row buffer (122 KB at C = 30522: L2).
template <typename T>
void cross_entropy_with_grad_kernel(const Tensor& loss_rows, const Tensor& weight_rows, const Tensor& row_stats,
                                    const Tensor& grad_x, const Tensor& x, const Tensor& target, const Tensor& weight,
                                    const Tensor& grad_rows, int64_t ignore_index, double label_smoothing) {
  using A = opmath_t<T>;
  constexpr bool kSame = std::is_same_v<T, A>;
  check_with_grad_operands(loss_rows, weight_rows, row_stats, grad_x, x, target, weight, grad_rows);
  const int64_t rows = x.size(0), classes = x.size(1);
  const int64_t chunks = (classes + kNormaliserChunk - 1) / kNormaliserChunk;
  const T* xs = static_cast<const T*>(x.data_ptr());
  T* gs = static_cast<T*>(grad_x.data_ptr());
  const int64_t* ts = static_cast<const int64_t*>(target.data_ptr());
  const A* gr = static_cast<const A*>(grad_rows.data_ptr());
  const int64_t gr_stride = grad_rows.stride(0);
  const A* w = weight_data<A>(weight);
  A* loss = static_cast<A*>(loss_rows.data_ptr());
  A* wrow = static_cast<A*>(weight_rows.data_ptr());
  A* stats = static_cast<A*>(row_stats.data_ptr());
  const A eps = static_cast<A>(label_smoothing);
  const A smooth = eps / static_cast<A>(classes);
  const A w_total = weight_total(w, classes);
  parallel_for(0, rows, row_grain(classes), [&](int64_t b, int64_t e) {
    std::vector<A> row_buf(kSame ? 0 : static_cast<size_t>(classes));
    std::vector<A> chunk_max(static_cast<size_t>(chunks));
    for (int64_t i = b; i < e; ++i) {
      const T* xr = xs + i * classes;
      T* out = gs + i * classes;
      A* ex = nullptr;  // the row's e_j
      if constexpr (kSame) ex = out;
      else ex = row_buf.data();
      // Pass 1: row_log_normaliser, keeping the exponentials and each chunk's running max.
      const RowNormaliser<T> nz = row_log_normaliser(xr, classes, ex, chunk_max.data());
      const A m = nz.max, log_sum = nz.log_sum;
      stats[2 * i] = m;
      stats[2 * i + 1] = log_sum;
      const int64_t t = ts[i];
      if (t == ignore_index) {
        loss[i] = 0;
        wrow[i] = 0;
        std::fill(out, out + classes, T(0.0f));
        continue;
      }
      if (t < 0 || t >= classes) {  // reachable only unchecked, on the tests' fake device: NaN
        loss[i] = wrow[i] = kNaN<A>;
        std::fill(out, out + classes, static_cast<T>(kNaN<A>));
        continue;
      }
      const A wt = w != nullptr ? w[t] : A(1);
      loss[i] = row_loss(xr, classes, t, w, wt, w_total, eps, m, log_sum);
      wrow[i] = wt;
      // Pass 2: the gradient from the stored exponentials, chunk by chunk (L1-sized, as backward).
      const RowGrad<A> rg(gr[i * gr_stride], wt, eps, smooth, w_total, log_sum, t, w);
      for (int64_t c = 0; c < chunks; ++c) {
        const int64_t c0 = c * kNormaliserChunk, k = std::min(kNormaliserChunk, classes - c0);
        const A sc = chunk_max[c] == m ? rg.scale : rg.scale * std::exp(chunk_max[c] - m);
        A* o = ex + c0;
        for (int64_t j = 0; j < k; ++j) o[j] *= sc;
        rg.finish(o, c0, k);
        if constexpr (!kSame) store_block<T>(o, out + c0, 1, k);
      }
    }
  });
}

// linear_cross_entropy's kernel runs these two on its chunks (ops/cpu/cross_entropy_rows.h).
#define PRECIS_CROSS_ENTROPY_ROWS(T)                                                                             \
  template void cross_entropy_kernel<T>(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, \
                                        const Tensor&, int64_t, double);                                         \
  template void cross_entropy_with_grad_kernel<T>(const Tensor&, const Tensor&, const Tensor&, const Tensor&,     \
                                                  const Tensor&, const Tensor&, const Tensor&, const Tensor&,     \
                                                  int64_t, double);
PRECIS_CROSS_ENTROPY_ROWS(float)
PRECIS_CROSS_ENTROPY_ROWS(BFloat16)
#undef PRECIS_CROSS_ENTROPY_ROWS

namespace {

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
    if (t < 0 || t >= x.size(1)) {  // reachable only unchecked, on the tests' fake device: NaN
      loss[i] = wrow[i] = kNaN<C>;
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
        register_kernel<kernels::CrossEntropyWithGradKernel>(OpId::cross_entropy_with_grad, DeviceType::cpu, dt,
                                                             &cross_entropy_with_grad_kernel<T>);
        register_kernel<kernels::NllLossKernel>(OpId::nll_loss, DeviceType::cpu, dt, &nll_loss_kernel<T>);
      }
    });
}

}  // namespace precis::cpu
