// CPU reductions: sum, mean, var (ops/cpu/reduce_plan.h drives them) and max along a dim.
// Accumulation: fp32 for f32/f16/bf16 inside a chunk, the chunk partials combined in f64; f64 in
// f64; integers and bool in i64. Outputs are written in the input dtype (i64 for integer sums).
#include <cmath>
#include <limits>

#include "ops/cpu/cpu_backend.h"
#include "core/dtype_visit.h"
#include "core/opmath.h"
#include "ops/cpu/lanes.h"
#include "ops/cpu/reduce_plan.h"
#include "ops/contracts/kernels.h"
#include "ops/op_table.h"

namespace precis::cpu {

namespace {

// Rows are summed in cascade blocks of this many elements (row_sum), f16/bf16 ones widened to fp32
// a block at a time (bulk conversion).
constexpr int64_t kWidenBlock = 512;

template <typename T> struct AccOf { using type = int64_t; };
template <> struct AccOf<float> { using type = float; };
template <> struct AccOf<double> { using type = double; };
template <> struct AccOf<Half> { using type = float; };
template <> struct AccOf<BFloat16> { using type = float; };
template <typename T> using acc_of = typename AccOf<T>::type;

template <typename T> constexpr bool kLowPrecision = std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;

inline void widen(const Half* p, float* out, int64_t n) { half_to_float(p, out, n); }
inline void widen(const BFloat16* p, float* out, int64_t n) { bfloat16_to_float(p, out, n); }

// Reduces a strided row of T with f(value as A), a cascade: blocks of kWidenBlock values summed
// in A (16 lanes of 32 values), the block sums added in f64 for floating A. A chunk's 16384
// values summed straight in 16 fp32 lanes carried the error of 1024-term sums (a 100 000-element
// sum of 0.1 was 98 ulp off; PyTorch's cascade sum is ~1). Low-precision blocks are widened to
// fp32 first so that the inner loop is plain fp32.
template <typename T, typename A, typename F>
A row_sum(const T* p, int64_t n, int64_t st, F&& f) {
  using Total = std::conditional_t<std::is_floating_point_v<A>, double, A>;
  Total total = 0;
  for (int64_t b = 0; b < n; b += kWidenBlock) {
    const int64_t m = std::min(kWidenBlock, n - b);
    if constexpr (kLowPrecision<T>) {
      float tmp[kWidenBlock];
      if (st == 1) {
        widen(p + b, tmp, m);
      } else {
        for (int64_t i = 0; i < m; ++i) tmp[i] = static_cast<float>(p[(b + i) * st]);
      }
      total += lanes_sum<A>(m, [&](int64_t i) { return f(tmp[i]); });
    } else if (st == 1) {
      total += lanes_sum<A>(m, [&](int64_t i) { return f(static_cast<A>(p[b + i])); });
    } else {
      total += lanes_sum<A>(m, [&](int64_t i) { return f(static_cast<A>(p[(b + i) * st])); });
    }
  }
  return static_cast<A>(total);
}

// Rows a column pass adds at once (see columns_add).
constexpr int64_t kColumnRows = 8;

// buf[j] += f(row_r[j] as A, j) for the K rows row_r = p + r·st, r = 0, 1, ..., K − 1 in that
// order, over a contiguous run of n columns (low precision widened in L1-sized blocks). The same
// additions, in the same order, as K single-row passes, but with one pass over buf and K streams
// of x in flight: one row at a time, the column sum of a wide gradient was bound by the latency
// of each row's fresh stream.
template <int64_t K, typename T, typename A, typename F>
void columns_add_k(A* buf, const T* p, int64_t n, int64_t st, F& f) {
  if constexpr (kLowPrecision<T>) {
    float tmp[K][kWidenBlock];
    for (int64_t b = 0; b < n; b += kWidenBlock) {
      const int64_t m = std::min(kWidenBlock, n - b);
      for (int64_t r = 0; r < K; ++r) widen(p + r * st + b, tmp[r], m);
      A* d = buf + b;
      for (int64_t j = 0; j < m; ++j) {
        A v = d[j];
        for (int64_t r = 0; r < K; ++r) v += f(tmp[r][j], b + j);
        d[j] = v;
      }
    }
  } else {
    const T* rows[K];
    for (int64_t r = 0; r < K; ++r) rows[r] = p + r * st;
    for (int64_t j = 0; j < n; ++j) {
      A v = buf[j];
      for (int64_t r = 0; r < K; ++r) v += f(static_cast<A>(rows[r][j]), j);
      buf[j] = v;
    }
  }
}

// columns_add_k for k (1 <= k <= kColumnRows) rows.
template <typename T, typename A, typename F>
void columns_add(A* buf, const T* p, int64_t n, int64_t st, int64_t k, F&& f) {
  switch (k) {
    case 8: return columns_add_k<8, T, A>(buf, p, n, st, f);
    case 7: return columns_add_k<7, T, A>(buf, p, n, st, f);
    case 6: return columns_add_k<6, T, A>(buf, p, n, st, f);
    case 5: return columns_add_k<5, T, A>(buf, p, n, st, f);
    case 4: return columns_add_k<4, T, A>(buf, p, n, st, f);
    case 3: return columns_add_k<3, T, A>(buf, p, n, st, f);
    case 2: return columns_add_k<2, T, A>(buf, p, n, st, f);
    default: return columns_add_k<1, T, A>(buf, p, n, st, f);
  }
}

// Out element type of a sum: the input's for floating types, i64 for integers and bool.
template <typename T> using sum_out_t = std::conditional_t<std::is_floating_point_v<opmath_t<T>>, T, int64_t>;
// Partials combine in f64 for floating types, so a long fp32 sum loses only the in-chunk error.
template <typename T> using total_of = std::conditional_t<std::is_floating_point_v<opmath_t<T>>, double, int64_t>;

// The summing part of a reduction op: rows and columns summed in acc_t, partial sums merged in
// Total. The derived op adds where the total goes (write).
template <typename T, typename Total>
struct Summing {
  using acc_t = acc_of<T>;
  using total_t = Total;
  acc_t identity() const { return 0; }
  total_t total_identity() const { return 0; }
  total_t merge(total_t t, acc_t a) const { return t + static_cast<total_t>(a); }
  acc_t row(const T* p, int64_t n, int64_t st, int64_t) const {
    return row_sum<T, acc_t>(p, n, st, [](acc_t v) { return v; });
  }
  int64_t column_rows() const { return kColumnRows; }
  void columns(acc_t* buf, const T* p, int64_t n, int64_t st, int64_t k, int64_t) const {
    columns_add<T, acc_t>(buf, p, n, st, k, [](acc_t v, int64_t) { return v; });
  }
};

// sum (scale 1) and mean (scale 1/N).
template <typename T>
struct SumOp : Summing<T, total_of<T>> {
  using typename Summing<T, total_of<T>>::total_t;
  SumOp(sum_out_t<T>* out_, double scale_) : out(out_), scale(scale_) {}
  sum_out_t<T>* out;
  double scale;
  void write(int64_t o, total_t t) const {
    if constexpr (std::is_floating_point_v<total_t>) {
      out[o] = convert<sum_out_t<T>>(static_cast<opmath_t<T>>(t * scale));
    } else {
      out[o] = t;
    }
  }
};

// Sum of squared deviations from a per-output mean, divided by `denom` (second pass of var).
template <typename T>
struct SquaredDeviationOp {
  using acc_t = acc_of<T>;
  using total_t = double;
  T* out;
  const acc_t* mean;
  double denom;
  acc_t identity() const { return 0; }
  total_t total_identity() const { return 0; }
  total_t merge(total_t t, acc_t a) const { return t + static_cast<double>(a); }
  acc_t row(const T* p, int64_t n, int64_t st, int64_t o) const {
    const acc_t m = mean[o];
    return row_sum<T, acc_t>(p, n, st, [m](acc_t v) { return (v - m) * (v - m); });
  }
  int64_t column_rows() const { return kColumnRows; }
  void columns(acc_t* buf, const T* p, int64_t n, int64_t st, int64_t k, int64_t o0) const {
    const acc_t* m = mean + o0;
    columns_add<T, acc_t>(buf, p, n, st, k, [m](acc_t v, int64_t j) { return (v - m[j]) * (v - m[j]); });
  }
  void write(int64_t o, total_t t) const { out[o] = convert<T>(static_cast<opmath_t<T>>(t / denom)); }
};

// Mean into an accumulator-typed buffer (first pass of var).
template <typename T>
struct MeanToBufferOp : Summing<T, double> {
  using acc_t = acc_of<T>;
  MeanToBufferOp(acc_t* out_, double scale_) : out(out_), scale(scale_) {}
  acc_t* out;
  double scale;
  void write(int64_t o, double t) const { out[o] = static_cast<acc_t>(t * scale); }
};

// x: any shape and strides; out: keepdim shape, contiguous.
template <typename T>
void sum_kernel(const Tensor& out, const Tensor& x, const std::vector<int64_t>& dims) {
  const ReducePlan p = make_reduce_plan(x, dims);
  run_reduction<T>(p, static_cast<const T*>(x.data_ptr()),
                   SumOp<T>{static_cast<sum_out_t<T>*>(out.data_ptr()), 1.0});
}

// Mean of an empty reduction is 0/0 = NaN, as in PyTorch.
template <typename T>
void mean_kernel(const Tensor& out, const Tensor& x, const std::vector<int64_t>& dims) {
  const ReducePlan p = make_reduce_plan(x, dims);
  const double scale = p.red_numel == 0 ? std::numeric_limits<double>::quiet_NaN() : 1.0 / static_cast<double>(p.red_numel);
  run_reduction<T>(p, static_cast<const T*>(x.data_ptr()), SumOp<T>{static_cast<T*>(out.data_ptr()), scale});
}

// Two passes (mean, then squared deviations from it): stable for data with a large mean, where
// the one-pass E[x²] - E[x]² cancels catastrophically. N - correction <= 0 divides by zero or a
// negative number, giving inf/NaN as PyTorch does.
template <typename T>
void var_kernel(const Tensor& out, const Tensor& x, const std::vector<int64_t>& dims, int64_t correction) {
  using acc_t = acc_of<T>;
  const ReducePlan p = make_reduce_plan(x, dims);
  const T* xp = static_cast<const T*>(x.data_ptr());
  std::vector<acc_t> mean(p.num_out);
  const double n = static_cast<double>(p.red_numel);
  run_reduction<T>(p, xp, MeanToBufferOp<T>{mean.data(), p.red_numel == 0 ? 0.0 : 1.0 / n});
  const double denom = n - static_cast<double>(correction);
  if (p.red_numel == 0) {
    T* o = static_cast<T*>(out.data_ptr());
    for (int64_t i = 0; i < p.num_out; ++i) o[i] = convert<T>(static_cast<opmath_t<T>>(std::numeric_limits<double>::quiet_NaN()));
    return;
  }
  run_reduction<T>(p, xp, SquaredDeviationOp<T>{static_cast<T*>(out.data_ptr()), mean.data(), denom});
}


// Running maximum with its index: the first index of the maximum wins ties, and the first NaN
// wins over everything (PyTorch's max propagates NaN).
template <typename A>
struct Best {
  A value;
  int64_t index;
  bool nan;
  // Takes (v, i) if it beats the current best; call in increasing index order.
  void offer(A v, int64_t i) {
    if (nan) return;
    if constexpr (std::is_floating_point_v<A>) {
      if (std::isnan(v)) {
        value = v;
        index = i;
        nan = true;
        return;
      }
    }
    if (index < 0 || v > value) {
      value = v;
      index = i;
    }
  }
  // Merges a best from a later chunk.
  void merge(const Best& later) {
    if (later.index < 0 || nan) return;
    if (later.nan || later.value > value || index < 0) *this = later;
  }
};

// Best of a contiguous run (indices offset by `first`) in two branch-free passes that vectorise:
// the maximum and whether a NaN occurs, then the first index holding the winner.
template <typename T>
Best<T> contiguous_best(const T* p, int64_t n, int64_t first) {
  T m[kLanes];
  bool nan[kLanes] = {};
  std::fill(m, m + kLanes, p[0]);
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int64_t k = 0; k < kLanes; ++k) {
      const T v = p[i + k];
      m[k] = v > m[k] ? v : m[k];
      nan[k] |= v != v;
    }
  for (int64_t k = 0; i + k < n; ++k) {
    const T v = p[i + k];
    m[k] = v > m[k] ? v : m[k];
    nan[k] |= v != v;
  }
  T best = m[0];
  bool any_nan = nan[0];
  for (int64_t k = 1; k < kLanes; ++k) {
    best = m[k] > best ? m[k] : best;
    any_nan |= nan[k];
  }
  for (int64_t j = 0; j < n; ++j)
    if (any_nan ? p[j] != p[j] : p[j] == best) return {p[j], first + j, any_nan};
  return {best, first, any_nan};  // unreachable: the winner occurs in the run
}

// x: any shape and strides, reduced along `dim` (size R >= 1); values/indices: keepdim shape,
// contiguous. Compares in opmath (fp32 for f16/bf16). Long single reductions are chunked with a
// fixed chunk size and merged in order, so the result never depends on the thread count.
template <typename T>
void max_dim_kernel(const Tensor& values, const Tensor& indices, const Tensor& x, int64_t dim) {
  using A = opmath_t<T>;
  const ReducePlan p = make_reduce_plan(x, {dim});
  const T* xp = static_cast<const T*>(x.data_ptr());
  T* vp = static_cast<T*>(values.data_ptr());
  int64_t* ip = static_cast<int64_t*>(indices.data_ptr());
  const int64_t R = p.red_numel;
  const int64_t rs = p.red_strides[0];
  if (p.num_out == 0 || R == 0) return;
  auto store = [&](int64_t o, const Best<A>& b) {
    vp[o] = convert<T>(b.value);
    ip[o] = b.index;
  };

  if (p.columns) {
    // Contiguous kept dim: a block of columns advances together down the reduced dim.
    const int64_t cols = p.kept_sizes.back();
    const int64_t outer = p.num_out / cols;
    const int64_t n_blocks = (cols + kReduceColumnBlock - 1) / kReduceColumnBlock;
    const int64_t grain = std::max<int64_t>(1, kElementwiseGrain / (R * std::min(cols, kReduceColumnBlock)));
    parallel_for(0, outer * n_blocks, grain, [&](int64_t b, int64_t e) {
      Best<A> best[kReduceColumnBlock];
      for (int64_t item = b; item < e; ++item) {
        const int64_t o0 = (item / n_blocks) * cols + (item % n_blocks) * kReduceColumnBlock;
        const int64_t n = std::min(kReduceColumnBlock, cols - (item % n_blocks) * kReduceColumnBlock);
        const T* base = xp + kept_offset(p, o0);
        for (int64_t j = 0; j < n; ++j) best[j] = {A(0), -1, false};
        for (int64_t r = 0; r < R; ++r) {
          const T* row = base + r * rs;
          for (int64_t j = 0; j < n; ++j) best[j].offer(static_cast<A>(row[j]), r);
        }
        for (int64_t j = 0; j < n; ++j) store(o0 + j, best[j]);
      }
    });
    return;
  }

  const int64_t n_chunks = (R + kReduceChunk - 1) / kReduceChunk;
  auto scan = [&](int64_t o, int64_t c) {
    const T* base = xp + kept_offset(p, o);
    const int64_t begin = c * kReduceChunk, end = std::min(R, (c + 1) * kReduceChunk);
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
      if (rs == 1) return contiguous_best(base + begin, end - begin, begin);
    }
    Best<A> best{A(0), -1, false};
    for (int64_t r = begin; r < end; ++r) best.offer(static_cast<A>(base[r * rs]), r);
    return best;
  };
  const int64_t grain = std::max<int64_t>(1, kElementwiseGrain / std::min(R, kReduceChunk));
  if (n_chunks == 1) {
    parallel_for(0, p.num_out, grain, [&](int64_t b, int64_t e) {
      for (int64_t o = b; o < e; ++o) store(o, scan(o, 0));
    });
    return;
  }
  std::vector<Best<A>> partials(p.num_out * n_chunks);
  parallel_for(0, p.num_out * n_chunks, grain, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) partials[i] = scan(i / n_chunks, i % n_chunks);
  });
  for (int64_t o = 0; o < p.num_out; ++o) {
    Best<A> best = partials[o * n_chunks];
    for (int64_t c = 1; c < n_chunks; ++c) best.merge(partials[o * n_chunks + c]);
    store(o, best);
  }
}

}  // namespace

void register_reduce_kernels() {
  for (int i = 0; i < kNumDTypes; ++i) {
    const DType dt = static_cast<DType>(i);
    if (is_float8(dt)) continue;  // a storage format: no reductions
    visit_dtype(dt, [&]<typename T>() {
      register_kernel<kernels::ReduceKernel>(OpId::sum, DeviceType::cpu, dt, &sum_kernel<T>);
      register_kernel<kernels::MaxDimKernel>(OpId::max, DeviceType::cpu, dt, &max_dim_kernel<T>);
      if constexpr (std::is_floating_point_v<opmath_t<T>>) {
        register_kernel<kernels::ReduceKernel>(OpId::mean, DeviceType::cpu, dt, &mean_kernel<T>);
        register_kernel<kernels::VarKernel>(OpId::var, DeviceType::cpu, dt, &var_kernel<T>);
      }
    });
  }
}

}  // namespace precis::cpu
