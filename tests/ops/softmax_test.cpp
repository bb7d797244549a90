// softmax and log_softmax: forward against a naive f64 reference along every dim, numerical
// stability, masked (−inf) entries, the dtype= parameter, f16/bf16, the fused backward kernels
// in f32 against the f64 ones, bad inputs, and the gradient-check cases.
#include <cmath>
#include <limits>

#include "core/thread_pool.h"
#include "ops/functional.h"
#include "tests/support/op_cases.h"
#include "tests/support/tensor_testing.h"

using namespace precis;
using namespace precis::testing;

namespace {

// Naive softmax (or log_softmax) of x along dim, in double, in x's (contiguous) layout.
Tensor reference_softmax(const Tensor& x, int64_t dim, bool log) {
  const std::vector<double> v = x.to_vector<double>();
  const int64_t nd = std::max<int64_t>(x.dim(), 1);
  const Shape s = x.dim() == 0 ? Shape{1} : x.sizes();
  if (dim < 0) dim += nd;
  int64_t inner = 1;
  for (int64_t d = dim + 1; d < nd; ++d) inner *= s[d];
  const int64_t n = s[dim], outer = static_cast<int64_t>(v.size()) / std::max<int64_t>(n * inner, 1);
  std::vector<double> out(v.size());
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t j = 0; j < inner; ++j) {
      auto at = [&](int64_t k) { return o * n * inner + k * inner + j; };
      double m = -std::numeric_limits<double>::infinity();
      for (int64_t k = 0; k < n; ++k) m = std::max(m, v[at(k)]);
      double sum = 0;
      for (int64_t k = 0; k < n; ++k) sum += std::exp(v[at(k)] - m);
      for (int64_t k = 0; k < n; ++k)
        out[at(k)] = log ? v[at(k)] - m - std::log(sum) : std::exp(v[at(k)] - m) / sum;
    }
  }
  return from_vector<double>(out, x.sizes());
}

Tensor run(bool log, const Tensor& x, int64_t dim) { return log ? log_softmax(x, dim) : softmax(x, dim); }

}  // namespace

TEST_CASE("softmax and log_softmax match a f64 reference along every dim", "[ops][softmax]") {
  struct Case {
    Shape shape;
    int64_t dim;
  };
  const std::vector<Case> cases = {{{7}, 0},          {{3, 5}, 1},        {{3, 5}, 0},          {{3, 5}, -1},
                                   {{2, 3, 4, 5}, 0}, {{2, 3, 4, 5}, 1},  {{2, 3, 4, 5}, 2},    {{2, 3, 4, 5}, -1},
                                   {{4, 300}, 1},     {{3, 70, 130}, 1},  {{2, 1000}, -1},      {{5, 1, 3}, 1}};
  for (bool log : {false, true}) {
    for (const Case& c : cases) {
      for (DType dt : {DType::f64, DType::f32}) {
        Tensor x = randn_input(c.shape, false, 11, DType::f64);
        Tensor y = run(log, x.to(dt), c.dim);
        INFO((log ? "log_softmax " : "softmax ") << shape_str(c.shape) << " dim " << c.dim << " " << dtype_name(dt));
        REQUIRE(y.dtype() == dt);
        PRECIS_REQUIRE_CLOSE(y, reference_softmax(x, c.dim, log), dt);
      }
    }
  }
}

TEST_CASE("softmax over many rows and a non-contiguous input", "[ops][softmax]") {
  Tensor x = randn_input({64, 4, 33, 17}, false, 3, DType::f32);
  Tensor xt = x.transpose(1, 3);  // non-contiguous
  for (bool log : {false, true}) {
    for (int64_t dim : {-1, 1, 2}) {
      INFO("dim " << dim << (log ? " log" : ""));
      PRECIS_REQUIRE_CLOSE(run(log, xt, dim), reference_softmax(xt.to(DType::f64).contiguous(), dim, log), DType::f32);
    }
  }
  // Serial and parallel runs agree bit for bit (each row is computed by one thread).
  const int threads = get_num_threads();
  set_num_threads(1);
  const std::vector<float> serial = softmax(x, -1).to_vector<float>();
  set_num_threads(std::max(threads, 2));
  const std::vector<float> parallel = softmax(x, -1).to_vector<float>();
  set_num_threads(threads);
  REQUIRE(serial == parallel);
}

TEST_CASE("softmax is stable for large values and exact for masked entries", "[ops][softmax]") {
  for (DType dt : {DType::f32, DType::f64}) {
    // Values around 1e4: exp would overflow without the max shift.
    Tensor x = uniform_input({4, 50}, 1e4, 1e4 + 20, false, 5);
    for (int64_t dim : {0, 1}) {
      for (bool log : {false, true}) {
        Tensor y = run(log, x.to(dt), dim);
        INFO(dtype_name(dt) << " dim " << dim << (log ? " log" : ""));
        // In f32, 1e4 + u carries an absolute error of ~5e-4 in the input itself.
        Tensor ref = reference_softmax(x.to(dt).to(DType::f64), dim, log);
        PRECIS_REQUIRE_CLOSE(y, ref, dt);
      }
    }
    // −inf entries (an attention mask) get exactly 0 probability and log-probability −inf.
    const double inf = std::numeric_limits<double>::infinity();
    Tensor m = from_vector<double>({1.0, -inf, 3.0, -inf, -1000.0, 0.5}, {2, 3}).to(dt);
    const std::vector<double> p = softmax(m, 1).to_vector<double>();
    CHECK(p[1] == 0.0);
    CHECK(p[3] == 0.0);
    CHECK(p[4] == 0.0);  // exp(−1000.5) underflows to 0
    CHECK(std::abs(p[0] + p[2] - 1.0) < 1e-6);
    const std::vector<double> lp = log_softmax(m, 1).to_vector<double>();
    CHECK(lp[1] == -inf);
    CHECK(std::isfinite(lp[4]));
    CHECK(std::abs(lp[4] - (-1000.5)) < 1e-3);  // −1000 − 0.5 − log(1 + e^−1000.5)
    // A NaN poisons its own row only.
    Tensor nanrow = from_vector<double>({1.0, std::nan(""), 2.0, 1.0, 2.0, 3.0}, {2, 3}).to(dt);
    const std::vector<double> pn = softmax(nanrow, 1).to_vector<double>();
    CHECK(std::isnan(pn[0]));
    CHECK(std::isnan(pn[2]));
    CHECK(std::isfinite(pn[3]));
  }
}

TEST_CASE("softmax of a 0-d tensor and of an empty tensor", "[ops][softmax]") {
  Tensor s = scalar_tensor(3.0, {.dtype = DType::f64});
  REQUIRE(softmax(s, 0).item<double>() == 1.0);
  REQUIRE(log_softmax(s, -1).item<double>() == 0.0);
  REQUIRE(softmax(s, 0).dim() == 0);
  Tensor e = zeros({0, 4});
  REQUIRE(softmax(e, 1).sizes() == Shape{0, 4});
  REQUIRE(log_softmax(e, 0).sizes() == Shape{0, 4});
}

TEST_CASE("softmax dtype= casts first, and f16 and bf16 compute in fp32", "[ops][softmax]") {
  Tensor x = randn_input({6, 40}, false, 7, DType::f64);
  for (DType low : {DType::f16, DType::bf16}) {
    Tensor xl = x.to(low);
    const Tensor ref_in = xl.to(DType::f64);  // the values the kernel actually sees
    for (bool log : {false, true}) {
      for (int64_t dim : {0, 1}) {
        Tensor y = run(log, xl, dim);
        REQUIRE(y.dtype() == low);
        INFO(dtype_name(low) << " dim " << dim << (log ? " log" : ""));
        PRECIS_REQUIRE_CLOSE(y, reference_softmax(ref_in, dim, log), low);
      }
      Tensor y32 = log ? log_softmax(xl, -1, DType::f32) : softmax(xl, -1, DType::f32);
      REQUIRE(y32.dtype() == DType::f32);
      PRECIS_REQUIRE_CLOSE(y32, reference_softmax(ref_in, -1, log), DType::f32);
    }
  }
  // dtype= is differentiable through the cast: the gradient comes back in the input's dtype.
  Tensor xf = randn_input({3, 5}, true, 8, DType::f32);
  sum(mul(softmax(xf, 1, DType::f64), randn_input({3, 5}, false, 9))).backward();
  REQUIRE(xf.grad().dtype() == DType::f32);
}

TEST_CASE("softmax backward kernels in f32, f16 and bf16 agree with f64", "[ops][softmax]") {
  for (bool log : {false, true}) {
    for (const auto& [shape, dim] : std::vector<std::pair<Shape, int64_t>>{
             {{8, 130}, 1}, {{8, 130}, 0}, {{3, 20, 70}, 1}, {{2, 3, 300}, -1}}) {
      Tensor x64 = randn_input(shape, true, 13, DType::f64);
      Tensor w = randn_input(shape, false, 14, DType::f64);
      sum(mul(run(log, x64, dim), w)).backward();
      for (DType dt : {DType::f32, DType::f16, DType::bf16}) {
        Tensor x = x64.detach().to(dt);
        x.requires_grad_(true);
        sum(mul(run(log, x, dim), w.to(dt))).backward();
        INFO((log ? "log_softmax " : "softmax ") << shape_str(shape) << " dim " << dim << " " << dtype_name(dt));
        REQUIRE(x.grad().dtype() == dt);
        // Low precision: the reference gradient is of the rounded inputs; compare with the
        // magnitude of the gradient as the scale (it is a difference of O(1) terms).
        Tolerance tol = tolerance(dt);
        if (dt != DType::f32) tol.atol = tol.rtol * 4;
        const std::string report = allclose_report(x.grad(), x64.grad(), tol);
        INFO(report);
        REQUIRE(report.empty());
      }
    }
  }
}

TEST_CASE("softmax rejects bad input", "[ops][softmax]") {
  Tensor x = zeros({2, 3});
  PRECIS_REQUIRE_THROWS_WITH_ALL(softmax(x, 2), IndexError, "softmax", "dimension 2", "[2, 3] f32 cpu");
  PRECIS_REQUIRE_THROWS_WITH_ALL(log_softmax(x, -3), IndexError, "log_softmax", "[2, 3] f32 cpu");
  Tensor i = zeros({2, 3}, {.dtype = DType::i64});
  PRECIS_REQUIRE_THROWS_WITH_ALL(softmax(i, 1), DTypeError, "softmax", "[2, 3] i64 cpu", "dtype = DType::f32");
  PRECIS_REQUIRE_THROWS_WITH_ALL(softmax(x, 1, DType::i32), DTypeError, "softmax", "i32");
  // An integer input with a floating dtype= is accepted (cast first), as in PyTorch.
  REQUIRE(softmax(i, 1, DType::f32).dtype() == DType::f32);
}

namespace {

using Fn = std::function<TensorList(const TensorList&)>;

std::vector<GradCase> softmax_grad_cases() {
  std::vector<GradCase> cases;
  for (bool log : {false, true}) {
    const OpId op = log ? OpId::log_softmax : OpId::softmax;
    auto fn = [log](int64_t dim) -> Fn {
      return [log, dim](const TensorList& x) { return TensorList{run(log, x[0], dim)}; };
    };
    cases.push_back({op, "last dim [3, 5]", [] { return TensorList{randn_input({3, 5}, true, 1)}; }, fn(-1)});
    cases.push_back({op, "first dim [4, 3]", [] { return TensorList{randn_input({4, 3}, true, 2)}; }, fn(0)});
    cases.push_back({op, "middle dim [2, 4, 3]", [] { return TensorList{randn_input({2, 4, 3}, true, 3)}; }, fn(1)});
    cases.push_back({op, "non-contiguous [4, 5] dim 1",
                     [] { return TensorList{non_contiguous(randn_input({4, 5}, true, 4))}; }, fn(1)});
    cases.push_back({op, "0-d", [] { return TensorList{randn_input({}, true, 5)}; }, fn(0)});
    cases.push_back({op, "expanded upstream gradient",
                     [] { return TensorList{randn_input({3, 4}, true, 6)}; },
                     [log](const TensorList& x) { return TensorList{sum(run(log, x[0], 1), {0})}; }});
  }
  return cases;
}

const bool kSoftmaxCases = register_grad_cases(softmax_grad_cases());

}  // namespace

// The vectorised fp32 exponential under the softmax kernels (both instruction-set paths).
#include "ops/cpu/vec_exp.h"

TEST_CASE("vectorised fp32 exp is accurate, exact at the ends, and the same on both paths", "[ops][softmax]") {
  std::vector<float> x;
  for (double v = -110; v <= 90; v += 0.0137) x.push_back(static_cast<float>(v));
  const float inf = std::numeric_limits<float>::infinity();
  x.insert(x.end(), {-inf, inf, 0.0f, -0.0f, std::nanf(""), 88.7f, -87.3f, -103.9f, 1e-30f});
  std::vector<float> y(x.size());
  cpu::exp_array(x.data(), y.data(), static_cast<int64_t>(x.size()));
  for (size_t i = 0; i < x.size(); ++i) {
    const double want = std::exp(static_cast<double>(x[i]));
    INFO("exp(" << x[i] << ") = " << y[i] << ", want " << want);
    if (std::isnan(x[i])) {
      CHECK(std::isnan(y[i]));
    } else if (want > std::numeric_limits<float>::max()) {
      CHECK(y[i] == inf);
    } else if (want < std::numeric_limits<float>::min()) {
      CHECK(std::abs(y[i] - want) <= 1.5e-45);  // gradual underflow: within one subnormal step
    } else {
      CHECK(std::abs(y[i] - want) <= 2.5e-7 * want);
    }
  }
  // The shifted sum (x − shift <= 0): the same values on the AVX2 and (where run) AVX-512 paths.
  std::vector<float> row(1000), e2(1000);
  for (size_t i = 0; i < row.size(); ++i) row[i] = -static_cast<float>(i % 97) * 0.37f;
  row[5] = -inf;
  double want = 0;
  for (float v : row) want += std::exp(static_cast<double>(v));
  for (int64_t n : {int64_t(1), int64_t(7), int64_t(33), int64_t(1000)}) {
    const float s = cpu::vec_detail::exp_shift_sum_avx2(row.data(), e2.data(), n, 0.0f, 2.0f);
    double w = 0;
    for (int64_t i = 0; i < n; ++i) w += std::exp(static_cast<double>(row[i]));
    CHECK(std::abs(s - w) <= 1e-6 * w);
    for (int64_t i = 0; i < n; ++i) CHECK(std::abs(e2[i] - 2 * std::exp(static_cast<double>(row[i]))) <= 5e-7 * 2);
    CHECK(std::abs(cpu::exp_shift_sum(row.data(), static_cast<float*>(nullptr), n, 0.0f, 1.0f) - w) <= 1e-6 * w);
    CHECK(cpu::vec_detail::max_avx2(row.data(), n) == 0.0f);
    CHECK(cpu::row_max_f32(row.data(), n) == 0.0f);
  }
  CHECK(e2[5] == 0.0f);
  CHECK(std::abs(cpu::exp_shift_sum(row.data(), static_cast<float*>(nullptr), 1000, 0.0f, 1.0f) - want) <= 1e-6 * want);
}

#include "amp/autocast.h"

TEST_CASE("softmax and log_softmax are FP32 under autocast", "[ops][softmax][amp]") {
  Tensor x = randn_input({3, 8}, false, 1, DType::f32).to(DType::bf16);
  amp::Autocast autocast(DType::bf16);
  CHECK(softmax(x, -1).dtype() == DType::f32);
  CHECK(log_softmax(x, 0).dtype() == DType::f32);
}
