// matmul and linear: forward against a naive f64 reference for every shape kind torch.matmul
// accepts (and strided, broadcast and empty operands), low-precision spot checks, gradient-check
// cases, and bad input.
#include <algorithm>
#include <cmath>
#include <functional>
#include <string>

#include "ops/functional.h"
#include "ops/profiler.h"
#include "tests/support/concurrency.h"
#include "tests/support/op_cases.h"
#include "tests/support/tensor_testing.h"

namespace precis {
namespace {

using testing::randn_input;
using testing::TensorList;

// torch.matmul on the f64 values of a and b, written out naively: 1-D operands become matrices
// ((k) → (1, k) on the left, (k, 1) on the right) and the added dim is dropped again; batch dims
// broadcast.
Tensor reference_matmul(const Tensor& a, const Tensor& b) {
  Shape as = a.sizes(), bs = b.sizes();
  if (a.dim() == 1) as.insert(as.begin(), 1);
  if (b.dim() == 1) bs.push_back(1);
  const int64_t n = as[as.size() - 2], k = as.back(), m = bs.back();
  REQUIRE(bs[bs.size() - 2] == k);
  const Shape ba(as.begin(), as.end() - 2), bb(bs.begin(), bs.end() - 2);
  const size_t nd = std::max(ba.size(), bb.size());
  auto padded = [nd](const Shape& s) {
    Shape p(nd - s.size(), 1);
    p.insert(p.end(), s.begin(), s.end());
    return p;
  };
  const Shape pa = padded(ba), pb = padded(bb);
  Shape batch(nd);
  for (size_t d = 0; d < nd; ++d) batch[d] = std::max(pa[d], pb[d]);
  const std::vector<double> va = a.to_vector<double>(), vb = b.to_vector<double>();
  const int64_t nbatch = shape_numel(batch);
  std::vector<double> out(nbatch * n * m, 0.0);
  for (int64_t i = 0; i < nbatch; ++i) {
    // Matrix index of batch entry i in a and in b (row-major over their own batch dims).
    int64_t rem = i, ia = 0, ib = 0, sa = 1, sb = 1;
    for (int64_t d = static_cast<int64_t>(nd) - 1; d >= 0; --d) {
      const int64_t idx = rem % batch[d];
      rem /= batch[d];
      ia += (pa[d] == 1 ? 0 : idx) * sa;
      ib += (pb[d] == 1 ? 0 : idx) * sb;
      sa *= pa[d];
      sb *= pb[d];
    }
    for (int64_t r = 0; r < n; ++r)
      for (int64_t c = 0; c < m; ++c) {
        double acc = 0;
        for (int64_t j = 0; j < k; ++j) acc += va[(ia * n + r) * k + j] * vb[(ib * k + j) * m + c];
        out[(i * n + r) * m + c] = acc;
      }
  }
  Shape out_sizes = batch;
  if (a.dim() > 1) out_sizes.push_back(n);
  if (b.dim() > 1) out_sizes.push_back(m);
  return from_vector<double>(out, out_sizes);
}

Tensor reference_linear(const Tensor& x, const Tensor& w, const Tensor& bias) {
  Tensor y = reference_matmul(x, w.t());
  if (!bias.defined()) return y;
  std::vector<double> v = y.to_vector<double>();
  const std::vector<double> bv = bias.to_vector<double>();
  for (size_t i = 0; i < v.size(); ++i) v[i] += bv[i % bv.size()];
  return from_vector<double>(v, y.sizes());
}

// The values of t with their signs dropped, as a contiguous f64 tensor.
Tensor abs_values(const Tensor& t) {
  std::vector<double> v = t.to_vector<double>();
  for (double& x : v) x = std::fabs(x);
  return from_vector<double>(v, t.sizes());
}

// Requires |actual - expected| <= atol + rtol·scale elementwise, with `dtype`'s row of the
// tolerance table. GEMM's rounding error is bounded relative to (|A|·|B|)ᵢⱼ, not to |A·B|ᵢⱼ,
// which cancellation between the terms of a dot product makes arbitrarily small; so `scale` is
// the reference product of the absolute values.
void require_gemm_close(const Tensor& actual, const Tensor& expected, const Tensor& scale, DType dtype) {
  REQUIRE(actual.sizes() == expected.sizes());
  const testing::Tolerance tol = testing::tolerance(dtype);
  const std::vector<double> a = actual.to_vector<double>(), e = expected.to_vector<double>(),
                            s = scale.to_vector<double>();
  double worst = 0;
  size_t worst_i = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double err = std::fabs(a[i] - e[i]) / (tol.atol + tol.rtol * s[i]);
    if (!(err <= worst)) {  // also catches NaN
      worst = std::isnan(err) ? INFINITY : err;
      worst_i = i;
    }
  }
  INFO("worst element at flat index " << worst_i << ": actual " << (a.empty() ? 0 : a[worst_i]) << ", expected "
                                      << (e.empty() ? 0 : e[worst_i]) << " (" << worst << "x the tolerance)");
  REQUIRE(worst <= 1.0);
}

void require_matmul_close(const Tensor& out, const Tensor& a, const Tensor& b, DType dtype) {
  require_gemm_close(out, reference_matmul(a, b), reference_matmul(abs_values(a), abs_values(b)), dtype);
}

void require_linear_close(const Tensor& out, const Tensor& x, const Tensor& w, const Tensor& bias, DType dtype) {
  require_gemm_close(out, reference_linear(x, w, bias),
                     reference_linear(abs_values(x), abs_values(w), bias.defined() ? abs_values(bias) : Tensor()),
                     dtype);
}

Tensor input(const Shape& sizes, uint64_t seed, DType dtype) { return randn_input(sizes, false, seed, dtype); }

// How a case lays its operands out in memory; the values are the same in every layout.
enum class Layout { Contiguous, Transposed, Strided, Expanded };

// A tensor of `sizes` in `layout`: Transposed stores the last two dims swapped (a transposed
// view, as x.t() gives); Strided takes every other element of the last dim (no GEMM layout: the
// kernel must copy); Expanded broadcasts a size-1 leading dim with stride 0.
Tensor make(const Shape& sizes, Layout layout, uint64_t seed, DType dtype) {
  const int64_t nd = static_cast<int64_t>(sizes.size());
  switch (layout) {
    case Layout::Contiguous: return input(sizes, seed, dtype);
    case Layout::Transposed: {
      if (nd < 2) return input(sizes, seed, dtype);
      Shape swapped = sizes;
      std::swap(swapped[nd - 1], swapped[nd - 2]);
      return input(swapped, seed, dtype).transpose(-1, -2);
    }
    case Layout::Strided: {
      Shape wide = sizes;
      wide.back() *= 2;
      return input(wide, seed, dtype).slice(-1, 0, wide.back(), 2);
    }
    case Layout::Expanded: {
      Shape one = sizes;
      one[0] = 1;
      return input(one, seed, dtype).expand(sizes);
    }
  }
  return Tensor();
}

struct ShapeCase {
  const char* label;
  Shape a, b;
};

const ShapeCase kShapeCases[] = {
    {"1-D · 1-D", {7}, {7}},
    {"1-D · 2-D", {7}, {7, 5}},
    {"2-D · 1-D", {6, 7}, {7}},
    {"2-D · 2-D", {6, 7}, {7, 5}},
    {"3-D · 2-D (batch folds into rows)", {3, 6, 7}, {7, 5}},
    {"2-D · 3-D", {6, 7}, {3, 7, 5}},
    {"3-D · 3-D", {3, 6, 7}, {3, 7, 5}},
    {"3-D · 1-D", {3, 6, 7}, {7}},
    {"1-D · 3-D", {7}, {3, 7, 5}},
    {"4-D · 3-D broadcast batch", {2, 1, 6, 7}, {3, 7, 5}},
    {"batches [3, 1] and [1, 4] broadcast both ways", {3, 1, 6, 7}, {1, 4, 7, 5}},
    {"size-1 batch broadcast", {1, 6, 7}, {4, 7, 5}},
    {"all sizes 1", {1, 1}, {1, 1}},
    {"n = 1", {1, 7}, {7, 5}},
    {"m = 1", {6, 7}, {7, 1}},
    {"k = 1", {6, 1}, {1, 5}},
    {"larger (oneDNN kernels)", {65, 130}, {130, 47}},
    {"larger batched", {4, 33, 70}, {4, 70, 19}},
};

const Layout kLayouts[] = {Layout::Contiguous, Layout::Transposed, Layout::Strided, Layout::Expanded};
const char* layout_name(Layout l) {
  switch (l) {
    case Layout::Contiguous: return "contiguous";
    case Layout::Transposed: return "transposed";
    case Layout::Strided: return "strided";
    case Layout::Expanded: return "expanded";
  }
  return "";
}

TEST_CASE("matmul: forward matches the naive reference for every shape kind and layout", "[ops][linalg]") {
  for (DType dtype : {DType::f32, DType::f64}) {
    for (const ShapeCase& c : kShapeCases) {
      for (Layout la : kLayouts) {
        for (Layout lb : kLayouts) {
          INFO(c.label << ", " << dtype_name(dtype) << ", a " << layout_name(la) << ", b " << layout_name(lb));
          const Tensor a = make(c.a, la, 1, dtype), b = make(c.b, lb, 2, dtype);
          const Tensor out = matmul(a, b);
          CHECK(out.dtype() == dtype);
          require_matmul_close(out, a, b, dtype);
        }
      }
    }
  }
}

// A GEMM with a very long K and few result columns (BERT's vocabulary input gradient) runs in K
// blocks on oneDNN (ops/cpu/gemm_onednn.cpp): each block adds into the result, bf16 results through
// an fp32 buffer rounded once. K here is no multiple of the block depth, so the last block is
// short; each operand's two layouts move the blocks' start pointers differently.
TEST_CASE("matmul: K long enough to run in K blocks", "[ops][linalg]") {
  // (The operands are large: two runs cover each operand's two layouts.)
  const int64_t m = 1024, k = 24576 + 100, n = 4;
  const struct {
    DType dtype;
    Layout a, b;
  } runs[] = {{DType::f32, Layout::Contiguous, Layout::Transposed}, {DType::bf16, Layout::Transposed, Layout::Contiguous}};
  for (const auto& run : runs) {
    INFO(dtype_name(run.dtype) << ", a " << layout_name(run.a) << ", b " << layout_name(run.b));
    const Tensor a = make({m, k}, run.a, 1, run.dtype), b = make({k, n}, run.b, 2, run.dtype);
    const Tensor out = matmul(a, b);
    CHECK(out.dtype() == run.dtype);
    require_matmul_close(out, a.to(DType::f64), b.to(DType::f64), run.dtype);
  }
}

// The primitive cache and the per-thread oneDNN state are shared by every thread that calls
// matmul; concurrent calls with different and equal shapes must give the serial results.
TEST_CASE("matmul: concurrent calls from several threads", "[ops][linalg]") {
  const Tensor a = input({3, 40, 50}, 1, DType::f32), b = input({50, 30}, 2, DType::f32);
  const Tensor c = input({20, 50}, 3, DType::f32);
  const std::vector<float> ab = matmul(a, b).to_vector<float>(), cb = matmul(c, b).to_vector<float>();
  testing::check_concurrent_calls(4, 50, [&](int t, int i) {
    const bool first = (t + i) % 2 == 0;
    return matmul(first ? a : c, b).to_vector<float>() == (first ? ab : cb);
  });
}

TEST_CASE("matmul: empty operands", "[ops][linalg]") {
  SECTION("k = 0 gives zeros") {
    const Tensor out = matmul(input({3, 0}, 1, DType::f32), input({0, 4}, 2, DType::f32));
    REQUIRE(out.sizes() == Shape{3, 4});
    for (float v : out.to_vector<float>()) CHECK(v == 0.0f);
    const Tensor dot = matmul(input({0}, 1, DType::f32), input({0}, 2, DType::f32));
    REQUIRE(dot.dim() == 0);
    CHECK(dot.item<float>() == 0.0f);
  }
  SECTION("n, m or batch 0 give empty results of the right shape") {
    CHECK(matmul(input({0, 3}, 1, DType::f32), input({3, 4}, 2, DType::f32)).sizes() == Shape{0, 4});
    CHECK(matmul(input({2, 3}, 1, DType::f32), input({3, 0}, 2, DType::f32)).sizes() == Shape{2, 0});
    CHECK(matmul(input({0, 2, 3}, 1, DType::f32), input({3, 4}, 2, DType::f32)).sizes() == Shape{0, 2, 4});
    CHECK(matmul(input({2, 3}, 1, DType::f32), input({0, 3, 4}, 2, DType::f32)).sizes() == Shape{0, 2, 4});
  }
}

// bf16 and f16 results are compared with an f64 reference computed from the inputs *after* they
// were rounded to the low-precision dtype. The kernel only ever sees the rounded inputs, so what
// is left to check is its own error: fp32 accumulation and one rounding of each output (half an
// ulp, 2^-9 relative for bf16), which the bf16/f16 tolerances bound. Against the unrounded inputs
// the input rounding error would dominate, and it is not bounded relative to the result (terms
// of a dot product cancel).
TEST_CASE("matmul and linear: bf16 and f16 spot checks", "[ops][linalg]") {
  for (DType dtype : {DType::bf16, DType::f16}) {
    INFO(dtype_name(dtype));
    const Tensor a = input({2, 37, 64}, 1, DType::f32).to(dtype), b = input({64, 29}, 2, DType::f32).to(dtype);
    const Tensor out = matmul(a, b);
    CHECK(out.dtype() == dtype);
    require_matmul_close(out, a.to(DType::f64), b.to(DType::f64), dtype);

    const Tensor at = input({3, 64, 37}, 3, DType::f32).to(dtype).transpose(-1, -2);
    require_matmul_close(matmul(at, b), at.to(DType::f64), b.to(DType::f64), dtype);

    const Tensor x = input({5, 9, 64}, 4, DType::f32).to(dtype), w = input({31, 64}, 5, DType::f32).to(dtype);
    const Tensor bias = input({31}, 6, DType::f32).to(dtype);
    const Tensor y = linear(x, w, bias);
    CHECK(y.dtype() == dtype);
    require_linear_close(y, x.to(DType::f64), w.to(DType::f64), bias.to(DType::f64), dtype);
  }
}

// Attention splits heads out of the hidden dim: (B, L, H·D) viewed as (B, L, H, D) and transposed to
// (B, H, L, D). Its batch dims (B, H) step by L·H·D and D, which no single batch stride covers, so
// matmul hands the CPU kernel both (ops/contracts/kernels.h) instead of copying. The results must match the
// reference in every dtype (f32 and bf16 through oneDNN's 4-D GEMM, f16 and f64 through the
// per-entry fallback), and for f32 and bf16 no copy kernel may run at all.
TEST_CASE("matmul: attention-head views with two batch dims", "[ops][linalg]") {
  const int64_t B = 3, L = 9, H = 2, D = 5;
  auto heads = [&](uint64_t seed, DType dtype) {
    return input({B, L, H * D}, seed, DType::f32).to(dtype).view({B, L, H, D}).transpose(1, 2);
  };
  for (DType dtype : {DType::f32, DType::bf16, DType::f16, DType::f64}) {
    INFO(dtype_name(dtype));
    const Tensor q = heads(1, dtype), k = heads(2, dtype), v = heads(3, dtype);
    const Tensor w = input({B, H, L, L}, 4, DType::f32).to(dtype);
    const Tensor one_head = input({1, H, D, L}, 5, DType::f32).to(dtype);
    const Tensor g = heads(6, dtype);
    const std::vector<std::pair<const char*, std::pair<Tensor, Tensor>>> cases = {
        {"q · kᵀ (both operands strided heads)", {q, k.transpose(-2, -1)}},
        {"weights · v (b strided heads)", {w, v}},
        {"g · vᵀ (backward's grad_a)", {g, v.transpose(-2, -1)}},
        {"qᵀ · g (backward's grad_b)", {q.transpose(-2, -1), g}},
        {"strided heads · broadcast batch", {q, one_head}},
    };
    for (const auto& [label, ops] : cases) {
      INFO(label);
      const auto& [a, b] = ops;
      std::vector<profiler::Entry> entries;
      profiler::reset();
      profiler::set_enabled(true);
      const Tensor out = matmul(a, b);
      profiler::set_enabled(false);
      CHECK(out.dtype() == dtype);
      CHECK(out.is_contiguous());
      require_matmul_close(out, a.to(DType::f64), b.to(DType::f64), dtype);
#ifdef PRECIS_HAS_ONEDNN
      if (dtype == DType::f32 || dtype == DType::bf16) {
        for (const profiler::Entry& e : profiler::entries()) {
          INFO("entry " << e.name);
          CHECK(e.name != "copy");
        }
      }
#endif
    }
  }
}

TEST_CASE("linear: forward matches the naive reference", "[ops][linalg]") {
  for (DType dtype : {DType::f32, DType::f64}) {
    INFO(dtype_name(dtype));
    const Tensor w = input({6, 7}, 2, dtype), bias = input({6}, 3, dtype);
    for (const Shape& xs : {Shape{7}, Shape{5, 7}, Shape{2, 3, 7}, Shape{1, 7}, Shape{0, 7}}) {
      INFO("x " << shape_str(xs));
      const Tensor x = input(xs, 1, dtype);
      const Tensor y = linear(x, w, bias);
      Shape expected = xs;
      expected.back() = 6;
      REQUIRE(y.sizes() == expected);
      require_linear_close(y, x, w, bias, dtype);
      require_linear_close(linear(x, w), x, w, Tensor(), dtype);
    }
    SECTION("non-contiguous input and weight") {
      const Tensor x = make({5, 7}, Layout::Transposed, 4, dtype), wt = make({6, 7}, Layout::Transposed, 5, dtype);
      require_linear_close(linear(x, wt, bias), x, wt, bias, dtype);
    }
    SECTION("larger, through the fused-bias GEMM") {
      const Tensor x = input({3, 40, 130}, 6, dtype), wl = input({70, 130}, 7, dtype), bl = input({70}, 8, dtype);
      require_linear_close(linear(x, wl, bl), x, wl, bl, dtype);
    }
    SECTION("in_features = 0 gives the bias") {
      const Tensor x = input({4, 0}, 1, dtype), w0 = input({3, 0}, 2, dtype), b3 = bias.slice(0, 0, 3);
      require_linear_close(linear(x, w0, b3), x, w0, b3, dtype);
    }
  }
}

TEST_CASE("matmul and linear: bad input", "[ops][linalg]") {
  const Tensor a = zeros({64, 128}), b = zeros({256, 10});
  PRECIS_REQUIRE_THROWS_WITH_ALL(matmul(a, b), ShapeError, "matmul: incompatible shapes", "a is [64, 128] f32 cpu",
                                 "b is [256, 10] f32 cpu", "expected a.size(-1) == b.size(-2)");
  PRECIS_REQUIRE_THROWS_WITH_ALL(matmul(zeros({3, 4}), zeros({5})), ShapeError, "[3, 4] f32 cpu", "[5] f32 cpu",
                                 "b.size(0)");
  PRECIS_REQUIRE_THROWS_WITH_ALL(matmul(zeros({2, 3, 4}), zeros({3, 4, 5})), ShapeError, "matmul", "do not broadcast",
                                 "[2, 3, 4] f32 cpu", "[3, 4, 5] f32 cpu");
  PRECIS_REQUIRE_THROWS_WITH_ALL(matmul(zeros({3, 4}), zeros({4, 5}, {.dtype = DType::f64})), DTypeError,
                                 "matmul", "[3, 4] f32 cpu", "[4, 5] f64 cpu", ".to(DType::f64)");
  PRECIS_REQUIRE_THROWS_WITH_ALL(matmul(zeros({3, 4}, {.dtype = DType::i64}), zeros({4, 5}, {.dtype = DType::i64})),
                                 DTypeError, "matmul", "[3, 4] i64 cpu", "floating");
  PRECIS_REQUIRE_THROWS_WITH_ALL(matmul(zeros({}), zeros({4})), ShapeError, "matmul", "at least 1 dim", "[] f32 cpu");

  const Tensor x = zeros({2, 7}), w = zeros({6, 7});
  PRECIS_REQUIRE_THROWS_WITH_ALL(linear(zeros({2, 5}), w), ShapeError, "linear", "input is [2, 5] f32 cpu",
                                 "weight is [6, 7] f32 cpu", "input.size(-1) == weight.size(1)");
  PRECIS_REQUIRE_THROWS_WITH_ALL(linear(x, w, zeros({5})), ShapeError, "linear", "bias is [5] f32 cpu");
  PRECIS_REQUIRE_THROWS_WITH_ALL(linear(x, zeros({6, 7}, {.dtype = DType::bf16})), DTypeError, "linear",
                                 "weight is [6, 7] bf16 cpu", ".to(");
  PRECIS_REQUIRE_THROWS_WITH_ALL(linear(x, zeros({7})), ShapeError, "linear", "weight must be 2-D");
}

// ---- gradient checks (run by tests/ops/gradcheck_test.cpp) ------------------------------------

Tensor grad_input(const Shape& sizes, uint64_t seed) { return randn_input(sizes, true, seed); }

testing::GradCase matmul_case(const char* label, Shape a, Shape b) {
  return {OpId::matmul, label, [a, b] { return TensorList{grad_input(a, 1), grad_input(b, 2)}; },
          [](const TensorList& x) { return TensorList{matmul(x[0], x[1])}; }};
}

const bool kMatmulCases = testing::register_grad_cases({
    matmul_case("1-D · 1-D", {4}, {4}),
    matmul_case("1-D · 2-D", {4}, {4, 3}),
    matmul_case("2-D · 1-D", {3, 4}, {4}),
    matmul_case("2-D · 2-D", {3, 4}, {4, 5}),
    matmul_case("3-D · 2-D", {2, 3, 4}, {4, 5}),
    matmul_case("2-D · 3-D", {3, 4}, {2, 4, 5}),
    matmul_case("3-D · 1-D", {2, 3, 4}, {4}),
    matmul_case("1-D · 3-D", {4}, {2, 4, 3}),
    matmul_case("broadcast batch [2, 1] with [3]", {2, 1, 3, 4}, {3, 4, 2}),
    matmul_case("broadcast size-1 batch", {1, 3, 4}, {2, 4, 3}),
    {OpId::matmul, "non-contiguous operands",
     [] { return TensorList{testing::non_contiguous(grad_input({2, 3, 4}, 3)), testing::non_contiguous(grad_input({4, 5}, 4))}; },
     [](const TensorList& x) { return TensorList{matmul(x[0], x[1])}; }},
    {OpId::matmul, "transposed operands",
     [] { return TensorList{grad_input({4, 3}, 5), grad_input({5, 4}, 6)}; },
     [](const TensorList& x) { return TensorList{matmul(x[0].t(), x[1].t())}; }},
    {OpId::matmul, "attention-head views (two batch dims)",
     [] { return TensorList{grad_input({2, 3, 2 * 4}, 12), grad_input({2, 3, 2 * 4}, 13)}; },
     [](const TensorList& x) {
       auto heads = [](const Tensor& t) { return t.view({2, 3, 2, 4}).transpose(1, 2); };
       return TensorList{matmul(heads(x[0]), heads(x[1]).transpose(-2, -1))};
     }},
    {OpId::matmul, "only b requires grad",
     [] { return TensorList{randn_input({3, 4}, false, 7), grad_input({4, 2}, 8)}; },
     [](const TensorList& x) { return TensorList{matmul(x[0], x[1])}; }},
});

const bool kLinearCases = testing::register_grad_cases({
    {OpId::linear, "with bias", [] { return TensorList{grad_input({3, 4}, 1), grad_input({5, 4}, 2), grad_input({5}, 3)}; },
     [](const TensorList& x) { return TensorList{linear(x[0], x[1], x[2])}; }},
    {OpId::linear, "without bias", [] { return TensorList{grad_input({3, 4}, 4), grad_input({5, 4}, 5)}; },
     [](const TensorList& x) { return TensorList{linear(x[0], x[1])}; }},
    {OpId::linear, "3-D input",
     [] { return TensorList{grad_input({2, 3, 4}, 6), grad_input({5, 4}, 7), grad_input({5}, 8)}; },
     [](const TensorList& x) { return TensorList{linear(x[0], x[1], x[2])}; }},
    {OpId::linear, "1-D input, non-contiguous weight",
     [] { return TensorList{grad_input({4}, 9), testing::non_contiguous(grad_input({5, 4}, 10)), grad_input({5}, 11)}; },
     [](const TensorList& x) { return TensorList{linear(x[0], x[1], x[2])}; }},
});

}  // namespace
}  // namespace precis
