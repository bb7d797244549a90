// batch_norm, layer_norm, group_norm: forward against naive f64 references (training and eval,
// affine or not, running-statistics updates), stability with a large mean, mixed-dtype
// parameters, f16/bf16, the fused backward kernels in f32 against f64, bad inputs, and the
// gradient-check cases.
#include <algorithm>
#include <atomic>
#include <cmath>

#include "core/thread_pool.h"
#include "ops/cpu/vec_exp.h"
#include "ops/functional.h"
#include "tests/support/op_cases.h"
#include "tests/support/tensor_testing.h"

using namespace precis;
using namespace precis::testing;

namespace {

std::vector<double> values(const Tensor& t) { return t.defined() ? t.to_vector<double>() : std::vector<double>{}; }

// Normalises x seen as (outer, C, inner) blocks: statistics per (block of `stat_of` index) over
// the elements for which stat_of returns the same index; then y = (x − mean)·rstd·w[p] + b[p]
// with p = param_of(element). Biased variance. Returns y and the per-statistic mean and variance.
struct NormRef {
  std::vector<double> y, mean, var;
};
template <typename StatOf, typename ParamOf>
NormRef reference_norm(const std::vector<double>& x, int64_t num_stats, StatOf stat_of, ParamOf param_of,
                       const std::vector<double>& w, const std::vector<double>& b, double eps) {
  NormRef r;
  r.mean.assign(num_stats, 0);
  r.var.assign(num_stats, 0);
  std::vector<double> count(num_stats, 0);
  for (size_t i = 0; i < x.size(); ++i) {
    r.mean[stat_of(i)] += x[i];
    count[stat_of(i)] += 1;
  }
  for (int64_t s = 0; s < num_stats; ++s) r.mean[s] /= count[s];
  for (size_t i = 0; i < x.size(); ++i) r.var[stat_of(i)] += (x[i] - r.mean[stat_of(i)]) * (x[i] - r.mean[stat_of(i)]);
  for (int64_t s = 0; s < num_stats; ++s) r.var[s] /= count[s];
  r.y.resize(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const int64_t s = stat_of(i), p = param_of(i);
    double v = (x[i] - r.mean[s]) / std::sqrt(r.var[s] + eps);
    if (!w.empty()) v *= w[p];
    if (!b.empty()) v += b[p];
    r.y[i] = v;
  }
  return r;
}

int64_t spatial(const Shape& s) {
  int64_t p = 1;
  for (size_t d = 2; d < s.size(); ++d) p *= s[d];
  return p;
}

Tensor as_tensor(const std::vector<double>& v, const Shape& s) { return from_vector<double>(v, s); }

}  // namespace

TEST_CASE("batch_norm training matches a f64 reference and updates the running statistics", "[ops][norm]") {
  // Channels walked in blocks (rows shorter than 256 elements; (300, 2, 4, 4) folds its fp32 sums
  // into f64 after 256 rows) and one channel in windows of 256 columns ((2, 3, 600)).
  const std::vector<Shape> shapes = {{4, 3},        {2, 3, 5},       {3, 4, 2, 3}, {2, 2, 2, 2, 3},
                                     {5, 2, 1, 1},  {16, 8, 9, 7},   {300, 2, 4, 4}, {2, 3, 600}};
  for (const Shape& shape : shapes) {
    for (bool affine : {true, false}) {
      for (DType dt : {DType::f64, DType::f32}) {
        const int64_t C = shape[1], S = spatial(shape), M = shape[0] * S;
        Tensor x = randn_input(shape, false, 1, DType::f64);
        Tensor w = affine ? uniform_input({C}, 0.5, 1.5, false, 2) : Tensor();
        Tensor b = affine ? randn_input({C}, false, 3) : Tensor();
        Tensor rm = randn_input({C}, false, 4, dt), rv = uniform_input({C}, 0.5, 2, false, 5, dt);
        const std::vector<double> rm0 = values(rm), rv0 = values(rv);
        const double momentum = 0.3;
        Tensor y = batch_norm(x.to(dt), rm, rv, affine ? w.to(dt) : w, affine ? b.to(dt) : b, true, momentum, 1e-5);
        NormRef ref = reference_norm(
            values(x), C, [&](size_t i) { return static_cast<int64_t>(i / S) % C; },
            [&](size_t i) { return static_cast<int64_t>(i / S) % C; }, values(w), values(b), 1e-5);
        INFO(shape_str(shape) << (affine ? " affine " : " ") << dtype_name(dt));
        REQUIRE(y.dtype() == dt);
        REQUIRE(y.sizes() == shape);
        PRECIS_REQUIRE_CLOSE(y, as_tensor(ref.y, shape), dt);
        std::vector<double> rm1(C), rv1(C);
        for (int64_t c = 0; c < C; ++c) {
          rm1[c] = (1 - momentum) * rm0[c] + momentum * ref.mean[c];
          rv1[c] = (1 - momentum) * rv0[c] + momentum * ref.var[c] * M / (M - 1);  // unbiased
        }
        PRECIS_REQUIRE_CLOSE(rm, as_tensor(rm1, {C}), dt);
        PRECIS_REQUIRE_CLOSE(rv, as_tensor(rv1, {C}), dt);
      }
    }
  }
}

TEST_CASE("batch_norm running statistics: optional, bumped, and in any layout and dtype", "[ops][norm]") {
  Tensor x = randn_input({6, 3, 4}, false, 1, DType::f32);
  // Undefined running statistics: batch statistics, nothing updated.
  Tensor y = batch_norm(x, Tensor(), Tensor(), Tensor(), Tensor(), true);
  NormRef ref = reference_norm(
      values(x), 3, [](size_t i) { return static_cast<int64_t>(i / 4) % 3; },
      [](size_t i) { return static_cast<int64_t>(i / 4) % 3; }, {}, {}, 1e-5);
  PRECIS_REQUIRE_CLOSE(y, as_tensor(ref.y, {6, 3, 4}), DType::f32);
  // The in-place update bumps the buffers' versions.
  Tensor rm = zeros({3}), rv = ones({3});
  const uint32_t v0 = rm.version();
  batch_norm(x, rm, rv, Tensor(), Tensor(), true);
  REQUIRE(rm.version() > v0);
  // A strided f64 running mean with an f32 input is updated through a copy.
  Tensor wide = zeros({6}, {.dtype = DType::f64});
  Tensor rm_strided = wide.slice(0, 0, 6, 2);
  Tensor rv64 = ones({3}, {.dtype = DType::f64});
  batch_norm(x, rm_strided, rv64, Tensor(), Tensor(), true, 1.0);
  const std::vector<double> got = values(rm_strided);
  for (int64_t c = 0; c < 3; ++c) CHECK(std::abs(got[c] - ref.mean[c]) < 1e-6);
  CHECK(values(wide)[1] == 0.0);  // the gaps are untouched
  // Eval mode: normalises with the running statistics and leaves them alone.
  Tensor erm = from_vector<double>({0.5, -1, 2}, {3}).to(DType::f32), erv = from_vector<double>({1, 4, 0.25}, {3}).to(DType::f32);
  Tensor w = from_vector<double>({1, 2, 3}, {3}).to(DType::f32), b = from_vector<double>({0, 1, -1}, {3}).to(DType::f32);
  Tensor ye = batch_norm(x, erm, erv, w, b, false);
  std::vector<double> xe = values(x), expect(xe.size());
  const double m[3] = {0.5, -1, 2}, v[3] = {1, 4, 0.25}, wv[3] = {1, 2, 3}, bv[3] = {0, 1, -1};
  for (size_t i = 0; i < xe.size(); ++i) {
    const int64_t c = static_cast<int64_t>(i / 4) % 3;
    expect[i] = (xe[i] - m[c]) / std::sqrt(v[c] + 1e-5) * wv[c] + bv[c];
  }
  PRECIS_REQUIRE_CLOSE(ye, as_tensor(expect, {6, 3, 4}), DType::f32);
  REQUIRE(values(erm) == std::vector<double>{0.5, -1, 2});
}

TEST_CASE("normalisation is stable for data with a large mean", "[ops][norm]") {
  // 1e4 + N(0, 1) in f32: a naive E[x²] − E[x]² in fp32 would lose every digit of the variance.
  Tensor x = add(randn_input({32, 4, 8, 8}, false, 9, DType::f64), 1e4).to(DType::f32);
  const std::vector<double> xv = values(x);  // the f32 values, exactly
  NormRef bn = reference_norm(
      xv, 4, [](size_t i) { return static_cast<int64_t>(i / 64) % 4; },
      [](size_t i) { return static_cast<int64_t>(i / 64) % 4; }, {}, {}, 1e-5);
  // The output of a normalisation inherits the input's own rounding (~1e4·2^-24 / σ ≈ 6e-4
  // absolute); a precision loss in the statistics would show as errors of order 1.
  const Tolerance tol{1e-3, 2e-3};
  INFO(allclose_report(batch_norm(x, Tensor(), Tensor(), Tensor(), Tensor(), true), as_tensor(bn.y, x.sizes()), tol));
  CHECK(allclose(batch_norm(x, Tensor(), Tensor(), Tensor(), Tensor(), true), as_tensor(bn.y, x.sizes()), tol));
  NormRef ln = reference_norm(
      xv, 32 * 4, [](size_t i) { return static_cast<int64_t>(i / 64); }, [](size_t i) { return int64_t(0); }, {}, {},
      1e-5);
  CHECK(allclose(layer_norm(x, {8, 8}), as_tensor(ln.y, x.sizes()), tol));
  NormRef gn = reference_norm(
      xv, 32 * 2, [](size_t i) { return static_cast<int64_t>(i / 128); }, [](size_t i) { return int64_t(0); }, {}, {},
      1e-5);
  CHECK(allclose(group_norm(x, 2), as_tensor(gn.y, x.sizes()), tol));
}

TEST_CASE("layer_norm matches a f64 reference over trailing dims", "[ops][norm]") {
  struct Case {
    Shape shape, normalized;
  };
  const std::vector<Case> cases = {{{4, 6}, {6}}, {{2, 3, 5}, {5}}, {{2, 3, 5}, {3, 5}}, {{7}, {7}},
                                   {{64, 256}, {256}}, {{3, 2, 1000}, {1000}}};
  for (const Case& c : cases) {
    for (bool affine : {true, false}) {
      for (DType dt : {DType::f64, DType::f32}) {
        int64_t D = 1;
        for (int64_t s : c.normalized) D *= s;
        Tensor x = randn_input(c.shape, false, 1, DType::f64);
        Tensor w = affine ? uniform_input(c.normalized, 0.5, 1.5, false, 2) : Tensor();
        Tensor b = affine ? randn_input(c.normalized, false, 3) : Tensor();
        Tensor y = layer_norm(x.to(dt), c.normalized, affine ? w.to(dt) : w, affine ? b.to(dt) : b);
        NormRef ref = reference_norm(
            values(x), x.numel() / D, [&](size_t i) { return static_cast<int64_t>(i) / D; },
            [&](size_t i) { return static_cast<int64_t>(i) % D; }, values(w), values(b), 1e-5);
        INFO(shape_str(c.shape) << " over " << shape_str(c.normalized) << (affine ? " affine " : " ") << dtype_name(dt));
        PRECIS_REQUIRE_CLOSE(y, as_tensor(ref.y, c.shape), dt);
      }
    }
  }
}

// fp32 layer_norm rows of a multiple of 16 elements take the row-group walk (ops/cpu/norm.cpp): 4
// rows at a time, then the rows left one by one, on 16-lane vectors; with AVX-512 in one register,
// else (or with the AVX-512 paths switched off) in two AVX2 ones. Both walks against the f64 run:
// row counts that leave every group tail, the shortest and longest rows the walk takes, every
// affine combination, and a backward for the parameters alone (x not requiring grad), at 1 and 2
// threads.
TEST_CASE("layer_norm fp32 row groups: the AVX-512 and AVX2 walks match the f64 run", "[ops][norm]") {
  std::atomic<bool>& avx512 = cpu::vec_detail::avx512_switch();
  const bool has_avx512 = avx512.load();
  if (!has_avx512) WARN("this CPU has no AVX-512F: only the AVX2 walk runs here");
  struct Restore {
    std::atomic<bool>& flag;
    bool was;
    int threads;
    ~Restore() {
      flag = was;
      set_num_threads(threads);
    }
  } restore{avx512, has_avx512, get_num_threads()};
  struct Case {
    int64_t rows, D;
  };
  for (bool wide : {true, false}) {
    if (wide && !has_avx512) continue;
    avx512 = wide;
    for (int threads : {1, 2}) {
      set_num_threads(threads);
      for (const Case& c : {Case{1, 16}, Case{3, 48}, Case{9, 256}, Case{130, 256}, Case{5, 4096}})
        for (int affine = 0; affine < 4; ++affine)
          for (bool x_grad : {true, false}) {
            const bool has_w = affine & 1, has_b = affine & 2;
            INFO((wide ? "AVX-512" : "AVX2") << ", " << c.rows << "x" << c.D << (has_w ? " weight" : "")
                                             << (has_b ? " bias" : "") << (x_grad ? "" : ", x without grad") << ", "
                                             << threads << " threads");
            const Tensor x = randn_input({c.rows, c.D}, false, 31, DType::f64);
            const Tensor up = randn_input({c.rows, c.D}, false, 32, DType::f64);
            const Tensor w = uniform_input({c.D}, 0.5, 1.5, false, 33, DType::f64);
            const Tensor b = randn_input({c.D}, false, 34, DType::f64);
            // Forward and the defined gradients, in dt, as f64 values.
            auto run = [&](DType dt) {
              Tensor xd = x.to(dt).detach(), wd = has_w ? w.to(dt).detach() : Tensor();
              Tensor bd = has_b ? b.to(dt).detach() : Tensor();
              xd.requires_grad_(x_grad);
              if (has_w) wd.requires_grad_(true);
              if (has_b) bd.requires_grad_(true);
              std::vector<Tensor> out{layer_norm(xd, {c.D}, wd, bd)};
              if (x_grad || has_w || has_b) {
                out[0].backward(up.to(dt));
                for (const Tensor& t : {xd, wd, bd})
                  if (t.defined() && t.requires_grad()) out.push_back(t.grad());
              }
              for (Tensor& t : out) t = t.detach().to(DType::f64);
              return out;
            };
            const std::vector<Tensor> got = run(DType::f32), want = run(DType::f64);
            REQUIRE(got.size() == want.size());
            for (size_t k = 0; k < got.size(); ++k) {
              INFO((k == 0 ? std::string("forward") : "gradient " + std::to_string(k)));
              // Parameter gradients sum `rows` products: their error grows with the row count.
              const Tolerance tol{2e-5, 2e-5 * std::sqrt(static_cast<double>(c.rows))};
              const std::string report = allclose_report(got[k], want[k], tol);
              INFO(report);
              CHECK(report.empty());
            }
          }
    }
  }
}

TEST_CASE("group_norm matches a f64 reference", "[ops][norm]") {
  struct Case {
    Shape shape;
    int64_t groups;
  };
  const std::vector<Case> cases = {{{2, 4, 3}, 2}, {{2, 6, 2, 3}, 3}, {{3, 4}, 4}, {{2, 6, 5}, 1}, {{4, 32, 8, 8}, 8}};
  for (const Case& c : cases) {
    for (bool affine : {true, false}) {
      for (DType dt : {DType::f64, DType::f32}) {
        const int64_t C = c.shape[1], S = spatial(c.shape), L = C / c.groups * S;
        Tensor x = randn_input(c.shape, false, 1, DType::f64);
        Tensor w = affine ? uniform_input({C}, 0.5, 1.5, false, 2) : Tensor();
        Tensor b = affine ? randn_input({C}, false, 3) : Tensor();
        Tensor y = group_norm(x.to(dt), c.groups, affine ? w.to(dt) : w, affine ? b.to(dt) : b);
        NormRef ref = reference_norm(
            values(x), x.numel() / L, [&](size_t i) { return static_cast<int64_t>(i) / L; },
            [&](size_t i) { return static_cast<int64_t>(i / S) % C; }, values(w), values(b), 1e-5);
        INFO(shape_str(c.shape) << " groups " << c.groups << (affine ? " affine " : " ") << dtype_name(dt));
        PRECIS_REQUIRE_CLOSE(y, as_tensor(ref.y, c.shape), dt);
      }
    }
  }
}

TEST_CASE("normalisation of f16/bf16 inputs computes in fp32, with fp32 parameters allowed", "[ops][norm]") {
  for (DType low : {DType::f16, DType::bf16}) {
    Tensor x = randn_input({8, 4, 5}, false, 1, DType::f64).to(low);
    const std::vector<double> xv = values(x);
    Tensor w = uniform_input({4}, 0.5, 1.5, false, 2, DType::f32), b = randn_input({4}, false, 3, DType::f32);
    Tensor rm = zeros({4}), rv = ones({4});  // fp32 buffers, as a BatchNorm in a bf16 model keeps them
    Tensor y = batch_norm(x, rm, rv, w, b, true);
    REQUIRE(y.dtype() == low);
    REQUIRE(rm.dtype() == DType::f32);
    NormRef bn = reference_norm(
        xv, 4, [](size_t i) { return static_cast<int64_t>(i / 5) % 4; },
        [](size_t i) { return static_cast<int64_t>(i / 5) % 4; }, values(w), values(b), 1e-5);
    INFO(dtype_name(low));
    PRECIS_REQUIRE_CLOSE(y, as_tensor(bn.y, x.sizes()), low);
    for (int64_t c = 0; c < 4; ++c) CHECK(std::abs(values(rm)[c] - 0.1 * bn.mean[c]) < 1e-6);
    Tensor w5 = uniform_input({5}, 0.5, 1.5, false, 4, low);
    NormRef ln = reference_norm(
        xv, 32, [](size_t i) { return static_cast<int64_t>(i / 5); }, [](size_t i) { return static_cast<int64_t>(i % 5); },
        values(w5), {}, 1e-5);
    PRECIS_REQUIRE_CLOSE(layer_norm(x, {5}, w5), as_tensor(ln.y, x.sizes()), low);
    NormRef gn = reference_norm(
        xv, 16, [](size_t i) { return static_cast<int64_t>(i / 10); },
        [](size_t i) { return static_cast<int64_t>(i / 5) % 4; }, values(w), {}, 1e-5);
    PRECIS_REQUIRE_CLOSE(group_norm(x, 2, w), as_tensor(gn.y, x.sizes()), low);
  }
}

namespace {

// Gradients of fn(x, w, b) weighted by a fixed upstream gradient: {dx, dw, db} as f64.
template <typename Fn>
std::vector<Tensor> grads_of(Fn fn, const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& up, DType dt) {
  Tensor xd = x.detach().to(dt), wd = w.detach(), bd = b.detach();
  xd.requires_grad_(true);
  wd.requires_grad_(true);
  bd.requires_grad_(true);
  Tensor y = fn(xd, wd, bd);
  y.backward(up.to(dt));
  return {xd.grad().to(DType::f64), wd.grad().to(DType::f64), bd.grad().to(DType::f64)};
}

}  // namespace

TEST_CASE("normalisation backward kernels in f32 and bf16 agree with f64", "[ops][norm]") {
  struct Case {
    const char* name;
    Shape shape, param;
    std::function<Tensor(const Tensor&, const Tensor&, const Tensor&)> fn;
  };
  const std::vector<Case> cases = {
      {"batch_norm training", {16, 8, 6, 5}, {8},
       [](const Tensor& x, const Tensor& w, const Tensor& b) { return batch_norm(x, Tensor(), Tensor(), w, b, true); }},
      {"batch_norm training, long rows", {3, 2, 700}, {2},
       [](const Tensor& x, const Tensor& w, const Tensor& b) { return batch_norm(x, Tensor(), Tensor(), w, b, true); }},
      {"batch_norm eval", {4, 3, 7}, {3},
       [](const Tensor& x, const Tensor& w, const Tensor& b) {
         return batch_norm(x, full({3}, 0.3), full({3}, 2.0), w, b, false);
       }},
      {"layer_norm", {300, 64}, {64},
       [](const Tensor& x, const Tensor& w, const Tensor& b) { return layer_norm(x, {64}, w, b); }},
      {"group_norm", {6, 8, 9}, {8},
       [](const Tensor& x, const Tensor& w, const Tensor& b) { return group_norm(x, 4, w, b); }},
  };
  for (const Case& c : cases) {
    Tensor x = randn_input(c.shape, false, 1, DType::f64);
    Tensor up = randn_input(c.shape, false, 2, DType::f64);
    Tensor w = uniform_input(c.param, 0.5, 1.5, false, 3, DType::f32), b = randn_input(c.param, false, 4, DType::f32);
    // The f64 run sees the same (f32-representable) parameters.
    const std::vector<Tensor> ref = grads_of(c.fn, x, w.to(DType::f64), b.to(DType::f64), up, DType::f64);
    for (DType dt : {DType::f32, DType::bf16}) {
      const std::vector<Tensor> got = grads_of(c.fn, x.to(dt).to(DType::f64), w, b, up, dt);
      const std::vector<Tensor> want =
          dt == DType::f32 ? ref
                           : grads_of(c.fn, x.to(dt).to(DType::f64), w.to(DType::f64), b.to(DType::f64),
                                      up.to(dt).to(DType::f64), DType::f64);
      for (int k = 0; k < 3; ++k) {
        // Parameter gradients are sums over many elements: compare relative to their scale.
        Tolerance tol = tolerance(dt);
        if (dt == DType::f32) tol = {2e-5, 2e-5};
        else tol.atol = 5e-2;
        INFO(c.name << " " << dtype_name(dt) << " gradient " << k);
        const std::string report = allclose_report(got[k], want[k], tol);
        INFO(report);
        CHECK(report.empty());
      }
    }
  }
}

// A channels-last (NHWC in memory) copy of a 4-D tensor, differentiable.
Tensor to_channels_last(const Tensor& t) { return t.permute({0, 2, 3, 1}).contiguous().permute({0, 3, 1, 2}); }
bool is_channels_last(const Tensor& t) {
  return !t.is_contiguous() && t.permute({0, 2, 3, 1}).is_contiguous();
}

TEST_CASE("group_norm of a channels-last input equals the contiguous one's, and stays channels-last",
          "[ops][norm]") {
  // Its kernels take contiguous (N, C, S) only; a channels-last input used to reach them as
  // strided rows and came out wrong (3.5 off at this size, dx too).
  const Tensor x = randn_input({2, 6, 3, 5}, false, 21, DType::f64);
  const Tensor up = randn_input({2, 6, 3, 5}, false, 22, DType::f64);
  const Tensor w = uniform_input({6}, 0.5, 1.5, false, 23, DType::f64), b = randn_input({6}, false, 24, DType::f64);
  for (DType dt : {DType::f64, DType::f32, DType::bf16}) {
    INFO(dtype_name(dt));
    auto run = [&](bool cl) {
      const Tensor xi = x.to(dt).detach().requires_grad_(), wi = w.to(dt).detach().requires_grad_(),
                   bi = b.to(dt).detach().requires_grad_();
      const Tensor y = group_norm(cl ? to_channels_last(xi) : xi, 3, wi, bi);
      if (cl) CHECK(is_channels_last(y));
      sum(mul(y, up.to(dt))).backward();
      return std::vector<Tensor>{y.contiguous(), xi.grad(), wi.grad(), bi.grad()};
    };
    const std::vector<Tensor> plain = run(false), cl = run(true);
    for (size_t k = 0; k < plain.size(); ++k) {
      INFO("output " << k << " (y, dx, dw, db)");
      PRECIS_REQUIRE_SAME_BITS(cl[k], plain[k]);
    }
  }
}

// batch_norm on one layout computes the values of the other: the forward against the naive f64
// reference, the gradients against the other layout's f64 run (the contiguous one is itself
// checked against finite differences); a channels-last input stays channels-last (output and
// input gradient). One shape in training or eval mode, every floating dtype.
void check_batch_norm_layout(const Shape& shape, bool training, bool channels_last) {
  const int64_t C = shape[1], S = spatial(shape);
  const Tensor x = randn_input(shape, false, 11, DType::f64);
  const Tensor up = randn_input(shape, false, 12, DType::f64);
  const Tensor w = uniform_input({C}, 0.5, 1.5, false, 13, DType::f32), b = randn_input({C}, false, 14, DType::f32);
  const Tensor rm = randn_input({C}, false, 15, DType::f32), rv = uniform_input({C}, 0.5, 2.0, false, 16, DType::f32);
  auto fn = [&](bool cl) {
    return [=](const Tensor& xi, const Tensor& wi, const Tensor& bi) {
      // Running statistics: fresh copies per call, so every run starts from the same buffers.
      return batch_norm(cl ? to_channels_last(xi) : xi, rm.clone(), rv.clone(), wi, bi, training);
    };
  };
  for (DType dt : {DType::f64, DType::f32, DType::bf16, DType::f16}) {
    INFO(shape_str(shape) << " " << dtype_name(dt) << (training ? " training" : " eval"));
    const Tensor xr = x.to(dt).to(DType::f64), upr = up.to(dt).to(DType::f64);
    // The forward against the naive reference on the rounded input.
    const Tensor xt = channels_last ? to_channels_last(xr.to(dt)) : xr.to(dt);
    const Tensor y = batch_norm(xt, rm.clone(), rv.clone(), w, b, training);
    if (channels_last) CHECK(is_channels_last(y));
    const std::vector<double> xv = values(xr.contiguous());
    std::vector<double> want_y;
    if (training) {
      want_y = reference_norm(xv, C, [&](size_t i) { return static_cast<int64_t>(i / S) % C; },
                              [&](size_t i) { return static_cast<int64_t>(i / S) % C; }, values(w), values(b), 1e-5)
                   .y;
    } else {
      const std::vector<double> m = values(rm), v = values(rv), wv = values(w), bv = values(b);
      for (size_t i = 0; i < xv.size(); ++i) {
        const int64_t c = static_cast<int64_t>(i / S) % C;
        want_y.push_back((xv[i] - m[c]) / std::sqrt(v[c] + 1e-5) * wv[c] + bv[c]);
      }
    }
    Tolerance tol = tolerance(dt);
    if (dt == DType::f32) tol = {2e-5, 2e-5};
    const std::string fwd = allclose_report(y.to(DType::f64).contiguous(), as_tensor(want_y, shape), tol);
    INFO("forward: " << fwd);
    CHECK(fwd.empty());
    // The gradients against the other layout's f64 run on the same rounded values.
    // f64 runs get f64 parameters (their gradients come back in the parameters' dtype).
    const bool f64 = dt == DType::f64;
    const std::vector<Tensor> got =
        grads_of(fn(channels_last), xr, f64 ? w.to(DType::f64) : w, f64 ? b.to(DType::f64) : b, upr, dt);
    const std::vector<Tensor> want =
        grads_of(fn(!channels_last), xr, w.to(DType::f64), b.to(DType::f64), upr, DType::f64);
    for (int k = 0; k < 3; ++k) {
      Tolerance gt = tolerance(dt);
      if (dt == DType::f32) gt = {2e-5, 2e-5};
      else if (dt != DType::f64) gt.atol = 5e-2;
      // The weight and bias gradients sum N·H·W products of random sign that cancel to O(1); the
      // kernel's fp32 block sums (256 rows each, folded in f64) each add an error of about 2e-5,
      // which grows as the square root of the block count (the TSan build's unvectorised code
      // missed 2e-5 by 1.19x at 12500 rows, 49 blocks).
      if (dt == DType::f32 && k > 0)
        gt.atol *= std::max(1.0, std::sqrt(static_cast<double>(shape[0] * S) / 256.0));
      INFO("gradient " << k);
      const std::string report = allclose_report(got[k], want[k], gt);
      INFO(report);
      CHECK(report.empty());
    }
  }
  if (!channels_last) return;
  // The input gradient of a channels-last leaf is channels-last.
  // (A leaf's .grad is stored contiguous: the hook sees the gradient batch_norm sends.)
  Tensor leaf = to_channels_last(x.to(DType::f32)).detach().requires_grad_(true);
  bool grad_channels_last = false;
  leaf.register_hook([&](const Tensor& gx) {
    grad_channels_last = is_channels_last(gx);
    return Tensor();
  });
  batch_norm(leaf, Tensor(), Tensor(), w, b, true).backward(to_channels_last(up.to(DType::f32)));
  if (S > 1) CHECK(grad_channels_last);
}

TEST_CASE("batch_norm on channels-last input: layout kept, values as the f64 reference", "[ops][norm]") {
  for (const Shape& shape : {Shape{8, 16, 5, 3}, Shape{3, 33, 4, 4}, Shape{2, 3, 1, 7}, Shape{600, 2, 1, 2}})
    for (bool training : {true, false}) check_batch_norm_layout(shape, training, true);
}

// The channels-last kernels (ops/cpu/norm.cpp) walk channels in chunks of 4 vectors, then single
// vectors, then scalars, over slabs of rows, with one row block per thread: channel counts that
// leave every kind of tail (3, 17 = 2·8 + 1, 64, 130 = 4·32 + 2), row counts past a 256-row fold
// and a slab tail, and 1 and 2 threads (the tensors are large enough to be split in two). A wrong
// vector path fails the f32 forward against the f64 reference at 2e-5.
TEST_CASE("batch_norm channels-last: channel and row tails at 1 and 2 threads", "[ops][norm]") {
  const int saved = get_num_threads();
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    for (const Shape& shape : {Shape{5, 3, 50, 50}, Shape{2, 17, 33, 33}, Shape{3, 64, 13, 15}, Shape{2, 130, 12, 12}})
      for (bool training : {true, false}) {
        INFO(threads << " threads");
        check_batch_norm_layout(shape, training, true);
      }
  }
  set_num_threads(saved);
}

// The NCHW kernels (ops/cpu/norm.cpp) walk blocks of whole channels as columns when a channel's
// rows are shorter than 256 elements (16 channels of 4×4 at a time, then a block of 2 at 130
// channels), and one channel in windows of 256 columns otherwise (17×19 = 256 + 67; 32×32 = four
// windows), over rows folded every 256 (N = 300): against the f64 reference and the channels-last
// f64 gradients (another walk over another memory order), and the same bits at 1 and 2 threads.
TEST_CASE("batch_norm NCHW: channel blocks, column windows and row folds, at 1 and 2 threads", "[ops][norm]") {
  const int saved = get_num_threads();
  for (const Shape& shape : {Shape{2, 130, 4, 4}, Shape{3, 9, 17, 19}, Shape{2, 3, 32, 32}, Shape{300, 5, 2, 3}}) {
    const int64_t C = shape[1];
    const Tensor x = randn_input(shape, false, 31, DType::f64), up = randn_input(shape, false, 32, DType::f64);
    const Tensor w = uniform_input({C}, 0.5, 1.5, false, 33, DType::f32), b = randn_input({C}, false, 34, DType::f32);
    for (bool training : {true, false}) {
      std::vector<std::vector<double>> runs[2];
      for (int threads : {1, 2}) {
        set_num_threads(threads);
        INFO(threads << " threads");
        check_batch_norm_layout(shape, training, false);
        auto fn = [&](const Tensor& xi, const Tensor& wi, const Tensor& bi) {
          return batch_norm(xi, full({C}, 0.1), full({C}, 1.5), wi, bi, training);
        };
        std::vector<std::vector<double>>& out = runs[threads - 1];
        out.push_back(values(fn(x.to(DType::f32), w, b)));
        for (const Tensor& g : grads_of(fn, x, w, b, up, DType::f32)) out.push_back(values(g));
      }
      INFO(shape_str(shape) << (training ? " training" : " eval"));
      CHECK(runs[0] == runs[1]);
    }
  }
  set_num_threads(saved);
}

// On a CPU with AVX-512 the channels-last walks run 16-lane chunks (ops/cpu/norm.cpp); with the
// AVX-512 paths switched off, the AVX2 walk of 8-lane chunks runs instead. Each channel's sums run
// in row order and each element's map is the same operations either way, so the two give the same
// bits: forward and backward, training and eval, f32 and bf16, at channel counts that leave every
// tail of either walk (7; 24 = 16 + 8; 64, one AVX-512 chunk; 136 = 128 + 8; 200) and at 1 and 2 threads.
TEST_CASE("batch_norm channels-last: the AVX-512 and AVX2 walks give the same bits", "[ops][norm]") {
  std::atomic<bool>& avx512 = cpu::vec_detail::avx512_switch();
  if (!avx512.load()) {
    WARN("this CPU has no AVX-512F: only the AVX2 walk runs here, so the two walks' bits are not compared");
    return;
  }
  struct Restore {
    std::atomic<bool>& flag;
    int threads;
    ~Restore() {
      flag = true;
      set_num_threads(threads);
    }
  } restore{avx512, get_num_threads()};
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    for (const Shape& shape : {Shape{3, 7, 9, 9}, Shape{4, 24, 10, 11}, Shape{2, 64, 17, 17}, Shape{2, 136, 9, 9},
                               Shape{3, 200, 5, 6}}) {
      const int64_t C = shape[1];
      const Tensor x = randn_input(shape, false, 21, DType::f64), up = randn_input(shape, false, 22, DType::f64);
      const Tensor w = uniform_input({C}, 0.5, 1.5, false, 23, DType::f32), b = randn_input({C}, false, 24, DType::f32);
      const Tensor rm = randn_input({C}, false, 25, DType::f32), rv = uniform_input({C}, 0.5, 2.0, false, 26, DType::f32);
      for (DType dt : {DType::f32, DType::bf16})
        for (bool training : {true, false}) {
          INFO(shape_str(shape) << " " << dtype_name(dt) << (training ? " training" : " eval") << ", " << threads
                                << " threads");
          auto fn = [&](const Tensor& xi, const Tensor& wi, const Tensor& bi) {
            return batch_norm(to_channels_last(xi), rm.clone(), rv.clone(), wi, bi, training);
          };
          auto run = [&] {
            std::vector<std::vector<double>> out{values(fn(x.to(dt), w, b).to(DType::f64).contiguous())};
            for (const Tensor& g : grads_of(fn, x, w, b, up, dt)) out.push_back(values(g.contiguous()));
            return out;
          };
          avx512 = true;
          const std::vector<std::vector<double>> wide = run();
          avx512 = false;
          const std::vector<std::vector<double>> narrow = run();
          for (size_t k = 0; k < wide.size(); ++k) {
            INFO((k == 0 ? "forward" : "gradient " + std::to_string(k - 1)));
            CHECK(wide[k] == narrow[k]);
          }
        }
    }
  }
}

TEST_CASE("batch_norm rejects bad channels-last input, naming the operands", "[ops][norm]") {
  const Tensor x = to_channels_last(zeros({2, 4, 3, 3}));
  REQUIRE(is_channels_last(x));
  PRECIS_REQUIRE_THROWS_WITH_ALL(batch_norm(x, Tensor(), Tensor(), ones({3}), Tensor(), true), ShapeError,
                                 "batch_norm", "weight", "[3]", "[2, 4, 3, 3]");
  PRECIS_REQUIRE_THROWS_WITH_ALL(batch_norm(x, zeros({5}), ones({5}), Tensor(), Tensor(), false), ShapeError,
                                 "batch_norm", "running_mean", "[5]");
  PRECIS_REQUIRE_THROWS_WITH_ALL(batch_norm(x, Tensor(), Tensor(), Tensor(), Tensor(), false), Error, "batch_norm",
                                 "eval mode");
}

TEST_CASE("normalisation rejects bad input, naming the operands", "[ops][norm]") {
  Tensor x = zeros({2, 4, 5});
  Tensor c3 = zeros({3}), c4 = zeros({4}), o4 = ones({4});
  PRECIS_REQUIRE_THROWS_WITH_ALL(batch_norm(x, c4, o4, c3, c4, true), ShapeError, "batch_norm", "weight",
                                 "[3] f32 cpu", "[2, 4, 5] f32 cpu", "[4]");
  PRECIS_REQUIRE_THROWS_WITH_ALL(batch_norm(x, c3, o4, c4, c4, true), ShapeError, "batch_norm", "running_mean",
                                 "[3] f32 cpu", "[2, 4, 5] f32 cpu");
  PRECIS_REQUIRE_THROWS_WITH_ALL(batch_norm(x, c4, ones({5}), Tensor(), Tensor(), false), ShapeError, "running_var",
                                 "[5] f32 cpu");
  PRECIS_REQUIRE_THROWS_WITH_ALL(batch_norm(x, c4, o4, Tensor(), zeros({4, 1}), true), ShapeError, "bias", "[4, 1]");
  PRECIS_REQUIRE_THROWS_WITH_ALL(batch_norm(x, Tensor(), Tensor(), Tensor(), Tensor(), false), ValueError,
                                 "batch_norm", "eval", "running_mean");
  PRECIS_REQUIRE_THROWS_WITH_ALL(batch_norm(zeros({1, 4}), Tensor(), Tensor(), Tensor(), Tensor(), true), ValueError,
                                 "batch_norm", "more than 1 value per channel", "[1, 4] f32 cpu");
  PRECIS_REQUIRE_THROWS_WITH_ALL(batch_norm(zeros({4}), Tensor(), Tensor(), Tensor(), Tensor(), true), ShapeError,
                                 "batch_norm", "at least 2 dims", "[4] f32 cpu");
  PRECIS_REQUIRE_THROWS_WITH_ALL(batch_norm(zeros({2, 4}, {.dtype = DType::i64}), c4, o4), DTypeError, "batch_norm",
                                 "i64");
  PRECIS_REQUIRE_THROWS_WITH_ALL(layer_norm(x, {4}), ShapeError, "layer_norm", "normalized_shape [4]",
                                 "[2, 4, 5] f32 cpu");
  PRECIS_REQUIRE_THROWS_WITH_ALL(layer_norm(x, {2, 4, 5, 1}), ShapeError, "layer_norm", "[2, 4, 5, 1]");
  PRECIS_REQUIRE_THROWS_WITH_ALL(layer_norm(x, {}), ShapeError, "layer_norm", "normalized_shape []");
  PRECIS_REQUIRE_THROWS_WITH_ALL(layer_norm(x, {4, 5}, zeros({5})), ShapeError, "layer_norm", "weight", "[5] f32 cpu",
                                 "[4, 5]");
  PRECIS_REQUIRE_THROWS_WITH_ALL(group_norm(x, 3), ValueError, "group_norm", "num_groups = 3", "C = 4",
                                 "[2, 4, 5] f32 cpu");
  PRECIS_REQUIRE_THROWS_WITH_ALL(group_norm(x, 0), ValueError, "group_norm", "num_groups = 0");
  PRECIS_REQUIRE_THROWS_WITH_ALL(group_norm(x, 2, c3), ShapeError, "group_norm", "weight", "[3] f32 cpu");
  PRECIS_REQUIRE_THROWS_WITH_ALL(batch_norm(x, c4, o4, zeros({4}, {.dtype = DType::i32}), Tensor(), true),
                                 DTypeError, "batch_norm", "weight", "i32");
}

namespace {

Tensor nc(const Tensor& t) { return non_contiguous(t); }

std::vector<GradCase> norm_grad_cases() {
  std::vector<GradCase> cases;
  auto xwb = [](Shape x, Shape p, bool noncontig = false) {
    return [x, p, noncontig] {
      Tensor xi = randn_input(x, true, 1);
      return TensorList{noncontig ? nc(xi) : xi, uniform_input(p, 0.5, 1.5, true, 2), randn_input(p, true, 3)};
    };
  };
  // batch_norm: running statistics are buffers made inside the case (updated on every call).
  cases.push_back({OpId::batch_norm, "training, affine, (4, 3, 5)", xwb({4, 3, 5}, {3}), [](const TensorList& t) {
                     return TensorList{batch_norm(t[0], zeros({3}, {.dtype = DType::f64}),
                                                  ones({3}, {.dtype = DType::f64}), t[1], t[2], true, 0.1, 1e-5)};
                   }});
  cases.push_back({OpId::batch_norm, "training, no affine, (5, 2, 2, 3)",
                   [] { return TensorList{randn_input({5, 2, 2, 3}, true, 4)}; },
                   [](const TensorList& t) {
                     return TensorList{batch_norm(t[0], Tensor(), Tensor(), Tensor(), Tensor(), true)};
                   }});
  cases.push_back({OpId::batch_norm, "training, affine, 2-D non-contiguous", xwb({6, 4}, {4}, true),
                   [](const TensorList& t) {
                     return TensorList{batch_norm(t[0], Tensor(), Tensor(), t[1], t[2], true)};
                   }});
  cases.push_back({OpId::batch_norm, "eval, affine, (3, 4, 5) non-contiguous", xwb({3, 4, 5}, {4}, true),
                   [](const TensorList& t) {
                     const Tensor rm = from_vector<double>({0.1, -0.2, 0.3, 0.0}, {4});
                     const Tensor rv = from_vector<double>({0.5, 1.0, 2.0, 1.5}, {4});
                     return TensorList{batch_norm(t[0], rm, rv, t[1], t[2], false)};
                   }});
  cases.push_back({OpId::batch_norm, "eval, no affine", [] { return TensorList{randn_input({3, 2, 4}, true, 5)}; },
                   [](const TensorList& t) {
                     return TensorList{batch_norm(t[0], from_vector<double>({0.2, -0.1}, {2}),
                                                  from_vector<double>({0.7, 1.3}, {2}), Tensor(), Tensor(), false)};
                   }});
  // batch_norm on channels-last input (the copy inside the case keeps the leaf an ordinary tensor).
  cases.push_back({OpId::batch_norm, "training, affine, channels-last (3, 4, 2, 3)", xwb({3, 4, 2, 3}, {4}),
                   [](const TensorList& t) {
                     const Tensor x = t[0].permute({0, 2, 3, 1}).contiguous().permute({0, 3, 1, 2});
                     return TensorList{batch_norm(x, zeros({4}, {.dtype = DType::f64}), ones({4}, {.dtype = DType::f64}),
                                                  t[1], t[2], true, 0.1, 1e-5)};
                   }});
  cases.push_back({OpId::batch_norm, "eval, affine, channels-last (2, 3, 3, 2)", xwb({2, 3, 3, 2}, {3}),
                   [](const TensorList& t) {
                     const Tensor x = t[0].permute({0, 2, 3, 1}).contiguous().permute({0, 3, 1, 2});
                     return TensorList{batch_norm(x, from_vector<double>({0.1, -0.2, 0.3}, {3}),
                                                  from_vector<double>({0.5, 1.0, 2.0}, {3}), t[1], t[2], false)};
                   }});
  // layer_norm
  cases.push_back({OpId::layer_norm, "affine, over [5]", xwb({3, 5}, {5}), [](const TensorList& t) {
                     return TensorList{layer_norm(t[0], {5}, t[1], t[2])};
                   }});
  cases.push_back({OpId::layer_norm, "affine, over [3, 4], non-contiguous", xwb({2, 3, 4}, {3, 4}, true),
                   [](const TensorList& t) { return TensorList{layer_norm(t[0], {3, 4}, t[1], t[2])}; }});
  cases.push_back({OpId::layer_norm, "no affine", [] { return TensorList{randn_input({4, 6}, true, 6)}; },
                   [](const TensorList& t) { return TensorList{layer_norm(t[0], {6})}; }});
  cases.push_back({OpId::layer_norm, "weight only", xwb({3, 4}, {4}), [](const TensorList& t) {
                     return TensorList{layer_norm(t[0], {4}, t[1], Tensor())};
                   }});
  // group_norm
  cases.push_back({OpId::group_norm, "affine, 2 groups of 2, (3, 4, 3)", xwb({3, 4, 3}, {4}),
                   [](const TensorList& t) { return TensorList{group_norm(t[0], 2, t[1], t[2])}; }});
  cases.push_back({OpId::group_norm, "affine, non-contiguous (2, 6, 2, 2), 3 groups", xwb({2, 6, 2, 2}, {6}, true),
                   [](const TensorList& t) { return TensorList{group_norm(t[0], 3, t[1], t[2])}; }});
  cases.push_back({OpId::group_norm, "no affine, 1 group", [] { return TensorList{randn_input({2, 3, 4}, true, 7)}; },
                   [](const TensorList& t) { return TensorList{group_norm(t[0], 1)}; }});
  return cases;
}

const bool kNormCases = register_grad_cases(norm_grad_cases());

}  // namespace

#include "amp/autocast.h"

// batch_norm is Passthrough (as PyTorch's CPU autocast): a bf16 activation stays bf16, with fp32
// statistics and fp32 affine parameters inside the kernel; layer_norm and group_norm are FP32.
TEST_CASE("normalisation under autocast, and running statistics stay the caller's buffers", "[ops][norm][amp]") {
  Tensor x = randn_input({4, 3, 5}, false, 1, DType::f32).to(DType::bf16);
  Tensor w = ones({3}), b = zeros({3}), rm = zeros({3}), rv = ones({3});
  amp::Autocast autocast(DType::bf16);
  Tensor y = batch_norm(x, rm, rv, w, b, true);
  CHECK(y.dtype() == DType::bf16);
  CHECK(rm.dtype() == DType::f32);
  CHECK(values(rm) != std::vector<double>{0, 0, 0});  // updated in place
  CHECK(layer_norm(x, {5}).dtype() == DType::f32);
  CHECK(group_norm(x, 3).dtype() == DType::f32);
}
