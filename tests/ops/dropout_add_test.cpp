// dropout_add: against the unfused add(dropout(x), residual) on the same generator (bit for bit
// where the pair rounds nowhere the fused op does not, within x's rounding elsewhere) and against a
// naive f64 reference built from dropout's mask functions, forward and backward, for every dtype
// mix, 1 and 2 threads, sizes with tails and strided operands; bf16 autocast with an fp32
// residual; eval, p = 0 and p = 1; the composite paths; bad inputs; gradient-check cases (which
// the f16/bf16 table of tests/ops/lowp_test.cpp runs too).
#include <algorithm>
#include <cmath>

#include "amp/autocast.h"
#include "autograd/engine.h"
#include "core/rng.h"
#include "core/thread_pool.h"
#include "ops/math/dropout_math.h"
#include "ops/functional.h"
#include "ops/profiler.h"
#include "tests/support/op_cases.h"
#include "tests/support/tensor_testing.h"

using namespace precis;
using namespace precis::testing;

namespace {

// Unit roundoff: half an ulp of 1.
double unit_roundoff(DType dt) {
  switch (dt) {
    case DType::f64: return 0x1p-53;
    case DType::f32: return 0x1p-24;
    case DType::f16: return 0x1p-11;
    case DType::bf16: return 0x1p-8;
    default: return 0.0;
  }
}
// The spacing of the dtype's subnormals: an absolute floor under the relative bounds (f16's is
// 6e-8, which a value near 1e-5 reaches).
double subnormal_spacing(DType dt) {
  switch (dt) {
    case DType::f64: return 0x1p-1074;
    case DType::f32: return 0x1p-149;
    case DType::f16: return 0x1p-24;
    case DType::bf16: return 0x1p-133;
    default: return 0.0;
  }
}
// The compute type's: fp32 unless everything is f64.
double compute_roundoff(DType out) { return out == DType::f64 ? 0x1p-53 : 0x1p-24; }

struct Mix {
  DType x, r;
};
constexpr Mix kMixes[] = {{DType::f32, DType::f32},   {DType::f64, DType::f64}, {DType::bf16, DType::f32},
                          {DType::f16, DType::f32},   {DType::bf16, DType::bf16}, {DType::f16, DType::f16},
                          {DType::f32, DType::bf16},  {DType::f32, DType::f16}};

// The pair rounds x·scale to x's dtype before the add; the fused op does not. So they agree bit for
// bit exactly when x's dtype is the result's and that is the compute type (f32, f64).
bool pair_rounds_like_fused(DType x, DType out) { return x == out && !is_low_precision(out); }

struct Case {
  Tensor x, r;
};

Case make(const Shape& shape, Mix m, bool strided, uint64_t seed, bool requires_grad = false) {
  Tensor x = randn_input(shape, false, seed, DType::f32).to(m.x);
  Tensor r = randn_input(shape, false, seed + 1, DType::f32).to(m.r);
  if (strided) {
    x = non_contiguous(x);
    r = non_contiguous(r);
  }
  if (requires_grad) {
    x.requires_grad_(true);
    r.requires_grad_(true);
  }
  return {x, r};
}

// Which elements dropout keeps for a generator at (seed, offset), by the scalar mask rule.
std::vector<bool> mask_of(uint64_t seed, uint64_t offset, int64_t n, double p) {
  const uint32_t threshold = kernels::dropout_keep_threshold(p);
  std::vector<bool> keep(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) keep[static_cast<size_t>(i)] = kernels::dropout_keep_at(seed, offset, i, threshold);
  return keep;
}

struct ThreadsGuard {
  int saved = get_num_threads();
  ~ThreadsGuard() { set_num_threads(saved); }
};

const std::vector<Shape> kShapes = {{5}, {37, 53}, {129, 257}};  // tails; 129·257 spans several chunks

}  // namespace

TEST_CASE("dropout_add forward: the pair's values and mask, and the naive f64 sum", "[ops][dropout_add]") {
  ThreadsGuard guard;
  const double p = 0.3;
  for (const Mix m : kMixes)
    for (const Shape& shape : kShapes)
      for (bool strided : {false, true})
        for (int threads : {1, 2}) {
          set_num_threads(threads);
          INFO(dtype_name(m.x) << " x, " << dtype_name(m.r) << " residual, " << shape_str(shape)
                               << (strided ? " strided" : "") << ", " << threads << " threads");
          const Case c = make(shape, m, strided, 11);
          Generator g1(42), g2(42);
          g1.reserve(3);  // start mid-stream: the offset matters
          g2.reserve(3);
          const uint64_t offset = g1.offset();
          const Tensor fused = dropout_add(c.x, c.r, p, true, &g1);
          const Tensor pair = add(dropout(c.x, p, true, &g2), c.r);
          REQUIRE(fused.dtype() == pair.dtype());
          REQUIRE(fused.sizes() == shape);
          REQUIRE(g1.offset() == g2.offset());  // the generator advances as dropout's
          const DType od = fused.dtype();
          const auto fv = fused.to_vector<double>(), pv = pair.to_vector<double>();
          const auto xv = c.x.to_vector<double>(), rv = c.r.to_vector<double>();
          const auto keep = mask_of(42, offset, fused.numel(), p);
          const double scale = 1.0 / (1.0 - p), ux = unit_roundoff(m.x), uo = unit_roundoff(od),
                       uc = compute_roundoff(od);
          if (pair_rounds_like_fused(m.x, od)) {
            REQUIRE(fv == pv);
          }
          for (size_t i = 0; i < fv.size(); ++i) {
            const double xs = keep[i] ? xv[i] * scale : 0.0, ref = rv[i] + xs;
            INFO("element " << i << ": fused " << fv[i] << ", pair " << pv[i] << ", f64 " << ref);
            // The pair differs by the rounding of x·scale to x's dtype, then both round to out's.
            REQUIRE(std::abs(fv[i] - pv[i]) <= ux * std::abs(xs) + uo * (std::abs(fv[i]) + std::abs(pv[i])) +
                                                   subnormal_spacing(m.x) + 2 * subnormal_spacing(od));
            // One rounding to out's dtype after fp32 (f64) arithmetic: a wrong mask is off by |x·scale|.
            REQUIRE(std::abs(fv[i] - ref) <=
                    uo * std::abs(ref) + 4 * uc * (std::abs(xs) + std::abs(rv[i])) + subnormal_spacing(od));
            if (!keep[i]) REQUIRE(fv[i] == pv[i]);  // dropped: residual + 0 in both
          }
        }
}

TEST_CASE("dropout_add backward: the mask on the gradient, rounded once to x's dtype", "[ops][dropout_add]") {
  ThreadsGuard guard;
  const double p = 0.45;
  for (const Mix m : kMixes)
    for (const Shape& shape : {Shape{37, 53}, Shape{129, 257}})
      for (int threads : {1, 2}) {
        set_num_threads(threads);
        INFO(dtype_name(m.x) << " x, " << dtype_name(m.r) << " residual, " << shape_str(shape) << ", " << threads
                             << " threads");
        const Case c = make(shape, m, false, 21, true);
        Generator g1(7), g2(7);
        const Tensor fused = dropout_add(c.x, c.r, p, true, &g1);
        const Tensor pair = add(dropout(c.x, p, true, &g2), c.r);
        const Tensor gy = randn_input(shape, false, 23, DType::f32).to(fused.dtype());
        const TensorList gf = autograd::grad({fused}, {c.x, c.r}, {gy});
        const TensorList gp = autograd::grad({pair}, {c.x, c.r}, {gy});
        REQUIRE(gf[0].dtype() == m.x);
        REQUIRE(gf[1].dtype() == m.r);
        REQUIRE(gf[1].to_vector<double>() == gp[1].to_vector<double>());  // g, cast where needed
        if (m.r == fused.dtype()) CHECK(gf[1].data_ptr() == gy.data_ptr());  // no copy
        const auto fx = gf[0].to_vector<double>(), px = gp[0].to_vector<double>(), gv = gy.to_vector<double>();
        // The pair rounds g to x's dtype before masking when x is narrower than the output.
        if (m.x == fused.dtype()) REQUIRE(fx == px);
        const auto keep = mask_of(7, 0, fused.numel(), p);
        const double scale = 1.0 / (1.0 - p), ux = unit_roundoff(m.x), uc = compute_roundoff(fused.dtype());
        for (size_t i = 0; i < fx.size(); ++i) {
          const double ref = keep[i] ? gv[i] * scale : 0.0;
          INFO("element " << i << ": fused " << fx[i] << ", pair " << px[i] << ", f64 " << ref);
          const double floor = subnormal_spacing(m.x);
          REQUIRE(std::abs(fx[i] - ref) <= (ux + 2 * uc) * std::abs(ref) + floor);
          REQUIRE(std::abs(fx[i] - px[i]) <= 3 * ux * std::abs(ref) + 2 * floor);
        }
      }
}

TEST_CASE("dropout_add under bf16 autocast: a bf16 dense output, an fp32 residual, an fp32 sum", "[ops][dropout_add][amp]") {
  Generator init(3);
  const Tensor a = randn({64, 48}, {}, &init).requires_grad_(true), w = mul(randn({40, 48}, {}, &init), 0.2),
               b = randn({40}, {}, &init), r = randn({64, 40}, {}, &init).requires_grad_(true);
  Tensor fused, pair, h;
  Generator g1(5), g2(5);
  {
    amp::Autocast ac(DType::bf16);
    h = linear(a, w, b);
    REQUIRE(h.dtype() == DType::bf16);
    fused = dropout_add(h, r, 0.1, true, &g1);
    pair = add(dropout(h, 0.1, true, &g2), r);
  }
  REQUIRE(fused.dtype() == DType::f32);
  REQUIRE(pair.dtype() == DType::f32);
  const auto fv = fused.to_vector<double>(), pv = pair.to_vector<double>(), hv = h.to_vector<double>(),
             rv = r.to_vector<double>();
  const auto keep = mask_of(5, 0, fused.numel(), 0.1);
  const double scale = 1.0 / 0.9;
  size_t differ = 0;
  for (size_t i = 0; i < fv.size(); ++i) {
    const double xs = keep[i] ? hv[i] * scale : 0.0, ref = rv[i] + xs;
    INFO("element " << i);
    // fp32 of the exact sum: within an fp32 rounding or two of it, where the pair also carries
    // the bf16 rounding of h·scale.
    REQUIRE(std::abs(fv[i] - ref) <= 0x1p-22 * (std::abs(xs) + std::abs(rv[i])));
    REQUIRE(std::abs(fv[i] - pv[i]) <= 0x1p-8 * std::abs(xs) + 0x1p-23 * (std::abs(fv[i]) + std::abs(pv[i])));
    differ += fv[i] != pv[i];
  }
  CHECK(differ > 0);  // the pair's extra bf16 rounding shows somewhere (it is what the op removes)
  const Tensor gy = randn({64, 40}, {}, &init);
  const TensorList gf = autograd::grad({fused}, {h, r}, {gy}, /*retain_graph=*/true),
                   gp = autograd::grad({pair}, {h, r}, {gy}, /*retain_graph=*/true);
  REQUIRE(gf[0].dtype() == DType::bf16);
  REQUIRE(gf[1].dtype() == DType::f32);
  REQUIRE(gf[1].to_vector<double>() == gy.to_vector<double>());
  const auto fx = gf[0].to_vector<double>(), px = gp[0].to_vector<double>(), gv = gy.to_vector<double>();
  for (size_t i = 0; i < fx.size(); ++i) {
    const double ref = keep[i] ? gv[i] * scale : 0.0;
    REQUIRE(std::abs(fx[i] - ref) <= (0x1p-8 + 0x1p-23) * std::abs(ref));
    REQUIRE(std::abs(fx[i] - px[i]) <= 3 * 0x1p-8 * std::abs(ref));
  }
  // And the gradient reaches the fp32 leaves through the bf16 linear.
  const TensorList leaves = autograd::grad({fused}, {a, r}, {gy});
  REQUIRE(leaves[0].dtype() == DType::f32);
  REQUIRE(leaves[0].sizes() == a.sizes());
}

TEST_CASE("dropout_add under bf16 autocast runs one kernel each way and no cast", "[ops][dropout_add][amp]") {
  // The point of the op: a bf16 x beside an fp32 residual is not cast to fp32 first (autocast's
  // Promote would, but the op asks the hook to leave it), and the fp32 gradient is not cast back
  // before the mask.
  Tensor x = randn_input({64, 40}, true, 71, DType::bf16), r = randn_input({64, 40}, true, 72, DType::f32);
  const Tensor gy = randn_input({64, 40}, false, 73, DType::f32);
  profiler::reset();
  profiler::set_enabled(true);
  {
    amp::Autocast ac(DType::bf16);
    Generator g(3);
    const Tensor y = dropout_add(x, r, 0.2, true, &g);
    REQUIRE(y.dtype() == DType::f32);
    (void)autograd::grad({y}, {x, r}, {gy});
  }
  profiler::set_enabled(false);
  int64_t fwd = 0, bwd = 0;
  for (const profiler::Entry& e : profiler::entries()) {
    INFO(e.name << " " << profiler::direction_name(e.direction) << " " << e.calls);
    CHECK(e.name != "copy");
    CHECK(e.name != "cast");
    if (e.name == "dropout_add") (e.direction == profiler::Direction::forward ? fwd : bwd) += e.calls;
  }
  profiler::reset();
  CHECK(fwd == 1);
  CHECK(bwd >= 1);
}

TEST_CASE("dropout_add is add in eval and at p = 0, and the residual at p = 1", "[ops][dropout_add]") {
  for (const Mix m : {Mix{DType::f32, DType::f32}, Mix{DType::bf16, DType::f32}, Mix{DType::f64, DType::f64}}) {
    INFO(dtype_name(m.x) << " x, " << dtype_name(m.r) << " residual");
    const Case c = make({6, 7}, m, false, 31, true);
    const Tensor plain = add(c.x, c.r);
    for (const auto& [p, training] : {std::pair{0.5, false}, std::pair{0.0, true}}) {
      Generator g(9);
      const Tensor y = dropout_add(c.x, c.r, p, training, &g);
      REQUIRE(g.offset() == 0);  // nothing drawn
      REQUIRE(y.dtype() == plain.dtype());
      REQUIRE(y.to_vector<double>() == plain.to_vector<double>());
    }
    // p = 1: dropout gives zeros (and a zero gradient) without drawing; so does dropout_add.
    Generator g1(9), g2(9);
    const Tensor y = dropout_add(c.x, c.r, 1.0, true, &g1);
    const Tensor pair = add(dropout(c.x, 1.0, true, &g2), c.r);
    REQUIRE(g1.offset() == 0);
    REQUIRE(y.dtype() == pair.dtype());
    REQUIRE(y.to_vector<double>() == c.r.to_vector<double>());
    const Tensor gy = randn_input({6, 7}, false, 33, y.dtype());
    const TensorList gs = autograd::grad({y}, {c.x, c.r}, {gy});
    REQUIRE(gs[0].to_vector<double>() == std::vector<double>(42, 0.0));
    REQUIRE(gs[1].to_vector<double>() == gy.to(m.r).to_vector<double>());
  }
}

TEST_CASE("dropout_add runs the pair itself for broadcasting and f64 beside f32", "[ops][dropout_add]") {
  struct Shapes {
    Shape x, r;
    Mix m;
  };
  for (const Shapes& s : {Shapes{{37, 53}, {53}, {DType::f32, DType::f32}},
                          Shapes{{4, 1, 5}, {3, 5}, {DType::bf16, DType::f32}},
                          Shapes{{37, 53}, {37, 53}, {DType::f64, DType::f32}}}) {
    INFO(shape_str(s.x) << " " << dtype_name(s.m.x) << " x, " << shape_str(s.r) << " " << dtype_name(s.m.r));
    Tensor x = randn_input(s.x, false, 41, DType::f32).to(s.m.x).requires_grad_(true);
    Tensor r = randn_input(s.r, false, 42, DType::f32).to(s.m.r).requires_grad_(true);
    Generator g1(13), g2(13);
    const Tensor fused = dropout_add(x, r, 0.5, true, &g1), pair = add(dropout(x, 0.5, true, &g2), r);
    REQUIRE(g1.offset() == g2.offset());
    REQUIRE(fused.sizes() == pair.sizes());
    REQUIRE(fused.dtype() == pair.dtype());
    REQUIRE(fused.to_vector<double>() == pair.to_vector<double>());
    const Tensor gy = randn_input(fused.sizes(), false, 43, fused.dtype());
    const TensorList gf = autograd::grad({fused}, {x, r}, {gy}), gp = autograd::grad({pair}, {x, r}, {gy});
    REQUIRE(gf[0].to_vector<double>() == gp[0].to_vector<double>());
    REQUIRE(gf[1].to_vector<double>() == gp[1].to_vector<double>());
  }
}

TEST_CASE("dropout_add draws from the default generator and new masks on each call", "[ops][dropout_add]") {
  const Tensor x = randn_input({40, 9}, false, 51, DType::f32), r = zeros({40, 9});
  manual_seed(17);
  const auto first = dropout_add(x, r).to_vector<float>();
  const auto second = dropout_add(x, r).to_vector<float>();
  REQUIRE(first != second);
  manual_seed(17);
  REQUIRE(dropout_add(x, r).to_vector<float>() == first);
  manual_seed(17);
  REQUIRE(add(dropout(x), r).to_vector<float>() == first);
}

TEST_CASE("dropout_add rejects bad operands and p with the operands in the message", "[ops][dropout_add]") {
  const Tensor x = zeros({3, 4}), r = zeros({3, 4});
  PRECIS_REQUIRE_THROWS_WITH_ALL(dropout_add(x, r, 1.5), ValueError, "dropout_add", "p must be in [0, 1]", "1.5",
                                 "x [3, 4] f32 cpu", "residual [3, 4] f32 cpu");
  PRECIS_REQUIRE_THROWS_WITH_ALL(dropout_add(x, r, -0.25), ValueError, "dropout_add", "-0.25");
  PRECIS_REQUIRE_THROWS_WITH_ALL(dropout_add(x, zeros({3, 5})), ShapeError, "dropout_add", "x [3, 4] f32 cpu",
                                 "residual [3, 5] f32 cpu");
  PRECIS_REQUIRE_THROWS_WITH_ALL(dropout_add(x, zeros({3, 4}, {.dtype = DType::i64})), DTypeError, "dropout_add",
                                 "residual [3, 4] i64 cpu", ".to(DType::f32)");
  PRECIS_REQUIRE_THROWS_WITH_ALL(dropout_add(Tensor(), r), ValueError, "dropout_add", "undefined");
}

namespace {

Tensor f32(const Shape& s) { return zeros(s); }

const bool kDropoutAddErrors = register_error_cases({
    PRECIS_BAD_INPUT(dropout_add, ShapeError, "shapes that do not broadcast", dropout_add(f32({3, 4}), f32({2, 4})),
                     "dropout_add", "x [3, 4] f32 cpu", "residual [2, 4] f32 cpu"),
    PRECIS_BAD_INPUT(dropout_add, ValueError, "p above 1", dropout_add(f32({4}), f32({4}), 1.5), "dropout_add", "1.5"),
    PRECIS_BAD_INPUT(dropout_add, ValueError, "p below 0", dropout_add(f32({4}), f32({4}), -0.5), "dropout_add",
                     "-0.5"),
    PRECIS_BAD_INPUT(dropout_add, DTypeError, "an integer x", dropout_add(zeros({4}, {.dtype = DType::i64}), f32({4})),
                     "dropout_add", "x [4] i64 cpu"),
});

const bool kDropoutAddGradCases = register_grad_cases({
    {OpId::dropout_add, "p 0.3 fixed seed, tails",
     [] { return TensorList{randn_input({5, 7}, true, 61), randn_input({5, 7}, true, 62)}; },
     [](const TensorList& x) {
       Generator g(123);
       return TensorList{dropout_add(x[0], x[1], 0.3, true, &g)};
     }},
    {OpId::dropout_add, "non-contiguous operands, p 0.6",
     [] { return TensorList{non_contiguous(randn_input({3, 6}, true, 63)), non_contiguous(randn_input({3, 6}, true, 64))}; },
     [](const TensorList& x) {
       Generator g(7);
       return TensorList{dropout_add(x[0], x[1], 0.6, true, &g)};
     }},
    {OpId::dropout_add, "34 elements, p 0.5 (the composite paths record add and dropout instead)",
     [] { return TensorList{randn_input({2, 17}, true, 65), randn_input({2, 17}, true, 66)}; },
     [](const TensorList& x) {
       Generator g(9);
       return TensorList{dropout_add(x[0], x[1], 0.5, true, &g)};
     }},
});

}  // namespace
