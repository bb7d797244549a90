// Binary element-wise ops, comparisons, where and masked_fill: forward against naive f64
// references with broadcasting (f32, f64, spot checks in f16/bf16), scalar operands, dtype
// promotion, NaN propagation, the tie rule of maximum/minimum's gradient, bad inputs, and the
// gradient-check cases.
#include <cmath>
#include <functional>
#include <limits>

#include "core/rng.h"
#include "core/thread_pool.h"
#include "ops/functional.h"
#include "tests/support/op_cases.h"
#include "tests/support/tensor_testing.h"

using namespace precis;
using namespace precis::testing;

namespace {

using BinaryFn = std::function<Tensor(const Tensor&, const Tensor&)>;
using RefFn = std::function<double(double, double)>;

// The broadcast shape, computed independently of the library (sizes aligned from the right).
Shape ref_broadcast(const Shape& a, const Shape& b) {
  const size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    const int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    const int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    out[i] = da == 1 ? db : da;
  }
  return out;
}

// Value of x (row-major values `v`, shape `s`) at the multi-index of flat output index `i` of
// `out` (x broadcast to out).
double at_broadcast(const std::vector<double>& v, const Shape& s, const Shape& out, int64_t i) {
  int64_t off = 0, stride = 1;
  for (int64_t d = static_cast<int64_t>(out.size()) - 1; d >= 0; --d) {
    const int64_t idx = i % out[d];
    i /= out[d];
    const int64_t xd = d - static_cast<int64_t>(out.size() - s.size());
    if (xd >= 0) {
      if (s[xd] != 1) off += idx * stride;
      stride *= s[xd];
    }
  }
  return v[off];
}

Tensor reference(const Tensor& a, const Tensor& b, const RefFn& f) {
  const Shape shape = ref_broadcast(a.sizes(), b.sizes());
  const std::vector<double> va = a.to_vector<double>(), vb = b.to_vector<double>();
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  std::vector<double> out(n);
  for (int64_t i = 0; i < n; ++i) out[i] = f(at_broadcast(va, a.sizes(), shape, i), at_broadcast(vb, b.sizes(), shape, i));
  return from_vector<double>(out, shape);
}

struct BinaryCase {
  const char* name;
  BinaryFn fn;
  RefFn ref;
};

const std::vector<BinaryCase>& arithmetic_cases() {
  static const std::vector<BinaryCase> cases = {
      {"add", [](const Tensor& a, const Tensor& b) { return add(a, b); }, [](double a, double b) { return a + b; }},
      {"add alpha", [](const Tensor& a, const Tensor& b) { return add(a, b, 2.5); }, [](double a, double b) { return a + 2.5 * b; }},
      {"sub", [](const Tensor& a, const Tensor& b) { return sub(a, b); }, [](double a, double b) { return a - b; }},
      {"sub alpha", [](const Tensor& a, const Tensor& b) { return sub(a, b, -3); }, [](double a, double b) { return a + 3 * b; }},
      {"mul", [](const Tensor& a, const Tensor& b) { return mul(a, b); }, [](double a, double b) { return a * b; }},
      {"div", [](const Tensor& a, const Tensor& b) { return div(a, b); }, [](double a, double b) { return a / b; }},
      {"maximum", [](const Tensor& a, const Tensor& b) { return maximum(a, b); }, [](double a, double b) { return std::max(a, b); }},
      {"minimum", [](const Tensor& a, const Tensor& b) { return minimum(a, b); }, [](double a, double b) { return std::min(a, b); }},
  };
  return cases;
}

const std::vector<BinaryCase>& comparison_cases() {
  static const std::vector<BinaryCase> cases = {
      {"eq", [](const Tensor& a, const Tensor& b) { return eq(a, b); }, [](double a, double b) { return double(a == b); }},
      {"ne", [](const Tensor& a, const Tensor& b) { return ne(a, b); }, [](double a, double b) { return double(a != b); }},
      {"lt", [](const Tensor& a, const Tensor& b) { return lt(a, b); }, [](double a, double b) { return double(a < b); }},
      {"le", [](const Tensor& a, const Tensor& b) { return le(a, b); }, [](double a, double b) { return double(a <= b); }},
      {"gt", [](const Tensor& a, const Tensor& b) { return gt(a, b); }, [](double a, double b) { return double(a > b); }},
      {"ge", [](const Tensor& a, const Tensor& b) { return ge(a, b); }, [](double a, double b) { return double(a >= b); }},
  };
  return cases;
}

// Shape pairs: equal, both-sided broadcast, trailing vector, 0-d either side, empty, scalar-row
// fast paths over several blocks and chunks.
const std::vector<std::pair<Shape, Shape>> kShapePairs = {
    {{3, 4}, {3, 4}},   {{3, 1}, {1, 4}}, {{2, 3, 4}, {4}},    {{}, {5}},         {{5}, {}},   {{}, {}},
    {{0, 3}, {3}},      {{2, 1, 3}, {4, 1}}, {{300, 70}, {70}}, {{300, 1}, {300, 700}}, {{4, 1}, {4, 9000}},
};

// Operand values in ±[0.5, 2]: away from 0 so that div is well conditioned.
Tensor operand(const Shape& shape, uint64_t seed, DType dt) {
  Tensor u = uniform_input(shape, 0.5, 2, false, seed, DType::f64);
  std::vector<double> v = u.to_vector<double>();
  for (size_t i = 0; i < v.size(); ++i)
    if ((i + seed) % 3 == 0) v[i] = -v[i];
  return from_vector<double>(v, shape, {.dtype = dt});
}

// Values on a coarse grid so that comparisons see ties.
Tensor grid_operand(const Shape& shape, uint64_t seed, DType dt) {
  std::vector<double> v = uniform_input(shape, -2, 2, false, seed).to_vector<double>();
  for (double& x : v) x = std::round(x * 2) / 2;
  return from_vector<double>(v, shape, {.dtype = dt});
}

}  // namespace

TEST_CASE("binary arithmetic matches a f64 reference with broadcasting", "[ops][binary]") {
  for (const BinaryCase& c : arithmetic_cases()) {
    for (DType dt : {DType::f32, DType::f64}) {
      for (const auto& [sa, sb] : kShapePairs) {
        for (int layout = 0; layout < 3; ++layout) {  // contiguous, a strided, b strided
          Tensor a = operand(sa, 1, dt), b = operand(sb, 2, dt);
          if (layout == 1) a = non_contiguous(a);
          if (layout == 2) b = non_contiguous(b);
          INFO(c.name << " " << dtype_name(dt) << " " << shape_str(sa) << " with " << shape_str(sb) << " layout "
                      << layout);
          Tensor y = c.fn(a, b);
          REQUIRE(y.dtype() == dt);
          PRECIS_REQUIRE_CLOSE(y, reference(a, b, c.ref), dt);
        }
      }
    }
  }
}

TEST_CASE("binary arithmetic in f16 and bf16 computes in fp32", "[ops][binary]") {
  for (const BinaryCase& c : arithmetic_cases()) {
    for (DType dt : {DType::f16, DType::bf16}) {
      for (const auto& [sa, sb] : {std::pair<Shape, Shape>{{5, 301}, {5, 301}}, {{5, 301}, {301}}, {{5, 1}, {5, 301}},
                                   {{301, 5}, {5}}}) {
        Tensor a = non_contiguous(operand(sa, 3, dt)), b = operand(sb, 4, dt);
        INFO(c.name << " " << dtype_name(dt) << " " << shape_str(sa) << " with " << shape_str(sb));
        Tensor y = c.fn(a, b);
        REQUIRE(y.dtype() == dt);
        PRECIS_REQUIRE_CLOSE(y, reference(a, b, c.ref), dt);
      }
    }
  }
}

TEST_CASE("comparisons give bool with broadcasting and ties", "[ops][binary]") {
  for (const BinaryCase& c : comparison_cases()) {
    for (DType dt : {DType::f32, DType::f64, DType::bf16, DType::i32, DType::i64}) {
      for (const auto& [sa, sb] : kShapePairs) {
        Tensor a = grid_operand(sa, 5, dt), b = non_contiguous(grid_operand(sb, 6, dt));
        INFO(c.name << " " << dtype_name(dt) << " " << shape_str(sa) << " with " << shape_str(sb));
        Tensor y = c.fn(a, b);
        REQUIRE(y.dtype() == DType::boolean);
        REQUIRE(y.to(DType::f64).to_vector<double>() == reference(a, b, c.ref).to_vector<double>());
      }
    }
  }
  Tensor t = from_vector<bool>({true, false, true}, {3});
  REQUIRE(eq(t, from_vector<bool>({true, true, false}, {3})).to_vector<bool>() == std::vector<bool>{true, false, false});
}

TEST_CASE("integer arithmetic kernels", "[ops][binary]") {
  for (DType dt : {DType::i32, DType::i64}) {
    Tensor a = from_vector<int64_t>({1, -2, 3, 40, 5, -6}, {2, 3}, {.dtype = dt});
    Tensor b = from_vector<int64_t>({10, 20, -30}, {3}, {.dtype = dt});
    REQUIRE(add(a, b).dtype() == dt);
    REQUIRE(add(a, b, 2).to_vector<int64_t>() == std::vector<int64_t>{21, 38, -57, 60, 45, -66});
    REQUIRE(sub(a, b).to_vector<int64_t>() == std::vector<int64_t>{-9, -22, 33, 30, -15, 24});
    REQUIRE(mul(a, b).to_vector<int64_t>() == std::vector<int64_t>{10, -40, -90, 400, 100, 180});
    REQUIRE(maximum(a, b).to_vector<int64_t>() == std::vector<int64_t>{10, 20, 3, 40, 20, -6});
    REQUIRE(minimum(a.t(), 2).to_vector<int64_t>() == std::vector<int64_t>{1, 2, -2, 2, 2, -6});
  }
}

TEST_CASE("dtype promotion follows PyTorch", "[ops][binary]") {
  Tensor f32 = full({2}, 1.5, {.dtype = DType::f32});
  Tensor f64 = full({2}, 2.0, {.dtype = DType::f64});
  Tensor i64 = full({2}, 3, {.dtype = DType::i64});
  Tensor i32 = from_vector<int32_t>({7, -7}, {2});
  Tensor bl = from_vector<bool>({true, false}, {2});
  Tensor f16 = full({2}, 1.0, {.dtype = DType::f16});
  Tensor bf16 = full({2}, 1.0, {.dtype = DType::bf16});
  CHECK(add(f32, f64).dtype() == DType::f64);
  CHECK(add(i64, f32).dtype() == DType::f32);
  CHECK(add(i64, f32).to_vector<float>() == std::vector<float>{4.5f, 4.5f});
  CHECK(add(bl, i64).dtype() == DType::i64);
  CHECK(add(bl, i64).to_vector<int64_t>() == std::vector<int64_t>{4, 3});
  CHECK(add(i32, i64).dtype() == DType::i64);
  CHECK(mul(f16, bf16).dtype() == DType::f32);
  // Integer / integer is true division in f32.
  Tensor q = div(i32, from_vector<int32_t>({2, 2}, {2}));
  CHECK(q.dtype() == DType::f32);
  CHECK(q.to_vector<float>() == std::vector<float>{3.5f, -3.5f});
  CHECK(div(i32, 2).dtype() == DType::f32);
  CHECK(div(i32, 2).to_vector<float>() == std::vector<float>{3.5f, -3.5f});
  // Scalars take the tensor's dtype unless of a higher category.
  CHECK(add(i32, 2).dtype() == DType::i32);
  CHECK(add(i32, 2.5).dtype() == DType::f32);
  CHECK(add(i32, 2.5).to_vector<float>() == std::vector<float>{9.5f, -4.5f});
  CHECK(add(bl, 1).dtype() == DType::i64);
  CHECK(mul(f16, 3.0).dtype() == DType::f16);
  CHECK(add(f64, 1).dtype() == DType::f64);
  CHECK(gt(i32, 0.5).to_vector<bool>() == std::vector<bool>{true, false});
}

// PyTorch's categories: a zero-dim tensor widens dimensioned operands only when it is of a higher
// category (bool < integer < floating), as torch.result_type.
TEST_CASE("zero-dim tensors promote as in PyTorch: below dimensioned operands", "[ops][binary]") {
  const Tensor bf16 = full({2}, 1.5, {.dtype = DType::bf16}), f16 = full({2}, 1.5, {.dtype = DType::f16});
  const Tensor i32 = from_vector<int32_t>({7, -7}, {2}), bl = from_vector<bool>({true, false}, {2});
  const Tensor f32_0d = full({}, 2.0, {.dtype = DType::f32}), f64_0d = full({}, 0.5, {.dtype = DType::f64});
  const Tensor i64_0d = full({}, 3, {.dtype = DType::i64}), bl_0d = full({}, 1, {.dtype = DType::boolean});
  CHECK(mul(bf16, f32_0d).dtype() == DType::bf16);  // same category: the dimensioned dtype wins
  CHECK(mul(bf16, f32_0d).to_vector<float>() == std::vector<float>{3.0f, 3.0f});
  CHECK(mul(f32_0d, f16).dtype() == DType::f16);
  CHECK(add(i32, i64_0d).dtype() == DType::i32);
  CHECK(add(i32, i64_0d).to_vector<int32_t>() == std::vector<int32_t>{10, -4});
  CHECK(add(i32, f64_0d).dtype() == DType::f64);  // higher category: promoted with it
  CHECK(add(i32, f64_0d).to_vector<double>() == std::vector<double>{7.5, -6.5});
  CHECK(add(bl, i64_0d).dtype() == DType::i64);
  CHECK(mul(bl, f32_0d).dtype() == DType::f32);
  CHECK(eq(bl, bl_0d).to_vector<bool>() == std::vector<bool>{true, false});
  CHECK(add(f32_0d, f64_0d).dtype() == DType::f64);  // only zero-dim operands: plain promotion
  CHECK(add(f32_0d, f64_0d).dim() == 0);
  CHECK(lt(bf16, f32_0d).to_vector<bool>() == std::vector<bool>{true, true});
  CHECK(where(gt(bf16, 1.0), bf16, f32_0d).dtype() == DType::bf16);
  // A (1,)-shaped tensor is dimensioned: it promotes as before.
  CHECK(mul(bf16, full({1}, 2.0, {.dtype = DType::f32})).dtype() == DType::f32);

  // The zero-dim operand is cast to the result dtype differentiably; its gradient comes back f32.
  Tensor s = full({}, 2.0, {.dtype = DType::f32, .requires_grad = true});
  Tensor x = full({2}, 1.5, {.dtype = DType::bf16, .requires_grad = true});
  sum(mul(x, s)).backward();
  REQUIRE(s.grad().dtype() == DType::f32);
  REQUIRE(s.grad().dim() == 0);
  CHECK(s.grad().item<float>() == 3.0f);
  REQUIRE(x.grad().dtype() == DType::bf16);
}

// Operands that walk their innermost dim with a large stride (transposed, channels-last) are
// iterated in tiles (ops/cpu/loops.h); every element must still be computed once, exactly as for
// contiguous copies of the operands, at any thread count. Sizes are not multiples of the tiles.
TEST_CASE("element-wise ops on transposed and channels-last operands equal the contiguous results", "[ops][binary]") {
  const int saved = get_num_threads();
  for (int threads : {1, 2, 3}) {
    set_num_threads(threads);
    for (DType dtype : {DType::f32, DType::bf16, DType::f64}) {
      INFO(threads << " threads, " << dtype_name(dtype));
      const Tensor a = randn_input({301, 157}, false, 1, dtype), b = randn_input({157, 301}, false, 2, dtype);
      const Tensor at = a.t(), bt = b.t();  // (157, 301) views, unit stride along dim 0
      CHECK(at.contiguous().to_vector<double>() == at.to(DType::f64).to_vector<double>());
      CHECK(add(at, b).to_vector<double>() == add(at.contiguous(), b).to_vector<double>());
      const Tensor ct = randn_input({301, 157}, false, 5, dtype).t();  // a second transposed operand
      CHECK(mul(at, ct).to_vector<double>() == mul(at.contiguous(), ct.contiguous()).to_vector<double>());
      CHECK(add(at, bt.t()).to_vector<double>() == add(at.contiguous(), b).to_vector<double>());
      const Tensor row = randn_input({301}, false, 3, dtype);  // broadcast along dim 0 (stride 0)
      CHECK(where(gt(at, 0.0), row, at).to_vector<double>() ==
            where(gt(at.contiguous(), 0.0), row, at.contiguous()).to_vector<double>());
      CHECK(relu(at).to_vector<double>() == relu(at.contiguous()).to_vector<double>());
      // NCHW -> NHWC and back, 4-D.
      const Tensor x = randn_input({3, 37, 9, 35}, false, 4, dtype);
      const Tensor nhwc = x.permute({0, 2, 3, 1});
      CHECK(nhwc.contiguous().to_vector<double>() == nhwc.to(DType::f64).to_vector<double>());
      CHECK(nhwc.contiguous().permute({0, 3, 1, 2}).contiguous().to_vector<double>() ==
            x.to_vector<double>());
      CHECK(sub(nhwc, 1.5).to_vector<double>() == sub(nhwc.contiguous(), 1.5).to_vector<double>());
      // Dropout's mask follows the output index, whatever the input layout.
      Generator g1(7), g2(7);
      CHECK(dropout(at, 0.3, true, &g1).to_vector<double>() ==
            dropout(at.contiguous(), 0.3, true, &g2).to_vector<double>());
    }
  }
  set_num_threads(saved);
}

TEST_CASE("scalar operands", "[ops][binary]") {
  for (DType dt : {DType::f32, DType::f64}) {
    Tensor x = non_contiguous(operand({4, 6}, 7, dt));
    PRECIS_REQUIRE_CLOSE(add(x, 1.25), reference(x, scalar_tensor(1.25, {.dtype = DType::f64}), std::plus<>()), dt);
    PRECIS_REQUIRE_CLOSE(sub(x, 3), reference(x, scalar_tensor(3.0, {.dtype = DType::f64}), std::minus<>()), dt);
    PRECIS_REQUIRE_CLOSE(mul(x, -2.0), reference(x, scalar_tensor(-2.0, {.dtype = DType::f64}), std::multiplies<>()), dt);
    PRECIS_REQUIRE_CLOSE(div(x, 4.0), reference(x, scalar_tensor(4.0, {.dtype = DType::f64}), std::divides<>()), dt);
    PRECIS_REQUIRE_CLOSE(maximum(x, 0.7), reference(x, scalar_tensor(0.7, {.dtype = DType::f64}),
                                                    [](double a, double b) { return std::max(a, b); }),
                         dt);
    PRECIS_REQUIRE_CLOSE(minimum(x, 0.7), reference(x, scalar_tensor(0.7, {.dtype = DType::f64}),
                                                    [](double a, double b) { return std::min(a, b); }),
                         dt);
    REQUIRE(le(x, 0.0).to_vector<bool>() == lt(x, zeros({}, {.dtype = dt})).to_vector<bool>());
    // Operators route to the same ops.
    PRECIS_REQUIRE_CLOSE(2.0 - x, reference(x, scalar_tensor(2.0, {.dtype = DType::f64}),
                                            [](double a, double b) { return b - a; }),
                         dt);
    PRECIS_REQUIRE_CLOSE(1.0 / x, reference(x, scalar_tensor(1.0, {.dtype = DType::f64}),
                                            [](double a, double b) { return b / a; }),
                         dt);
  }
}

TEST_CASE("scalars f16 cannot hold are applied in fp32", "[ops][binary]") {
  // A loss scale of 65536 exceeds the f16 maximum (65504): rounding it to f16 first would give inf.
  Tensor g = full({3}, 1e-3, {.dtype = DType::f16});
  Tensor scaled = mul(g, 65536.0);
  REQUIRE(scaled.dtype() == DType::f16);
  const std::vector<double> v = scaled.to(DType::f64).to_vector<double>();
  for (double e : v) REQUIRE(std::fabs(e - 1e-3 * 65536.0) < 0.1);
  // 0.1 is not exact in bf16: the product is rounded once from fp32.
  Tensor x = full({1}, 3.0, {.dtype = DType::bf16});
  REQUIRE(mul(x, 0.1).item<float>() == static_cast<float>(BFloat16(3.0f * 0.1f)));
}

TEST_CASE("maximum and minimum propagate NaN", "[ops][binary]") {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (DType dt : {DType::f32, DType::f64, DType::f16}) {
    // 20 elements so that the vectorised loop body runs, NaN on either side.
    std::vector<double> va(20, 1.0), vb(20, 2.0);
    va[0] = nan;
    vb[1] = nan;
    va[13] = nan;
    vb[17] = nan;
    Tensor a = from_vector<double>(va, {20}, {.dtype = dt}), b = from_vector<double>(vb, {20}, {.dtype = dt});
    const std::vector<std::pair<Tensor, double>> results = {
        {maximum(a, b), 2.0}, {maximum(b, a), 2.0}, {minimum(a, b), 1.0}, {minimum(b, a), 1.0}};
    for (const auto& [y, other] : results) {
      const std::vector<double> v = y.to(DType::f64).to_vector<double>();
      INFO(dtype_name(dt));
      for (size_t i = 0; i < v.size(); ++i) {
        if (i == 0 || i == 1 || i == 13 || i == 17) {
          CHECK(std::isnan(v[i]));
        } else {
          CHECK(v[i] == other);
        }
      }
    }
    CHECK(std::isnan(maximum(a, nan).to(DType::f64).to_vector<double>()[3]));
  }
}

TEST_CASE("maximum and minimum split the gradient evenly on ties", "[ops][binary][grad]") {
  Tensor a = from_vector<double>({1, 2, 3}, {3});
  Tensor b = from_vector<double>({1, 0, 5}, {3});
  a.requires_grad_(true);
  b.requires_grad_(true);
  sum(maximum(a, b)).backward();
  REQUIRE(a.grad().to_vector<double>() == std::vector<double>{0.5, 1, 0});
  REQUIRE(b.grad().to_vector<double>() == std::vector<double>{0.5, 0, 1});
  Tensor c = from_vector<double>({1, 2, 3}, {3});
  Tensor d = from_vector<double>({1}, {1});  // broadcast: the tie's half is summed into d
  c.requires_grad_(true);
  d.requires_grad_(true);
  sum(minimum(c, d)).backward();
  REQUIRE(c.grad().to_vector<double>() == std::vector<double>{0.5, 0, 0});
  REQUIRE(d.grad().to_vector<double>() == std::vector<double>{2.5});
}

TEST_CASE("gradients of promoted operands come back in their own dtype", "[ops][binary][grad]") {
  Tensor a = full({2, 3}, 1.5, {.dtype = DType::f32, .requires_grad = true});
  Tensor b = full({3}, 2.0, {.dtype = DType::f64, .requires_grad = true});
  Tensor y = mul(a, b);
  REQUIRE(y.dtype() == DType::f64);
  sum(y).backward();
  REQUIRE(a.grad().dtype() == DType::f32);
  REQUIRE(a.grad().to_vector<float>() == std::vector<float>(6, 2.0f));
  REQUIRE(b.grad().sizes() == Shape{3});
  REQUIRE(b.grad().to_vector<double>() == std::vector<double>(3, 3.0));
}

TEST_CASE("where selects with broadcasting and promotion", "[ops][binary]") {
  for (DType dt : {DType::f32, DType::f64, DType::f16, DType::i64, DType::boolean}) {
    Tensor cond = gt(operand({3, 1, 4}, 8, DType::f64), 0.0);
    Tensor a = operand({5, 4}, 9, DType::f64).to(dt);
    Tensor b = non_contiguous(operand({3, 5, 1}, 10, DType::f64).to(dt));
    Tensor y = where(cond, a, b);
    INFO(dtype_name(dt));
    REQUIRE(y.dtype() == dt);
    REQUIRE(y.sizes() == Shape{3, 5, 4});
    // Reference: cond·a + (1 - cond)·b in f64 on the broadcast values.
    Tensor ca = reference(cond, a, [](double c, double x) { return c != 0 ? x : 0.0; });
    Tensor cb = reference(cond, b, [](double c, double x) { return c != 0 ? 0.0 : x; });
    REQUIRE(y.to(DType::f64).to_vector<double>() == reference(ca, cb, std::plus<>()).to_vector<double>());
  }
  Tensor c = from_vector<bool>({true, false}, {2});
  Tensor w = where(c, from_vector<int64_t>({1, 2}, {2}), 0.5);
  REQUIRE(w.dtype() == DType::f32);
  REQUIRE(w.to_vector<float>() == std::vector<float>{1.0f, 0.5f});
  Tensor p = where(c, from_vector<int32_t>({1, 2}, {2}), from_vector<double>({7, 8}, {2}));
  REQUIRE(p.dtype() == DType::f64);
  REQUIRE(p.to_vector<double>() == std::vector<double>{1, 8});
  REQUIRE(where(scalar_tensor(true, {.dtype = DType::boolean}), scalar_tensor(1.0), scalar_tensor(2.0)).item<float>() == 1.0f);
  REQUIRE(where(zeros({0, 2}, {.dtype = DType::boolean}), zeros({0, 2}), 1.0).sizes() == Shape{0, 2});
}

TEST_CASE("masked_fill with a broadcast mask", "[ops][binary]") {
  for (DType dt : {DType::f32, DType::bf16, DType::i32}) {
    Tensor x = non_contiguous(from_vector<double>({1, 2, 3, 4, 5, 6}, {2, 3}, {.dtype = dt}));
    Tensor mask = from_vector<bool>({true, false, true}, {3});
    Tensor y = masked_fill(x, mask, -1);
    INFO(dtype_name(dt));
    REQUIRE(y.dtype() == dt);
    REQUIRE(y.to(DType::f64).to_vector<double>() == std::vector<double>{-1, 2, -1, -1, 5, -1});
  }
  Tensor attn = zeros({2, 2});
  Tensor causal = from_vector<bool>({false, true, false, false}, {2, 2});
  const float ninf = -std::numeric_limits<float>::infinity();
  REQUIRE(masked_fill(attn, causal, ninf).to_vector<float>() == std::vector<float>{0, ninf, 0, 0});
}

TEST_CASE("binary ops reject incompatible operands", "[ops][binary]") {
  Tensor a = zeros({2, 3});
  Tensor b = zeros({4}, {.dtype = DType::f64});
  PRECIS_REQUIRE_THROWS_WITH_ALL(add(a, b), ShapeError, "add", "[2, 3] f32 cpu", "[4] f64 cpu");
  PRECIS_REQUIRE_THROWS_WITH_ALL(mul(a, b), ShapeError, "mul", "[2, 3] f32 cpu", "[4] f64 cpu");
  PRECIS_REQUIRE_THROWS_WITH_ALL(lt(zeros({3, 2}), zeros({2, 3})), ShapeError, "lt", "[3, 2] f32 cpu", "[2, 3] f32 cpu");
  Tensor cond_f = zeros({2, 3});
  PRECIS_REQUIRE_THROWS_WITH_ALL(where(cond_f, a, a), DTypeError, "where", "cond", "[2, 3] f32 cpu", "bool");
  PRECIS_REQUIRE_THROWS_WITH_ALL(where(gt(a, 0), a, zeros({5})), ShapeError, "where", "[2, 3] bool cpu", "[5] f32 cpu");
  PRECIS_REQUIRE_THROWS_WITH_ALL(masked_fill(a, zeros({3}, {.dtype = DType::i64}), 0), DTypeError, "masked_fill", "mask",
                                 "[3] i64 cpu");
  PRECIS_REQUIRE_THROWS_WITH_ALL(masked_fill(a, gt(zeros({4}), 0), 0), ShapeError, "masked_fill", "[2, 3] f32 cpu",
                                 "[4] bool cpu");
  Tensor i = zeros({2}, {.dtype = DType::i64});
  PRECIS_REQUIRE_THROWS_WITH_ALL(add(i, i, 0.5), DTypeError, "add", "alpha", "i64");
  PRECIS_REQUIRE_THROWS_WITH_ALL(add(a, Tensor()), ValueError, "add", "undefined");
}

namespace {

using Fn = std::function<TensorList(const TensorList&)>;

Tensor leaf(Tensor t) {
  t.requires_grad_(true);
  return t;
}

// Cases per differentiable binary op: equal shapes, both-sided broadcast, a 0-d operand, and a
// non-contiguous operand.
std::vector<GradCase> binary_grad_cases() {
  std::vector<GradCase> cases;
  struct Row {
    OpId op;
    const char* name;
    Fn fn;
  };
  const std::vector<Row> rows = {
      {OpId::add, "add", [](const TensorList& x) { return TensorList{add(x[0], x[1])}; }},
      {OpId::add, "add alpha", [](const TensorList& x) { return TensorList{add(x[0], x[1], -1.5)}; }},
      {OpId::sub, "sub", [](const TensorList& x) { return TensorList{sub(x[0], x[1])}; }},
      {OpId::sub, "sub alpha", [](const TensorList& x) { return TensorList{sub(x[0], x[1], 2)}; }},
      {OpId::mul, "mul", [](const TensorList& x) { return TensorList{mul(x[0], x[1])}; }},
      {OpId::div, "div", [](const TensorList& x) { return TensorList{div(x[0], x[1])}; }},
      {OpId::maximum, "maximum", [](const TensorList& x) { return TensorList{maximum(x[0], x[1])}; }},
      {OpId::minimum, "minimum", [](const TensorList& x) { return TensorList{minimum(x[0], x[1])}; }},
  };
  // Operands in ±[0.5, 2]: div stays well conditioned, and continuous random values never tie.
  for (const Row& r : rows) {
    cases.push_back({r.op, std::string(r.name) + " same shape",
                     [] { return TensorList{leaf(operand({3, 4}, 1, DType::f64)), leaf(operand({3, 4}, 2, DType::f64))}; },
                     r.fn});
    cases.push_back({r.op, std::string(r.name) + " broadcast [3, 1] with [4]",
                     [] { return TensorList{leaf(operand({3, 1}, 3, DType::f64)), leaf(operand({4}, 4, DType::f64))}; },
                     r.fn});
    cases.push_back({r.op, std::string(r.name) + " 0-d with [2, 3]",
                     [] { return TensorList{leaf(operand({}, 5, DType::f64)), leaf(operand({2, 3}, 6, DType::f64))}; },
                     r.fn});
    cases.push_back({r.op, std::string(r.name) + " non-contiguous",
                     [] {
                       return TensorList{non_contiguous(leaf(operand({4, 5}, 7, DType::f64))),
                                         leaf(operand({2, 1, 5}, 8, DType::f64))};
                     },
                     r.fn});
  }
  cases.push_back({OpId::mul, "scalar operand", [] { return TensorList{leaf(operand({3, 4}, 9, DType::f64))}; },
                   [](const TensorList& x) { return TensorList{mul(x[0], 1.7)}; }});
  cases.push_back({OpId::div, "only b requires grad",
                   [] { return TensorList{operand({3, 4}, 10, DType::f64), leaf(operand({4}, 11, DType::f64))}; },
                   [](const TensorList& x) { return TensorList{div(x[0], x[1])}; }});
  cases.push_back({OpId::where, "broadcast cond and operands",
                   [] {
                     return TensorList{leaf(operand({4, 1}, 12, DType::f64)), non_contiguous(leaf(operand({4, 4}, 13, DType::f64)))};
                   },
                   [](const TensorList& x) {
                     Tensor cond = gt(operand({1, 4}, 14, DType::f64), 0.0);
                     return TensorList{where(cond, x[0], x[1])};
                   }});
  cases.push_back({OpId::where, "scalar other", [] { return TensorList{leaf(operand({2, 3}, 15, DType::f64))}; },
                   [](const TensorList& x) {
                     Tensor cond = gt(operand({2, 3}, 16, DType::f64), 0.0);
                     return TensorList{where(cond, x[0], 0.25)};
                   }});
  cases.push_back({OpId::masked_fill, "broadcast mask", [] { return TensorList{non_contiguous(leaf(operand({3, 4}, 17, DType::f64)))}; },
                   [](const TensorList& x) {
                     Tensor mask = gt(operand({4}, 18, DType::f64), 0.0);
                     return TensorList{masked_fill(x[0], mask, 3.0)};
                   }});
  cases.push_back({OpId::masked_fill, "x broadcast by the mask", [] { return TensorList{leaf(operand({4}, 19, DType::f64))}; },
                   [](const TensorList& x) {
                     Tensor mask = gt(operand({3, 4}, 20, DType::f64), 0.0);
                     return TensorList{masked_fill(x[0], mask, -1.0)};
                   }});
  return cases;
}

const bool kBinaryCases = register_grad_cases(binary_grad_cases());

}  // namespace

TEST_CASE("compound assignment: tensor or scalar operands, PyTorch's in-place dtype rule", "[ops][binary]") {
  Tensor x = from_vector<float>({1.0f, 2.0f, 3.0f});
  x += 0.5;
  x *= from_vector<float>({2.0f, 2.0f, 2.0f});
  x -= 1;
  x /= 2.0;
  CHECK(x.to_vector<float>() == std::vector<float>{1.0f, 2.0f, 3.0f});
  // A wider floating result is rounded into the tensor's dtype.
  Tensor h = from_vector<float>({1.0f, 2.0f}).to(DType::bf16);
  h += from_vector<double>({0.5, 0.25});
  CHECK(h.dtype() == DType::bf16);
  CHECK(h.to(DType::f32).to_vector<float>() == std::vector<float>{1.5f, 2.25f});
  // A floating result into an integer tensor (or a number into a bool one) used to be truncated
  // silently; PyTorch refuses it, and so does precis, leaving the tensor as it was.
  Tensor c = zeros({3}, {.dtype = DType::i64});
  PRECIS_REQUIRE_THROWS_WITH_ALL(c += from_vector<float>({0.5f, 1.7f, -2.5f}), DTypeError, "operator+=", "f32",
                                 "[3] i64", "x.to(DType::f32)");
  PRECIS_REQUIRE_THROWS_WITH_ALL(c /= 2, DTypeError, "operator/=", "f32");
  PRECIS_REQUIRE_THROWS_WITH_ALL(c *= 1.5, DTypeError, "operator*=");
  CHECK(c.to_vector<int64_t>() == std::vector<int64_t>{0, 0, 0});
  c += 2;
  c *= from_vector<int64_t>({1, 2, 3});
  CHECK(c.to_vector<int64_t>() == std::vector<int64_t>{2, 4, 6});
  Tensor flags = zeros({2}, {.dtype = DType::boolean});
  PRECIS_REQUIRE_THROWS_WITH_ALL(flags += 1, DTypeError, "operator+=", "bool");
  // On a tensor that requires grad, the error names the operator the user wrote.
  Tensor w = ones({2}).requires_grad_();
  PRECIS_REQUIRE_THROWS_WITH_ALL(w -= ones({2}), StateError, "operator-=", "NoGradGuard");
}

TEST_CASE("clamp: PyTorch's values and gradient, one-sided bounds, min > max, NaN", "[ops][binary]") {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const Tensor x = from_vector<float>({-2.0f, -1.0f, 0.0f, 0.5f, 1.0f, 3.0f}).requires_grad_();
  const Tensor y = clamp(x, -1.0, 1.0);
  CHECK(y.to_vector<float>() == std::vector<float>{-1.0f, -1.0f, 0.0f, 0.5f, 1.0f, 1.0f});
  sum(mul(y, 3.0)).backward();
  // Elements at a bound get no gradient, as torch.clamp's with scalar bounds (PyTorch 2.15:
  // [0, 0, 3, 3, 0, 0]); clamp(min=-1) passes it at 1, and clamp(max=1) at -1.
  CHECK(x.grad().to_vector<float>() == std::vector<float>{0.0f, 0.0f, 3.0f, 3.0f, 0.0f, 0.0f});
  const Tensor x2 = x.detach().clone().requires_grad_();
  sum(add(clamp(x2, -1.0), clamp(x2, std::nullopt, 1.0))).backward();
  CHECK(x2.grad().to_vector<float>() == std::vector<float>{1.0f, 1.0f, 2.0f, 2.0f, 1.0f, 1.0f});
  const Tensor plain = from_vector<float>({-2.0f, 0.5f, 3.0f, nan});
  CHECK(clamp(plain, 0.0).to_vector<float>()[0] == 0.0f);
  CHECK(clamp(plain, std::nullopt, 1.0).to_vector<float>()[2] == 1.0f);
  CHECK(std::isnan(clamp(plain, 0.0, 1.0).to_vector<float>()[3]));
  CHECK(clamp(plain.slice(0, 0, 3), 2.0, 1.0).to_vector<float>() == std::vector<float>{1.0f, 1.0f, 1.0f});  // min > max
  for (DType dt : {DType::bf16, DType::f16, DType::f64, DType::i64}) {
    INFO(dtype_name(dt));
    const Tensor c = clamp(from_vector<double>({-5.0, 2.0, 7.0}).to(dt), -1, 4);
    CHECK(c.dtype() == dt);
    CHECK(c.to(DType::f64).to_vector<double>() == std::vector<double>{-1.0, 2.0, 4.0});
  }
  PRECIS_REQUIRE_THROWS_WITH_ALL(clamp(plain, std::nullopt, std::nullopt), ValueError, "clamp", "min, max");
}

TEST_CASE("clamp: a bound of a higher kind promotes as PyTorch's, and a NaN bound gives NaN", "[ops][binary]") {
  // PyTorch 2.15: clamp(i64 [1, 2, 3], 1.5) = f32 [1.5, 2, 3] (precis gave i64 [1, 2, 3], the
  // bound truncated); clamp(bool, 0, 0) = i64; clamp(x, NaN) = NaN everywhere (x was unchanged).
  const Tensor c = clamp(from_vector<int64_t>({1, 2, 3}), 1.5);
  CHECK(c.dtype() == DType::f32);
  CHECK(c.to_vector<float>() == std::vector<float>{1.5f, 2.0f, 3.0f});
  const Tensor b = clamp(from_vector<int64_t>({1, 0}).to(DType::boolean), 0, 0);
  CHECK(b.dtype() == DType::i64);
  CHECK(b.to_vector<int64_t>() == std::vector<int64_t>{0, 0});
  CHECK(clamp(from_vector<int64_t>({1, 2, 3}), 2).dtype() == DType::i64);
  const Tensor x = from_vector<float>({1.0f, 2.0f}).requires_grad_();
  for (const Tensor& y : {clamp(x, NAN), clamp(x, std::nullopt, NAN)}) {
    for (float v : y.to_vector<float>()) CHECK(std::isnan(v));
    sum(y).backward();
    CHECK(x.grad().to_vector<float>() == std::vector<float>{0.0f, 0.0f});
  }
}

TEST_CASE("next to f16/bf16, add, sub and the comparisons round an inexact scalar to the dtype, mul and div do not",
          "[ops][binary]") {
  // PyTorch 2.15 on the CPU, op by op: x_f16 == 0.1 is true where x holds f16's 0.1 (it was false:
  // the comparison ran in f32 against the unrounded 0.1); x + 0.3 adds f16's 0.3; x * 0.1 and
  // x / 0.1 keep 0.1 in fp32.
  for (DType dt : {DType::f16, DType::bf16}) {
    INFO(dtype_name(dt));
    Tensor x = full({20}, 0.1, {.dtype = dt});
    CHECK(eq(x, 0.1).to(DType::i64).sum().item<int64_t>() == 20);
    CHECK(ne(x, 0.1).to(DType::i64).sum().item<int64_t>() == 0);
    CHECK(le(x, 0.1).to(DType::i64).sum().item<int64_t>() == 20);
    CHECK(ge(x, 0.1).to(DType::i64).sum().item<int64_t>() == 20);
    CHECK(lt(x, 0.1).to(DType::i64).sum().item<int64_t>() == 0);
    CHECK(gt(x, 0.1).to(DType::i64).sum().item<int64_t>() == 0);
    const float x0 = x.to_vector<float>()[0];
    const float s03 = full({1}, 0.3, {.dtype = dt}).item<float>();  // 0.3 rounded to dt
    Tensor y = full({20}, -0.2998, {.dtype = dt});
    const float y0 = y.to_vector<float>()[0];
    auto round_dt = [&](float v) { return full({1}, static_cast<double>(v), {.dtype = dt}).item<float>(); };
    CHECK(add(y, 0.3).to_vector<float>()[19] == round_dt(y0 + s03));
    CHECK(sub(y, -0.3).to_vector<float>()[19] == round_dt(y0 + s03));
    CHECK(mul(x, 0.1).to_vector<float>()[19] == round_dt(x0 * 0.1f));
    CHECK(div(x, 0.1).to_vector<float>()[19] == round_dt(x0 / 0.1f));
  }
  // A scalar the dtype cannot hold at all is still applied in f32 (PyTorch raises an overflow).
  CHECK(lt(full({3}, 60000.0, {.dtype = DType::f16}), 70000.0).to(DType::i64).sum().item<int64_t>() == 3);
}
