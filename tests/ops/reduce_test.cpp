// Reductions: forward against naive f64 references, layouts, determinism, bad inputs, and the
// gradient-check cases for sum, mean, var and max.
#include <cmath>
#include <functional>
#include <limits>

#include "core/thread_pool.h"
#include "ops/cpu/reduce_plan.h"
#include "ops/functional.h"
#include "tests/support/op_cases.h"
#include "tests/support/tensor_testing.h"

using namespace precis;
using namespace precis::testing;

namespace {

// Naive f64 reduction of x over `dims` (sorted) into keepdim layout, with fn(values) per output.
template <typename F>
std::vector<double> reference_reduce(const Tensor& x, const std::vector<int64_t>& dims, F&& fn) {
  const std::vector<double> v = x.to_vector<double>();
  const Shape& s = x.sizes();
  const int64_t nd = x.dim();
  std::vector<bool> red(nd, false);
  for (int64_t d : dims) red[d] = true;
  int64_t num_out = 1;
  for (int64_t d = 0; d < nd; ++d)
    if (!red[d]) num_out *= s[d];
  std::vector<std::vector<double>> groups(num_out);
  for (int64_t i = 0; i < static_cast<int64_t>(v.size()); ++i) {
    int64_t rem = i, o = 0, mul = 1;
    for (int64_t d = nd - 1; d >= 0; --d) {
      const int64_t idx = rem % s[d];
      rem /= s[d];
      if (!red[d]) {
        o += idx * mul;
        mul *= s[d];
      }
    }
    groups[o].push_back(v[i]);
  }
  std::vector<double> out;
  for (auto& g : groups) out.push_back(fn(g));
  return out;
}

double ref_sum(const std::vector<double>& g) {
  double s = 0;
  for (double v : g) s += v;
  return s;
}

Shape kept(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  Shape s;
  for (int64_t d = 0; d < x.dim(); ++d) {
    const bool r = std::find(dims.begin(), dims.end(), d) != dims.end();
    if (!r) s.push_back(x.size(d));
    else if (keepdim) s.push_back(1);
  }
  return s;
}

Tensor expected_tensor(const std::vector<double>& v, const Shape& shape) {
  return from_vector<double>(v, shape);
}

struct ReduceCase {
  Shape shape;
  std::vector<int64_t> dims;     // as passed (may be negative)
  std::vector<int64_t> wrapped;  // the same dims, non-negative
};

// Calls check(x, c, keepdim, out_shape) for every case in f32 and f64, keepdim or not, with x
// contiguous and not (random values from `seed`); out_shape is the reduction's expected shape.
void for_each_reduction(const std::vector<ReduceCase>& cases, uint64_t seed,
                        const std::function<void(const Tensor&, const ReduceCase&, bool, const Shape&)>& check) {
  for (DType dt : {DType::f32, DType::f64}) {
    for (const ReduceCase& c : cases) {
      for (bool keepdim : {false, true}) {
        for (bool nc : {false, true}) {
          Tensor x = randn_input(c.shape, false, seed, dt);
          if (nc) x = non_contiguous(x);
          INFO("shape " << shape_str(c.shape) << " dims " << shape_str(c.dims) << " keepdim " << keepdim << " nc " << nc
                        << " " << dtype_name(dt));
          const Shape out_shape = c.dims.empty() && !keepdim ? Shape{} : kept(x, c.wrapped, keepdim);
          check(x, c, keepdim, out_shape);
        }
      }
    }
  }
}

}  // namespace

TEST_CASE("sum over dims matches a f64 reference", "[ops][reduce]") {
  const std::vector<ReduceCase> cases = {
      {{7}, {0}, {0}},
      {{3, 5}, {1}, {1}},
      {{3, 5}, {0}, {0}},
      {{3, 5}, {-1}, {1}},
      {{4, 3, 5}, {0, 2}, {0, 2}},
      {{4, 3, 5}, {1}, {1}},
      {{2, 3, 4, 5}, {-3, -1}, {1, 3}},
      {{2, 3, 4, 5}, {}, {0, 1, 2, 3}},
      {{300, 9}, {0}, {0}},
      {{9, 700}, {1}, {1}},
      {{5, 1, 4}, {1}, {1}},
  };
  for_each_reduction(cases, 3, [](const Tensor& x, const ReduceCase& c, bool keepdim, const Shape& out_shape) {
    Tensor y = sum(x, c.dims, keepdim);
    REQUIRE(y.dtype() == x.dtype());
    Tensor ref = expected_tensor(reference_reduce(x, c.wrapped, ref_sum), out_shape);
    PRECIS_REQUIRE_CLOSE(y, ref, x.dtype());
  });
}

TEST_CASE("sum of low-precision and integer tensors", "[ops][reduce]") {
  for (DType dt : {DType::f16, DType::bf16}) {
    Tensor x = randn_input({6, 33}, false, 5, dt);
    Tensor y = sum(x, {1});
    REQUIRE(y.dtype() == dt);
    Tensor ref = expected_tensor(reference_reduce(x, {1}, ref_sum), {6});
    PRECIS_REQUIRE_CLOSE(y, ref, dt);
    Tensor z = sum(x, {0});  // outer reduction path
    PRECIS_REQUIRE_CLOSE(z, expected_tensor(reference_reduce(x, {0}, ref_sum), {33}), dt);
  }
  Tensor xi = from_vector<int32_t>({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor si = sum(xi, {0});
  REQUIRE(si.dtype() == DType::i64);
  REQUIRE(si.to_vector<int64_t>() == std::vector<int64_t>{5, 7, 9});
  Tensor xl = from_vector<int64_t>({int64_t(1) << 40, 1, 2}, {3});
  REQUIRE(sum(xl).item<int64_t>() == (int64_t(1) << 40) + 3);
  Tensor xb = from_vector<bool>({true, false, true, true}, {4});
  Tensor sb = sum(xb);
  REQUIRE(sb.dtype() == DType::i64);
  REQUIRE(sb.item<int64_t>() == 3);
}

TEST_CASE("sum of empty tensors and 0-d tensors", "[ops][reduce]") {
  Tensor e = zeros({0, 3});
  REQUIRE(sum(e).item<float>() == 0.0f);
  Tensor s0 = sum(e, {0});
  REQUIRE(s0.sizes() == Shape{3});
  REQUIRE(s0.to_vector<float>() == std::vector<float>{0, 0, 0});
  REQUIRE(sum(e, {1}).sizes() == Shape{0});
  Tensor z = scalar_tensor(2.5);
  REQUIRE(sum(z).item<float>() == 2.5f);
  REQUIRE(sum(z, {0}).item<float>() == 2.5f);
  REQUIRE(sum(z, {-1}, true).dim() == 0);
}

TEST_CASE("sum of a million fp32 values stays close to the f64 sum", "[ops][reduce]") {
  Tensor x = uniform_input({1000000}, -1.0, 3.0, false, 11, DType::f32);
  const std::vector<float> v = x.to_vector<float>();
  double ref = 0, abs_sum = 0;
  for (float f : v) {
    ref += f;
    abs_sum += std::fabs(f);
  }
  const double got = sum(x).item<double>();
  // A plain running fp32 sum is off by ~1e-4 relative here; chunked lanes stay near fp32 rounding.
  REQUIRE(std::fabs(got - ref) <= 1e-6 * abs_sum);
  // Columns: (250000, 4) summed over dim 0 (outer reduction, chunked).
  Tensor c = sum(x.view({250000, 4}), {0});
  Tensor cref = expected_tensor(reference_reduce(x.view({250000, 4}), {0}, ref_sum), {4});
  std::vector<double> a = c.to_vector<double>(), b = cref.to_vector<double>();
  for (size_t i = 0; i < a.size(); ++i) REQUIRE(std::fabs(a[i] - b[i]) <= 1e-6 * abs_sum);
}

TEST_CASE("long fp32 sums, means and variances of a constant stay near PyTorch's accuracy, rows and columns",
          "[ops][reduce]") {
  // A user study against PyTorch 2.15: sum of 100 000 × 0.1 was 9999.905 (98 ulp; PyTorch
  // 10000.001), the mean over 10^6 rows of a (10^6, 2) tensor 0.09999353 (PyTorch 0.09999994,
  // 6e-7 off), the variance of a constant column 4e-11: chunks of 16 384 values in 16 fp32 lanes,
  // and columns summed 8192 rows deep in fp32. Rows now sum 512-value blocks into f64, columns
  // merge every 64 rows (what remains is the fp32 bias of adding 0.1 64 times, as PyTorch's).
  const float tenth = 0.1f;
  auto ulps = [](double got, double want) {
    const float w = static_cast<float>(want);
    return std::fabs(got - want) / (std::nextafter(w, INFINITY) - w);
  };
  CHECK(ulps(sum(full({100000}, tenth)).item<double>(), 100000.0 * tenth) <= 4);
  const Tensor rows = full({1000000, 2}, tenth);
  for (double m : mean(rows, {0}).to_vector<double>()) CHECK(std::fabs(m - tenth) <= 1e-6 * tenth);
  for (double m : mean(full({2, 1000000}, tenth), {1}).to_vector<double>()) CHECK(ulps(m, tenth) <= 4);
  for (double v : var(full({100000, 2}, tenth), {0}).to_vector<double>()) CHECK(v <= 1e-13);
  for (double v : var(full({2, 100000}, tenth), {1}).to_vector<double>()) CHECK(v <= 1e-13);
}

TEST_CASE("sum results do not depend on the thread count", "[ops][reduce]") {
  const int saved = get_num_threads();
  Tensor x = randn_input({3, 200003}, false, 2, DType::f32);
  Tensor xt = randn_input({70001, 3}, false, 4, DType::f32);
  set_num_threads(1);
  const auto a1 = sum(x).to_vector<float>(), b1 = sum(x, {1}).to_vector<float>(), c1 = sum(xt, {0}).to_vector<float>();
  set_num_threads(2);
  const auto a2 = sum(x).to_vector<float>(), b2 = sum(x, {1}).to_vector<float>(), c2 = sum(xt, {0}).to_vector<float>();
  set_num_threads(saved);
  REQUIRE(a1 == a2);
  REQUIRE(b1 == b2);
  REQUIRE(c1 == c2);
}

TEST_CASE("sum_to inverts broadcasting", "[ops][reduce]") {
  Tensor x = randn_input({2, 3, 4}, false, 1);
  Tensor a = sum_to(x, {3, 1});
  REQUIRE(a.sizes() == Shape{3, 1});
  PRECIS_REQUIRE_CLOSE(a, expected_tensor(reference_reduce(x, {0, 2}, ref_sum), {3, 1}), DType::f64);
  Tensor b = sum_to(x, {4});
  PRECIS_REQUIRE_CLOSE(b, expected_tensor(reference_reduce(x, {0, 1}, ref_sum), {4}), DType::f64);
  Tensor c = sum_to(x, {});
  REQUIRE(c.dim() == 0);
  PRECIS_REQUIRE_CLOSE(c, expected_tensor(reference_reduce(x, {0, 1, 2}, ref_sum), {}), DType::f64);
  REQUIRE(sum_to(x, {2, 3, 4}).is_same(x));
  Tensor d = sum_to(x, {1, 3, 4});
  PRECIS_REQUIRE_CLOSE(d, expected_tensor(reference_reduce(x, {0}, ref_sum), {1, 3, 4}), DType::f64);
  PRECIS_REQUIRE_THROWS_WITH_ALL(sum_to(x, {5}), ShapeError, "sum_to", "[2, 3, 4] f64 cpu", "[5]");
  PRECIS_REQUIRE_THROWS_WITH_ALL(sum_to(x, {1, 2, 3, 4}), ShapeError, "sum_to", "[1, 2, 3, 4]");
}

TEST_CASE("sum rejects bad dims", "[ops][reduce]") {
  Tensor x = randn_input({2, 3}, false);
  PRECIS_REQUIRE_THROWS_WITH_ALL(sum(x, {2}), IndexError, "sum", "dimension 2", "[2, 3] f64 cpu");
  PRECIS_REQUIRE_THROWS_WITH_ALL(sum(x, {-3}), IndexError, "sum", "[2, 3] f64 cpu");
  PRECIS_REQUIRE_THROWS_WITH_ALL(sum(x, {1, -1}), ValueError, "sum", "more than once", "[2, 3] f64 cpu");
}

namespace {
double ref_mean(const std::vector<double>& g) { return ref_sum(g) / static_cast<double>(g.size()); }
double ref_max(const std::vector<double>& g) {
  double m = g[0];
  for (double v : g) {
    if (std::isnan(v)) return v;
    m = std::max(m, v);
  }
  return m;
}
double ref_argmax(const std::vector<double>& g) {
  size_t best = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    if (std::isnan(g[i])) return static_cast<double>(i);
    if (g[i] > g[best]) best = i;
  }
  return static_cast<double>(best);
}
auto ref_var(int64_t correction) {
  return [correction](const std::vector<double>& g) {
    const double m = ref_mean(g);
    double s = 0;
    for (double v : g) s += (v - m) * (v - m);
    return s / static_cast<double>(static_cast<int64_t>(g.size()) - correction);
  };
}
}  // namespace

TEST_CASE("mean and var match f64 references", "[ops][reduce]") {
  const std::vector<ReduceCase> cases = {
      {{9}, {}, {0}},        {{4, 6}, {1}, {1}},           {{4, 6}, {-2}, {0}},
      {{3, 4, 5}, {0, 2}, {0, 2}}, {{2, 3, 4, 5}, {1, 2}, {1, 2}}, {{400, 3}, {0}, {0}},
  };
  for_each_reduction(cases, 9, [](const Tensor& x, const ReduceCase& c, bool keepdim, const Shape& out_shape) {
    const DType dt = x.dtype();
    PRECIS_REQUIRE_CLOSE(mean(x, c.dims, keepdim), expected_tensor(reference_reduce(x, c.wrapped, ref_mean), out_shape), dt);
    for (int64_t corr : {0, 1, 2}) {
      PRECIS_REQUIRE_CLOSE(var(x, c.dims, corr, keepdim),
                           expected_tensor(reference_reduce(x, c.wrapped, ref_var(corr)), out_shape), dt);
    }
  });
  for (DType dt : {DType::f16, DType::bf16}) {
    Tensor x = randn_input({5, 40}, false, 6, dt);
    PRECIS_REQUIRE_CLOSE(mean(x, {1}), expected_tensor(reference_reduce(x, {1}, ref_mean), {5}), dt);
    PRECIS_REQUIRE_CLOSE(var(x, {0}), expected_tensor(reference_reduce(x, {0}, ref_var(1)), {40}), dt);
  }
}

// The column (outer) reduction reads tiles of up to kReduceColumnTile (32768) kept columns per
// reduced position, widening f16/bf16 in sub-blocks of 512: rows wider than one tile (with a
// ragged last tile) and more than one outer entry, every float dtype, 1 and 2 threads.
TEST_CASE("wide column sums, means and variances match f64 references", "[ops][reduce]") {
  const int saved = get_num_threads();
  struct Wide {
    Shape shape;
    std::vector<int64_t> dims;
  };
  const std::vector<Wide> cases = {{{37, 70001}, {0}}, {{3, 5, 33001}, {1}}, {{130, 1500}, {0}}};
  for (DType dt : {DType::f32, DType::f64, DType::f16, DType::bf16}) {
    for (const Wide& c : cases) {
      const Tensor x = randn_input(c.shape, false, 21, dt);
      INFO("shape " << shape_str(c.shape) << " " << dtype_name(dt));
      const Shape out_shape = kept(x, c.dims, false);
      const std::vector<double> sum_ref = reference_reduce(x, c.dims, ref_sum);
      const std::vector<double> abs_sum = reference_reduce(x, c.dims, [](const std::vector<double>& g) {
        double a = 0;
        for (double v : g) a += std::fabs(v);
        return a;
      });
      const double count = static_cast<double>(x.numel() / static_cast<int64_t>(sum_ref.size()));
      const Tensor var_ref = expected_tensor(reference_reduce(x, c.dims, ref_var(1)), out_shape);
      // Sums of random signs cancel: bound the error by the accumulation's (64 fp32 additions in
      // a chunk, f64 between chunks) times Σ|x|, plus the output's rounding.
      const double unit = dt == DType::f64 ? 0x1p-53 : 0x1p-24;
      const double out_unit = dt == DType::f16 ? 0x1p-11 : dt == DType::bf16 ? 0x1p-8 : unit;
      auto require_sums = [&](const Tensor& got, double divisor) {
        const std::vector<double> g = got.to_vector<double>();
        REQUIRE(g.size() == sum_ref.size());
        for (size_t o = 0; o < g.size(); ++o) {
          const double want = sum_ref[o] / divisor;
          INFO("output " << o << " got " << g[o] << " want " << want);
          REQUIRE(std::fabs(g[o] - want) <= 64 * unit * abs_sum[o] / divisor + out_unit * std::fabs(want) + 1e-300);
        }
      };
      std::vector<std::vector<double>> by_threads;
      for (int threads : {1, 2}) {
        set_num_threads(threads);
        const Tensor s = sum(x, c.dims), m = mean(x, c.dims), v = var(x, c.dims);
        REQUIRE(s.sizes() == out_shape);
        require_sums(s, 1.0);
        require_sums(m, count);
        PRECIS_REQUIRE_CLOSE(v, var_ref, dt);
        std::vector<double> all = s.to_vector<double>();
        for (const Tensor& t : {m, v})
          for (double d : t.to_vector<double>()) all.push_back(d);
        by_threads.push_back(std::move(all));
      }
      set_num_threads(saved);
      REQUIRE(by_threads[0] == by_threads[1]);
    }
  }
}

// The column (outer) reduction's summation order, emulated: per output, fp32 (f64 for f64) sums
// over chunks of kReduceColumnChunkRows reduced positions in order, the chunk sums added
// in order in f64 (ops/cpu/reduce_plan.h). x is (outer, rows, cols) viewed through `view` and
// summed over its middle dim; returns the outputs as the sum's dtype would round them, as f64.
template <typename A>
std::vector<double> emulated_column_sums(const std::vector<double>& x, int64_t outer, int64_t rows, int64_t cols,
                                         DType dt) {
  const int64_t chunk = cpu::kReduceColumnChunkRows;
  std::vector<float> rounded;
  std::vector<double> out;
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t j = 0; j < cols; ++j) {
      double total = 0;
      for (int64_t c0 = 0; c0 < rows; c0 += chunk) {
        A acc = 0;
        for (int64_t r = c0; r < std::min(rows, c0 + chunk); ++r) acc += static_cast<A>(x[(o * rows + r) * cols + j]);
        total += static_cast<double>(acc);
      }
      out.push_back(total);
      rounded.push_back(static_cast<float>(total));
    }
  if (dt == DType::f64) return out;
  // The kernel stores static_cast<float>(total) converted to the dtype (round to nearest even).
  return from_vector<float>(rounded).to(dt).to(DType::f64).to_vector<double>();
}

// Wide outputs are cut into column tiles (a count that depends on the thread count), narrow ones
// with a long reduction into (chunk, tile) items whose partials are merged afterwards, and each
// pass adds up to 8 reduced positions at once: none of it may change a single bit of the order
// above. Ragged tiles, rows not a multiple of 8, a chunk count > 1, outer > 1, a strided (narrowed)
// row layout, and 1, 2 and 3 threads.
TEST_CASE("column sums follow the documented summation order exactly, for any thread count", "[ops][reduce]") {
  const int saved = get_num_threads();
  struct Case {
    int64_t outer, rows, cols;
    int64_t narrow_from;  // > 0: x is columns [narrow_from, narrow_from + cols) of a wider tensor
  };
  const std::vector<Case> cases = {{1, 203, 9001, 0}, {1, 301, 1500, 0},  {1, 1001, 100, 0},
                                   {3, 150, 700, 0},  {2, 77, 17000, 0},  {1, 260, 900, 13},
                                   {1, 40, 40000, 0}};
  for (DType dt : {DType::f32, DType::bf16, DType::f64}) {
    for (const Case& c : cases) {
      const int64_t width = c.cols + 2 * c.narrow_from;
      const Tensor base = randn_input({c.outer, c.rows, width}, false, 31, dt);
      const Tensor x = c.narrow_from > 0 ? base.narrow(2, c.narrow_from, c.cols) : base;
      const std::vector<double> xv = x.contiguous().to_vector<double>();
      const std::vector<double> want = dt == DType::f64
                                           ? emulated_column_sums<double>(xv, c.outer, c.rows, c.cols, dt)
                                           : emulated_column_sums<float>(xv, c.outer, c.rows, c.cols, dt);
      for (int threads : {1, 2, 3}) {
        set_num_threads(threads);
        INFO(dtype_name(dt) << " (" << c.outer << ", " << c.rows << ", " << c.cols << ") narrowed from "
                            << c.narrow_from << " threads " << threads);
        const std::vector<double> got = sum(x, {1}).to(DType::f64).to_vector<double>();
        REQUIRE(got.size() == want.size());
        size_t mismatches = 0;
        for (size_t i = 0; i < got.size(); ++i) mismatches += got[i] != want[i];
        CHECK(mismatches == 0);
      }
      set_num_threads(saved);
    }
  }
}

TEST_CASE("var is stable for data with a large mean", "[ops][reduce]") {
  // 1e4 + randn in fp32: a one-pass E[x^2] - E[x]^2 loses every significant digit here.
  Tensor noise = randn_input({200000}, false, 21, DType::f64);
  const std::vector<double> nv = noise.to_vector<double>();
  std::vector<float> v(nv.size());
  for (size_t i = 0; i < nv.size(); ++i) v[i] = static_cast<float>(1e4 + nv[i]);
  Tensor x = from_vector<float>(v, {200000});
  const double ref = reference_reduce(x, {0}, ref_var(1))[0];
  REQUIRE(std::fabs(var(x).item<double>() - ref) <= 1e-4 * ref);
  Tensor cols = x.view({50000, 4});  // outer reduction path
  const auto refc = reference_reduce(cols, {0}, ref_var(1));
  const auto got = var(cols, {0}).to_vector<double>();
  for (size_t i = 0; i < 4; ++i) REQUIRE(std::fabs(got[i] - refc[i]) <= 1e-4 * refc[i]);
}

TEST_CASE("mean and var of degenerate reductions", "[ops][reduce]") {
  REQUIRE(std::isnan(mean(zeros({0})).item<double>()));
  REQUIRE(std::isnan(var(zeros({0, 2}), {0}).to_vector<double>()[0]));
  // N - correction == 0: 0/0 = NaN; N - correction < 0 gives a negative zero / NaN as PyTorch.
  REQUIRE(std::isnan(var(ones({1})).item<double>()));
  REQUIRE(var(ones({3}), {}, 0).item<double>() == 0.0);
  REQUIRE(std::isnan(var(scalar_tensor(2.0)).item<double>()));
  PRECIS_REQUIRE_THROWS_WITH_ALL(mean(from_vector<int64_t>({1, 2})), DTypeError, "mean", "[2] i64 cpu");
  PRECIS_REQUIRE_THROWS_WITH_ALL(var(from_vector<int32_t>({1, 2})), DTypeError, "var", "[2] i32 cpu");
  PRECIS_REQUIRE_THROWS_WITH_ALL(mean(zeros({2, 2}), {0, 0}), ValueError, "mean", "more than once");
  PRECIS_REQUIRE_THROWS_WITH_ALL(var(zeros({2, 2}), {5}), IndexError, "var", "[2, 2] f32 cpu");
}

// fuzz/regressions/fuzz_ops/var-correction-int64-min: N - correction was computed in int64 for the
// gradient and overflowed (UBSan); forward and backward now both divide by it in double.
TEST_CASE("var with an extreme correction: forward and gradient in double", "[ops][reduce]") {
  const int64_t c = std::numeric_limits<int64_t>::min();
  Tensor x = from_vector<double>({1.0, 2.0, 4.0}).requires_grad_();
  Tensor v = var(x, {}, c);
  const double denom = 3.0 - static_cast<double>(c);  // about 9.2e18
  REQUIRE(v.item<double>() == Approx((1.0 + 4.0 + 16.0 - 49.0 / 3.0) / denom).epsilon(1e-12));
  v.backward();
  const std::vector<double> g = x.grad().to_vector<double>();
  const double mean = 7.0 / 3.0;
  for (size_t i = 0; i < 3; ++i) REQUIRE(g[i] == Approx(2.0 * ((i == 0 ? 1.0 : i == 1 ? 2.0 : 4.0) - mean) / denom));
}

TEST_CASE("max along a dim gives values and first indices", "[ops][reduce]") {
  for (DType dt : {DType::f32, DType::f64}) {
    for (const Shape& shape : {Shape{7}, Shape{4, 9}, Shape{3, 4, 5}, Shape{600, 3}, Shape{2, 40000}}) {
      for (int64_t dim = -static_cast<int64_t>(shape.size()); dim < static_cast<int64_t>(shape.size()); ++dim) {
        for (bool nc : {false, true}) {
          Tensor x = randn_input(shape, false, 13, dt);
          if (nc) x = non_contiguous(x);
          const int64_t w = dim < 0 ? dim + x.dim() : dim;
          INFO("shape " << shape_str(shape) << " dim " << dim << " nc " << nc);
          auto [v, i] = max(x, dim);
          REQUIRE(i.dtype() == DType::i64);
          const Shape s = kept(x, {w}, false);
          PRECIS_REQUIRE_CLOSE(v, expected_tensor(reference_reduce(x, {w}, ref_max), s), dt);
          PRECIS_REQUIRE_CLOSE(i.to(DType::f64), expected_tensor(reference_reduce(x, {w}, ref_argmax), s), DType::f64);
          auto [vk, ik] = max(x, dim, true);
          REQUIRE(vk.sizes() == kept(x, {w}, true));
        }
      }
    }
  }
  // Ties: the first index; NaN wins over everything.
  Tensor t = from_vector<float>({1, 3, 3, 0, 2, 2, 5, 5}, {2, 4});
  auto [tv, ti] = max(t, 1);
  REQUIRE(ti.to_vector<int64_t>() == std::vector<int64_t>{1, 2});
  Tensor n = from_vector<float>({1, NAN, 7, NAN, 3, 4}, {6});
  auto [nv, ni] = max(n, 0);
  REQUIRE(std::isnan(nv.item<float>()));
  REQUIRE(ni.item<int64_t>() == 1);
  REQUIRE(std::isnan(max(n).item<float>()));
  // Low precision and integers.
  for (DType dt : {DType::f16, DType::bf16}) {
    Tensor x = randn_input({6, 33}, false, 3, dt);
    auto [v, i] = max(x, 1);
    PRECIS_REQUIRE_CLOSE(v, expected_tensor(reference_reduce(x, {1}, ref_max), {6}), dt);
    REQUIRE(i.to_vector<int64_t>().size() == 6);
  }
  Tensor xi = from_vector<int32_t>({4, -2, 9, 9, 1, 0}, {3, 2});
  auto [vi, ii] = max(xi, 0);
  REQUIRE(vi.dtype() == DType::i32);
  REQUIRE(vi.to_vector<int32_t>() == std::vector<int32_t>{9, 9});
  REQUIRE(ii.to_vector<int64_t>() == std::vector<int64_t>{1, 1});
}

TEST_CASE("max of all elements", "[ops][reduce]") {
  for (DType dt : {DType::f32, DType::f64, DType::bf16}) {
    Tensor x = randn_input({37, 29}, false, 8, dt);
    Tensor m = max(x);
    REQUIRE(m.dim() == 0);
    REQUIRE(m.dtype() == dt);
    PRECIS_REQUIRE_CLOSE(m, expected_tensor(reference_reduce(x, {0, 1}, ref_max), {}), dt);
    PRECIS_REQUIRE_CLOSE(max(non_contiguous(x)), m, dt);
  }
  Tensor big = randn_input({1000003}, false, 1, DType::f32);
  REQUIRE(max(big).item<double>() == reference_reduce(big, {0}, ref_max)[0]);
  REQUIRE(max(scalar_tensor(3.0)).item<double>() == 3.0);
  auto [v0, i0] = max(scalar_tensor(3.0), 0);
  REQUIRE(v0.item<double>() == 3.0);
  REQUIRE(i0.item<int64_t>() == 0);
}

TEST_CASE("max rejects empty reductions and bad dims", "[ops][reduce]") {
  PRECIS_REQUIRE_THROWS_WITH_ALL(max(zeros({0, 3})), ValueError, "max", "empty", "[0, 3] f32 cpu");
  PRECIS_REQUIRE_THROWS_WITH_ALL(max(zeros({0, 3}), 0), ValueError, "max", "empty", "[0, 3] f32 cpu");
  auto [v, i] = max(zeros({0, 3}), 1);
  REQUIRE(v.sizes() == Shape{0});
  PRECIS_REQUIRE_THROWS_WITH_ALL(max(zeros({2, 3}), 2), IndexError, "max", "[2, 3] f32 cpu");
}

TEST_CASE("mean, var and max do not depend on the thread count", "[ops][reduce]") {
  const int saved = get_num_threads();
  Tensor x = randn_input({5, 100001}, false, 2, DType::f32);
  auto run = [&] {
    std::vector<std::vector<float>> r;
    r.push_back(mean(x).to_vector<float>());
    r.push_back(var(x, {1}).to_vector<float>());
    r.push_back(var(x, {0}).to_vector<float>());
    r.push_back(std::get<0>(max(x, 1)).to_vector<float>());
    r.push_back(std::get<1>(max(x, 0)).to(DType::f32).to_vector<float>());
    return r;
  };
  set_num_threads(1);
  const auto a = run();
  set_num_threads(2);
  const auto b = run();
  set_num_threads(saved);
  REQUIRE(a == b);
}

// ---- gradient-check cases ---------------------------------------------------------------------
namespace {
// Distinct values (no ties for max): a shuffled ramp.
Tensor distinct_input(const Shape& shape, uint64_t seed) {
  Tensor r = randn_input(shape, false, seed);
  std::vector<double> v = r.to_vector<double>();
  for (size_t i = 0; i < v.size(); ++i) v[i] += 0.37 * static_cast<double>((i * 7919) % v.size());
  Tensor t = from_vector<double>(v, shape);
  t.requires_grad_(true);
  return t;
}
}  // namespace

static const bool kReduceGradCases = register_grad_cases({
    {OpId::sum, "all", [] { return TensorList{randn_input({3, 4})}; }, [](const TensorList& x) { return TensorList{sum(x[0])}; }},
    {OpId::sum, "dims keepdim", [] { return TensorList{randn_input({2, 3, 4})}; },
     [](const TensorList& x) { return TensorList{sum(x[0], {0, -1}, true)}; }},
    {OpId::sum, "non-contiguous", [] { return TensorList{non_contiguous(randn_input({4, 5}))}; },
     [](const TensorList& x) { return TensorList{sum(x[0], {1})}; }},
    {OpId::mean, "dims", [] { return TensorList{randn_input({3, 4, 2})}; },
     [](const TensorList& x) { return TensorList{mean(x[0], {1})}; }},
    {OpId::mean, "all non-contiguous", [] { return TensorList{non_contiguous(randn_input({4, 3}))}; },
     [](const TensorList& x) { return TensorList{mean(x[0])}; }},
    {OpId::var, "dim correction 1", [] { return TensorList{randn_input({3, 5})}; },
     [](const TensorList& x) { return TensorList{var(x[0], {1})}; }},
    {OpId::var, "all correction 0 keepdim", [] { return TensorList{non_contiguous(randn_input({4, 3}))}; },
     [](const TensorList& x) { return TensorList{var(x[0], {}, 0, true)}; }},
    {OpId::max, "dim", [] { return TensorList{distinct_input({4, 5}, 1)}; },
     [](const TensorList& x) { return TensorList{std::get<0>(max(x[0], 1))}; }},
    {OpId::max, "dim 0 non-contiguous keepdim", [] { return TensorList{non_contiguous(distinct_input({4, 5}, 2))}; },
     [](const TensorList& x) { return TensorList{std::get<0>(max(x[0], 0, true))}; }},
    {OpId::max, "all", [] { return TensorList{distinct_input({3, 4}, 3)}; },
     [](const TensorList& x) { return TensorList{max(x[0])}; }},
});
