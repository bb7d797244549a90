// Unary element-wise ops: forward against naive f64 references (f32, f64, spot checks in f16 and
// bf16), layouts (0-d, empty, non-contiguous, multi-chunk), integer kernels, special values, bad
// inputs, and the gradient-check cases of every differentiable unary op.
#include <cmath>
#include <functional>
#include <limits>
#include <string>

#include "core/thread_pool.h"
#include "ops/detail/elementwise_backward.h"
#include "ops/functional.h"
#include "tests/support/op_cases.h"
#include "tests/support/tensor_testing.h"

using namespace precis;
using namespace precis::testing;

namespace {

double ref_gelu(double x) { return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0))); }
double ref_gelu_tanh(double x) {
  return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
}

struct UnaryCase {
  const char* name;
  std::function<Tensor(const Tensor&)> fn;
  std::function<double(double)> ref;
  double lo, hi;  // input range
};

const std::vector<UnaryCase>& unary_cases() {
  static const std::vector<UnaryCase> cases = {
      {"neg", [](const Tensor& x) { return neg(x); }, [](double x) { return -x; }, -3, 3},
      {"abs", [](const Tensor& x) { return abs(x); }, [](double x) { return std::fabs(x); }, -3, 3},
      {"exp", [](const Tensor& x) { return exp(x); }, [](double x) { return std::exp(x); }, -5, 5},
      {"log", [](const Tensor& x) { return log(x); }, [](double x) { return std::log(x); }, 0.01, 50},
      {"sqrt", [](const Tensor& x) { return sqrt(x); }, [](double x) { return std::sqrt(x); }, 0, 50},
      {"rsqrt", [](const Tensor& x) { return rsqrt(x); }, [](double x) { return 1 / std::sqrt(x); }, 0.01, 50},
      {"tanh", [](const Tensor& x) { return tanh(x); }, [](double x) { return std::tanh(x); }, -6, 6},
      {"sigmoid", [](const Tensor& x) { return sigmoid(x); }, [](double x) { return 1 / (1 + std::exp(-x)); }, -8, 8},
      {"relu", [](const Tensor& x) { return relu(x); }, [](double x) { return x > 0 ? x : 0.0; }, -3, 3},
      {"silu", [](const Tensor& x) { return silu(x); }, [](double x) { return x / (1 + std::exp(-x)); }, -8, 8},
      {"gelu", [](const Tensor& x) { return gelu(x); }, ref_gelu, -6, 6},
      {"gelu_tanh", [](const Tensor& x) { return gelu(x, "tanh"); }, ref_gelu_tanh, -6, 6},
      {"pow_2.5", [](const Tensor& x) { return pow(x, 2.5); }, [](double x) { return std::pow(x, 2.5); }, 0, 4},
      {"pow_3", [](const Tensor& x) { return pow(x, 3); }, [](double x) { return x * x * x; }, -3, 3},
      {"pow_-1.5", [](const Tensor& x) { return pow(x, -1.5); }, [](double x) { return std::pow(x, -1.5); }, 0.1, 4},
  };
  return cases;
}

// ref applied to x's stored values, in f64, as a tensor of x's shape.
Tensor reference(const Tensor& x, const std::function<double(double)>& ref) {
  std::vector<double> v = x.to_vector<double>();
  for (double& e : v) e = ref(e);
  return from_vector<double>(v, x.sizes());
}

}  // namespace

TEST_CASE("unary ops match a f64 reference in f32 and f64", "[ops][unary]") {
  const std::vector<Shape> shapes = {{}, {0}, {7}, {3, 5}, {2, 3, 4}, {33, 70}, {0, 4}};
  for (const UnaryCase& c : unary_cases()) {
    for (DType dt : {DType::f32, DType::f64}) {
      for (const Shape& shape : shapes) {
        for (bool nc : {false, true}) {
          Tensor x = uniform_input(shape, c.lo, c.hi, false, 3, dt);
          if (nc) x = non_contiguous(x);
          INFO(c.name << " " << dtype_name(dt) << " " << shape_str(shape) << (nc ? " non-contiguous" : ""));
          Tensor y = c.fn(x);
          REQUIRE(y.dtype() == dt);
          REQUIRE(y.sizes() == shape);
          // The output takes x's layout when x is dense (the transposed copies non_contiguous makes
          // of 2-D+ tensors), else it is contiguous (x strided with gaps: its 1-D form).
          const bool dense_permuted = nc && x.dim() >= 2 && x.numel() > 0 && !x.is_contiguous();
          if (dense_permuted) {
            REQUIRE(y.strides() == x.strides());
          } else {
            REQUIRE(y.is_contiguous());
          }
          PRECIS_REQUIRE_CLOSE(y, reference(x, c.ref), dt);
        }
      }
    }
  }
}

TEST_CASE("unary ops over many chunks and strided rows", "[ops][unary]") {
  // 3·40000 elements spans several parallel chunks; the transposed view gives strided rows.
  for (const UnaryCase& c : unary_cases()) {
    Tensor x = uniform_input({3, 40000}, c.lo, c.hi, false, 5, DType::f32);
    INFO(c.name);
    PRECIS_REQUIRE_CLOSE(c.fn(x), reference(x, c.ref), DType::f32);
    Tensor xt = uniform_input({400, 300}, c.lo, c.hi, false, 6, DType::f32).t();
    PRECIS_REQUIRE_CLOSE(c.fn(xt), reference(xt, c.ref), DType::f32);
  }
}

TEST_CASE("unary ops in f16 and bf16 compute in fp32 and round once", "[ops][unary]") {
  for (const UnaryCase& c : unary_cases()) {
    for (DType dt : {DType::f16, DType::bf16}) {
      for (bool nc : {false, true}) {
        Tensor x = uniform_input({5, 301}, c.lo, c.hi, false, 7, dt);
        if (nc) x = non_contiguous(x);
        INFO(c.name << " " << dtype_name(dt) << (nc ? " non-contiguous" : ""));
        Tensor y = c.fn(x);
        REQUIRE(y.dtype() == dt);
        PRECIS_REQUIRE_CLOSE(y, reference(x, c.ref), dt);
      }
    }
  }
}

TEST_CASE("neg, abs and relu have integer kernels", "[ops][unary]") {
  for (DType dt : {DType::i32, DType::i64}) {
    Tensor x = from_vector<int64_t>({-3, 0, 5, -7, 2, 9}, {2, 3}, {.dtype = dt});
    REQUIRE(neg(x).dtype() == dt);
    REQUIRE(neg(x).to_vector<int64_t>() == std::vector<int64_t>{3, 0, -5, 7, -2, -9});
    REQUIRE(abs(x).to_vector<int64_t>() == std::vector<int64_t>{3, 0, 5, 7, 2, 9});
    REQUIRE(relu(x.t()).to_vector<int64_t>() == std::vector<int64_t>{0, 0, 0, 2, 5, 9});
  }
}

TEST_CASE("unary special values: NaN, infinities, zeros", "[ops][unary]") {
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  for (DType dt : {DType::f32, DType::f64, DType::bf16}) {
    // 6 special values, then 20 more that reach the kernels' vectorised paths.
    std::vector<double> v = {nan, -inf, inf, 0.0, -1000.0, 1000.0};
    for (int i = 0; i < 10; ++i) v.insert(v.end(), {-inf, -750.0});
    Tensor x = from_vector<double>(v, {26}, {.dtype = dt});
    INFO(dtype_name(dt));
    const std::vector<double> r = relu(x).to_vector<double>();
    CHECK(std::isnan(r[0]));
    CHECK(r[1] == 0.0);
    CHECK(r[2] == inf);
    CHECK(r[3] == 0.0);
    const std::vector<double> s = sigmoid(x).to_vector<double>();
    CHECK(std::isnan(s[0]));
    CHECK(s[1] == 0.0);
    CHECK(s[2] == 1.0);
    CHECK(s[4] == 0.0);
    CHECK(s[5] == 1.0);
    const std::vector<double> e = exp(x).to_vector<double>();
    CHECK(e[1] == 0.0);
    CHECK(e[2] == inf);
    CHECK(e[3] == 1.0);
    for (size_t i = 6; i < v.size(); ++i) CHECK(e[i] == 0.0);  // no subnormal floor for exp(-inf)
    CHECK(log(x).to_vector<double>()[3] == -inf);
    CHECK(std::isnan(pow(x, 0).to_vector<double>()[0]) == false);  // x^0 = 1, even for NaN
    CHECK(tanh(x).to_vector<double>()[5] == 1.0);
  }
}

TEST_CASE("sqrt, rsqrt, neg, log and tanh are right at the edges in every position of a row", "[ops][unary]") {
  // Eigen's packet sqrt (EIGEN_FAST_MATH) gave NaN for inf, 0 for subnormals and 1-2 ulp errors
  // from the 8th element of a row on; its packet negation +0 for -(+0); its log log(FLT_MIN) for
  // subnormals; its f32 tanh exactly 1 from 7.9. The scalar C++ functions are the reference here
  // (correctly rounded sqrt and division; PyTorch's values).
  constexpr int64_t n = 40;
  auto row = [](float v) { return full({n}, static_cast<double>(v)); };
  auto all_are = [](const Tensor& t, auto pred) {
    for (float e : t.to_vector<float>())
      if (!pred(e)) return false;
    return true;
  };
  const float inf = std::numeric_limits<float>::infinity();
  CHECK(all_are(sqrt(row(inf)), [&](float e) { return e == inf; }));
  CHECK(all_are(sqrt(row(1e-40f)), [](float e) { return e == std::sqrt(1e-40f) && e > 0; }));
  CHECK(all_are(sqrt(row(-0.0f)), [](float e) { return e == 0 && std::signbit(e); }));
  CHECK(all_are(rsqrt(row(inf)), [](float e) { return e == 0; }));
  CHECK(all_are(rsqrt(row(0.0f)), [&](float e) { return e == inf; }));
  CHECK(all_are(pow(row(inf), 0.5), [&](float e) { return e == inf; }));
  CHECK(all_are(neg(row(0.0f)), [](float e) { return e == 0 && std::signbit(e); }));
  CHECK(all_are(log(row(1e-40f)), [](float e) { return e == std::log(1e-40f); }));
  CHECK(all_are(tanh(row(8.03f)), [](float e) { return e == std::tanh(8.03f) && e < 1; }));
  CHECK(all_are(tanh(row(-8.5f)), [](float e) { return e == std::tanh(-8.5f) && e > -1; }));
  CHECK(log(full({n}, 1e-310, {.dtype = DType::f64})).to_vector<double>()[n - 1] == std::log(1e-310));
  CHECK(sqrt(full({n}, INFINITY, {.dtype = DType::f16})).to_vector<float>()[n - 1] == inf);
  // Ordinary values: correctly rounded, the same bits as the scalar functions.
  std::vector<float> v;
  for (int i = 0; i < 4000; ++i)
    v.push_back(static_cast<float>(std::exp(0.01 * (i - 2000))) * (1.0f + 0.37f * static_cast<float>(i % 7)));
  Tensor x = from_vector<float>(v, {static_cast<int64_t>(v.size())});
  const auto s = sqrt(x).to_vector<float>(), r = rsqrt(x).to_vector<float>();
  const auto ph = pow(x, 0.5).to_vector<float>(), pmh = pow(x, -0.5).to_vector<float>();
  size_t wrong = 0;
  for (size_t i = 0; i < v.size(); ++i)
    wrong += s[i] != std::sqrt(v[i]) || r[i] != 1.0f / std::sqrt(v[i]) || ph[i] != s[i] || pmh[i] != r[i];
  CHECK(wrong == 0);
}

TEST_CASE("relu and gelu backward kernels", "[ops][unary]") {
  Tensor g = from_vector<double>({1, 2, 3, 4}, {4});
  Tensor x = from_vector<double>({-1, 0, 0.5, 2}, {4});
  REQUIRE(relu_backward(g, x).to_vector<double>() == std::vector<double>{0, 0, 3, 4});  // 0 at x = 0
  for (const char* approx : {"none", "tanh"}) {
    Tensor xs = uniform_input({5, 40}, -4, 4, false, 2);
    Tensor gs = uniform_input({5, 40}, -1, 1, false, 3);
    // Central differences of the forward (f64) as the reference derivative.
    const double h = 1e-6;
    Tensor fd = div(sub(gelu(add(xs, h), approx), gelu(sub(xs, h), approx)), 2 * h);
    Tensor expected = mul(gs, fd);
    INFO(approx);
    REQUIRE(allclose(gelu_backward(gs, xs, approx), expected, {1e-7, 1e-8}));
    // f32 and bf16 kernels agree with the f64 one within their tolerance.
    for (DType dt : {DType::f32, DType::bf16}) {
      Tensor lo = gelu_backward(gs.to(dt), non_contiguous(xs.to(dt)), approx);
      PRECIS_REQUIRE_CLOSE(lo, gelu_backward(gs.to(dt).to(DType::f64), xs.to(dt).to(DType::f64), approx), dt);
    }
  }
}

// gelu's backward takes exp from ops/cpu/vec_exp.h for fp32 compute (f32, f16, bf16): against
// the f64 derivative over [-10, 10], several kBlock chunks with a ragged tail, contiguous and
// strided, every float dtype, 1 and 2 threads.
TEST_CASE("gelu backward matches the f64 derivative in every float dtype", "[ops][unary]") {
  const int saved = get_num_threads();
  const double k = std::sqrt(2.0 / M_PI), c = 0.044715;
  auto d_erf = [](double x) {
    return 0.5 * (1.0 + std::erf(x / std::sqrt(2.0))) + x * std::exp(-0.5 * x * x) / std::sqrt(2.0 * M_PI);
  };
  auto d_tanh = [&](double x) {
    const double t = std::tanh(k * (x + c * x * x * x));
    return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * k * (1.0 + 3.0 * c * x * x);
  };
  for (const char* approx : {"none", "tanh"}) {
    for (DType dt : {DType::f32, DType::f64, DType::f16, DType::bf16}) {
      for (bool nc : {false, true}) {
        Tensor x = uniform_input({3, 1777}, -10, 10, false, 12, dt);
        const Tensor g = uniform_input({3, 1777}, -1, 1, false, 13, dt);
        if (nc) x = non_contiguous(x);
        const auto xv = x.to_vector<double>(), gv = g.to_vector<double>();
        std::vector<double> want(xv.size());
        for (size_t i = 0; i < xv.size(); ++i)
          want[i] = gv[i] * (std::string(approx) == "tanh" ? d_tanh(xv[i]) : d_erf(xv[i]));
        for (int threads : {1, 2}) {
          INFO(approx << " " << dtype_name(dt) << (nc ? " strided " : " ") << threads << " threads");
          set_num_threads(threads);
          const Tensor got = gelu_backward(g, x, approx);
          set_num_threads(saved);
          PRECIS_REQUIRE_CLOSE(got, from_vector<double>(want, x.sizes()), dt);
        }
      }
    }
  }
}

TEST_CASE("exp, log, sqrt, rsqrt, tanh, sigmoid, erf and fractional pow take integer and bool input as f32",
          "[ops][unary]") {
  using Fn = Tensor (*)(const Tensor&);
  const Tensor xi = from_vector<int64_t>({1, 4, 9}, {3}), x32 = xi.to(DType::i32), xb = from_vector<bool>({true, false});
  for (Fn f : {static_cast<Fn>(exp), static_cast<Fn>(log), static_cast<Fn>(sqrt), static_cast<Fn>(rsqrt),
               static_cast<Fn>(tanh), static_cast<Fn>(sigmoid), static_cast<Fn>(erf)}) {
    for (const Tensor& x : {xi, x32, xb}) {
      const Tensor y = f(x);
      REQUIRE(y.dtype() == DType::f32);  // PyTorch's default dtype
      PRECIS_REQUIRE_SAME_BITS(y, f(x.to(DType::f32)));
    }
  }
  CHECK(sqrt(xi).to_vector<float>() == std::vector<float>{1.0f, 2.0f, 3.0f});
  CHECK(pow(xi, 0.5).to_vector<float>() == std::vector<float>{1.0f, 2.0f, 3.0f});
}

TEST_CASE("unary ops reject integer input where only floating is defined", "[ops][unary]") {
  Tensor xi = from_vector<int64_t>({1, 2}, {2});
  PRECIS_REQUIRE_THROWS_WITH_ALL(silu(xi), DTypeError, "silu", "[2] i64 cpu", ".to(DType::f32)");
  PRECIS_REQUIRE_THROWS_WITH_ALL(gelu(xi), DTypeError, "gelu", "[2] i64 cpu");
  // PyTorch computes an integral power in the integer type; precis has no such kernel.
  PRECIS_REQUIRE_THROWS_WITH_ALL(pow(xi, 2), DTypeError, "pow", "[2] i64 cpu");
  Tensor xb = from_vector<bool>({true, false}, {2});
  PRECIS_REQUIRE_THROWS_WITH_ALL(neg(xb), DTypeError, "neg", "[2] bool cpu");
  Tensor x = randn_input({2}, false);
  PRECIS_REQUIRE_THROWS_WITH_ALL(gelu(x, "fast"), ValueError, "gelu", "\"none\"", "\"tanh\"", "fast");
  PRECIS_REQUIRE_THROWS_WITH_ALL(relu_backward(x, randn_input({3}, false)), ShapeError, "relu_backward", "[2] f64 cpu",
                                 "[3] f64 cpu");
}

TEST_CASE("abs and relu have zero gradient at 0, and pow with exponent 0 a zero gradient", "[ops][unary][grad]") {
  Tensor x = from_vector<double>({-2, 0, 3}, {3});
  x.requires_grad_(true);
  sum(add(abs(x), relu(x))).backward();
  REQUIRE(x.grad().to_vector<double>() == std::vector<double>{-1, 0, 2});
  Tensor z = from_vector<double>({0, 1, -2}, {3});
  z.requires_grad_(true);
  sum(pow(z, 0)).backward();
  REQUIRE(z.grad().to_vector<double>() == std::vector<double>{0, 0, 0});
}

namespace {

// Values in ±[0.2, 1.5] with mixed signs: away from the kinks of abs and relu at 0.
Tensor away_from_zero(const Shape& shape, uint64_t seed) {
  Tensor u = uniform_input(shape, 0.2, 1.5, false, seed);
  std::vector<double> v = u.to_vector<double>();
  for (size_t i = 0; i < v.size(); ++i)
    if ((i * 7 + seed) % 3 == 0) v[i] = -v[i];
  Tensor t = from_vector<double>(v, shape);
  t.requires_grad_(true);
  return t;
}

using Fn = std::function<TensorList(const TensorList&)>;
Fn unary_fn(Tensor (*f)(const Tensor&)) {
  return [f](const TensorList& x) { return TensorList{f(x[0])}; };
}

GradCase contiguous_case(OpId op, Fn fn, double lo, double hi) {
  return {op, "contiguous [3, 4]", [lo, hi] { return TensorList{uniform_input({3, 4}, lo, hi, true, 1)}; }, fn};
}
GradCase strided_case(OpId op, Fn fn, double lo, double hi) {
  return {op, "non-contiguous [4, 5]",
          [lo, hi] { return TensorList{non_contiguous(uniform_input({4, 5}, lo, hi, true, 2))}; }, fn};
}
GradCase scalar_case(OpId op, Fn fn, double lo, double hi) {
  return {op, "0-d", [lo, hi] { return TensorList{uniform_input({}, lo, hi, true, 3)}; }, fn};
}

TEST_CASE("leaky_relu: PyTorch's values and gradient, 0 and NaN included, every floating dtype", "[ops][unary]") {
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  const std::vector<double> xs = {-3.0, -0.5, -0.0, 0.0, 0.25, 2.0, -inf, inf, nan};
  for (DType dt : {DType::f64, DType::f32, DType::f16, DType::bf16}) {
    for (double slope : {0.01, 0.2, -0.5, 1.5}) {
      INFO(dtype_name(dt) << " slope " << slope);
      Tensor x = from_vector<double>(xs).to(dt).requires_grad_();
      const Tensor y = leaky_relu(x, slope);
      REQUIRE(y.dtype() == dt);
      sum(y).backward();
      const std::vector<double> got = y.to(DType::f64).to_vector<double>(), g = x.grad().to(DType::f64).to_vector<double>();
      for (size_t i = 0; i < xs.size(); ++i) {
        INFO("x = " << xs[i]);
        // The product slope·x is formed in fp32 (f64 for f64) and rounded once to the dtype.
        const double want = xs[i] > 0 ? xs[i] : Tensor(from_vector<double>({xs[i] * slope})).to(dt).item<double>();
        if (std::isnan(want)) {
          CHECK(std::isnan(got[i]));
        } else {
          CHECK(got[i] == want);
        }
        const double want_grad = xs[i] > 0 ? 1.0 : Tensor(from_vector<double>({slope})).to(dt).item<double>();
        CHECK(g[i] == want_grad);  // the slope at 0 and for NaN, as PyTorch
      }
    }
  }
}

std::vector<GradCase> unary_grad_cases() {
  std::vector<GradCase> cases;
  struct Row {
    OpId op;
    Fn fn;
    double lo, hi;
  };
  const std::vector<Row> rows = {
      {OpId::neg, unary_fn(neg), -2, 2},
      {OpId::exp, unary_fn(exp), -2, 2},
      {OpId::log, unary_fn(log), 0.2, 3},
      {OpId::sqrt, unary_fn(sqrt), 0.2, 3},
      {OpId::rsqrt, unary_fn(rsqrt), 0.2, 3},
      {OpId::tanh, unary_fn(tanh), -2, 2},
      {OpId::sigmoid, unary_fn(sigmoid), -3, 3},
      {OpId::silu, unary_fn(silu), -3, 3},
      {OpId::gelu, [](const TensorList& x) { return TensorList{gelu(x[0])}; }, -3, 3},
      {OpId::pow_scalar, [](const TensorList& x) { return TensorList{pow(x[0], 2.5)}; }, 0.2, 2},
  };
  for (const Row& r : rows) {
    cases.push_back(contiguous_case(r.op, r.fn, r.lo, r.hi));
    cases.push_back(strided_case(r.op, r.fn, r.lo, r.hi));
    cases.push_back(scalar_case(r.op, r.fn, r.lo, r.hi));
  }
  cases.push_back({OpId::gelu, "tanh form, non-contiguous",
                   [] { return TensorList{non_contiguous(uniform_input({4, 5}, -3, 3, true, 4))}; },
                   [](const TensorList& x) { return TensorList{gelu(x[0], "tanh")}; }});
  for (double e : {0.0, 1.0, 2.0, 3.0, 0.5, -0.5, -1.0, -2.0, -1.3}) {
    cases.push_back({OpId::pow_scalar, "exponent " + std::to_string(e),
                     [] { return TensorList{uniform_input({3, 4}, 0.3, 2, true, 5)}; },
                     [e](const TensorList& x) { return TensorList{pow(x[0], e)}; }});
  }
  cases.push_back({OpId::pow_scalar, "integer exponent, negative base", [] { return TensorList{away_from_zero({3, 4}, 6)}; },
                   [](const TensorList& x) { return TensorList{pow(x[0], 3)}; }});
  const Fn leaky = [](const TensorList& x) { return TensorList{leaky_relu(x[0], 0.2)}; };
  cases.push_back({OpId::leaky_relu, "mixed signs", [] { return TensorList{away_from_zero({3, 4}, 7)}; }, leaky});
  cases.push_back({OpId::leaky_relu, "non-contiguous, slope above 1",
                   [] { return TensorList{non_contiguous(away_from_zero({4, 5}, 8))}; },
                   [](const TensorList& x) { return TensorList{leaky_relu(x[0], 1.5)}; }});
  for (OpId op : {OpId::abs, OpId::relu}) {
    Fn fn = unary_fn(op == OpId::abs ? static_cast<Tensor (*)(const Tensor&)>(abs) : relu);
    cases.push_back({op, "mixed signs", [] { return TensorList{away_from_zero({3, 4}, 1)}; }, fn});
    cases.push_back({op, "non-contiguous", [] { return TensorList{non_contiguous(away_from_zero({4, 5}, 2))}; }, fn});
    cases.push_back({op, "0-d", [] { return TensorList{away_from_zero({}, 3)}; }, fn});
  }
  return cases;
}

const bool kUnaryCases = register_grad_cases(unary_grad_cases());

}  // namespace

TEST_CASE("gelu tanh backward in f32 keeps its tolerance where tanh saturates", "[ops][unary]") {
  // 1 - t·t and 1 + t cancelled for |x| > 2: up to 3.5x the f32 tolerance over [-8, 8] (found
  // when the -O1 sanitizer build failed the test above by 1.04x). Dense sampling over [-8, 8].
  Tensor x = arange(-8.0, 8.0, 1.0 / 1024, {.dtype = DType::f64});
  Tensor g = ones_like(x);
  Tensor lo = gelu_backward(g.to(DType::f32), x.to(DType::f32), "tanh");
  PRECIS_REQUIRE_CLOSE(lo, gelu_backward(g, x.to(DType::f32).to(DType::f64), "tanh"), DType::f32);
}
