// CPU reductions: sum, mean, var (ops/cpu/reduce_plan.h drives them) and max along a dim.
// Accumulation: fp32 for f32/f16/bf16 inside a chunk, the chunk partials combined in f64; f64 in
// f64; integers and bool in i64. Outputs are written in the input dtype (i64 for integer sums).
#include <cmath>
#include <limits>

#include "ops/cpu/cpu_backend.h"
#include "ops/cpu/dispatch.h"
#include "ops/cpu/reduce_plan.h"
#include "ops/kernels.h"
#include "ops/op_table.h"

namespace precis::cpu {

namespace {

// Independent accumulators in the contiguous loops: enough to hide the add latency and to let
// the compiler keep them in vector registers.
constexpr int64_t kLanes = 16;
// f16/bf16 rows are widened to fp32 in blocks of this many elements (bulk conversion).
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

// Sum of a contiguous run of A (float/double/int64) with kLanes accumulators, combined pairwise.
template <typename A, typename F>
A lanes_sum(int64_t n, F&& value) {
  A acc[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int64_t k = 0; k < kLanes; ++k) acc[k] += value(i + k);
  for (int64_t k = 0; i + k < n; ++k) acc[k] += value(i + k);
  for (int64_t w = kLanes / 2; w > 0; w /= 2)
    for (int64_t k = 0; k < w; ++k) acc[k] += acc[k + w];
  return acc[0];
}

// Reduces a strided row of T with f(value as A) summed in A. Low-precision rows are widened
// to fp32 in blocks first so that the inner loop is plain fp32.
template <typename T, typename A, typename F>
A row_sum(const T* p, int64_t n, int64_t st, F&& f) {
  if constexpr (kLowPrecision<T>) {
    float tmp[kWidenBlock];
    A total = 0;
    for (int64_t b = 0; b < n; b += kWidenBlock) {
      const int64_t m = std::min(kWidenBlock, n - b);
      if (st == 1) {
        widen(p + b, tmp, m);
      } else {
        for (int64_t i = 0; i < m; ++i) tmp[i] = static_cast<float>(p[(b + i) * st]);
      }
      total += lanes_sum<A>(m, [&](int64_t i) { return f(tmp[i]); });
    }
    return total;
  } else if (st == 1) {
    return lanes_sum<A>(n, [&](int64_t i) { return f(static_cast<A>(p[i])); });
  } else {
    return lanes_sum<A>(n, [&](int64_t i) { return f(static_cast<A>(p[i * st])); });
  }
}

// buf[j] += f(p[j] as A, j) for a contiguous run of n <= kReduceColumnBlock.
template <typename T, typename A, typename F>
void columns_add(A* buf, const T* p, int64_t n, F&& f) {
  if constexpr (kLowPrecision<T>) {
    float tmp[kReduceColumnBlock];
    widen(p, tmp, n);
    for (int64_t j = 0; j < n; ++j) buf[j] += f(tmp[j], j);
  } else {
    for (int64_t j = 0; j < n; ++j) buf[j] += f(static_cast<A>(p[j]), j);
  }
}

// Out element type of a sum: the input's for floating types, i64 for integers and bool.
template <typename T> using sum_out_t = std::conditional_t<std::is_floating_point_v<opmath_t<T>>, T, int64_t>;
// Partials combine in f64 for floating types, so a long fp32 sum loses only the in-chunk error.
template <typename T> using total_of = std::conditional_t<std::is_floating_point_v<opmath_t<T>>, double, int64_t>;

// sum (scale 1) and mean (scale 1/N).
template <typename T>
struct SumOp {
  using acc_t = acc_of<T>;
  using total_t = total_of<T>;
  sum_out_t<T>* out;
  double scale;
  acc_t identity() const { return 0; }
  total_t total_identity() const { return 0; }
  total_t merge(total_t t, acc_t a) const { return t + static_cast<total_t>(a); }
  acc_t row(const T* p, int64_t n, int64_t st, int64_t) const {
    return row_sum<T, acc_t>(p, n, st, [](acc_t v) { return v; });
  }
  void columns(acc_t* buf, const T* p, int64_t n, int64_t) const {
    columns_add<T, acc_t>(buf, p, n, [](acc_t v, int64_t) { return v; });
  }
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
  void columns(acc_t* buf, const T* p, int64_t n, int64_t o0) const {
    const acc_t* m = mean + o0;
    columns_add<T, acc_t>(buf, p, n, [m](acc_t v, int64_t j) { return (v - m[j]) * (v - m[j]); });
  }
  void write(int64_t o, total_t t) const { out[o] = convert<T>(static_cast<opmath_t<T>>(t / denom)); }
};

// Mean into an accumulator-typed buffer (first pass of var).
template <typename T>
struct MeanToBufferOp {
  using acc_t = acc_of<T>;
  using total_t = double;
  acc_t* out;
  double scale;
  acc_t identity() const { return 0; }
  total_t total_identity() const { return 0; }
  total_t merge(total_t t, acc_t a) const { return t + static_cast<double>(a); }
  acc_t row(const T* p, int64_t n, int64_t st, int64_t) const {
    return row_sum<T, acc_t>(p, n, st, [](acc_t v) { return v; });
  }
  void columns(acc_t* buf, const T* p, int64_t n, int64_t) const {
    columns_add<T, acc_t>(buf, p, n, [](acc_t v, int64_t) { return v; });
  }
  void write(int64_t o, total_t t) const { out[o] = static_cast<acc_t>(t * scale); }
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

}  // namespace

void register_reduce_kernels() {
  for (int i = 0; i < kNumDTypes; ++i) {
    const DType dt = static_cast<DType>(i);
    visit_dtype(dt, [&]<typename T>() {
      register_kernel<kernels::ReduceKernel>(OpId::sum, DeviceType::cpu, dt, &sum_kernel<T>);
      if constexpr (std::is_floating_point_v<opmath_t<T>>) {
        register_kernel<kernels::ReduceKernel>(OpId::mean, DeviceType::cpu, dt, &mean_kernel<T>);
        register_kernel<kernels::VarKernel>(OpId::var, DeviceType::cpu, dt, &var_kernel<T>);
      }
    });
  }
}

}  // namespace precis::cpu
