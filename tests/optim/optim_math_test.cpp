// The host/device math shared by the CPU and CUDA kernels (core/opmath.h, ops/math/optim_math.h),
// run on the host: the same functions the CUDA optimizer and clipping kernels call, compared with
// double (or long double) references and with their special cases.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "core/dtype_visit.h"
#include "core/opmath.h"
#include "ops/math/optim_math.h"

using namespace precis;
using namespace precis::kernels;

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

/// Seeded floats spanning many binades, with the special values.
std::vector<float> sample_floats(size_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> mant(-2.0f, 2.0f);
  std::uniform_int_distribution<int> exp(-30, 20);
  std::vector<float> v = {0.0f, -0.0f, 1.0f, -1.0f, 65504.0f, 65520.0f, 1e-8f, 5.96e-8f, 3e38f,
                          std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                          std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::denorm_min()};
  while (v.size() < n) v.push_back(std::ldexp(mant(gen), exp(gen)));
  return v;
}

/// |got - want| <= rtol · scale, with scale at least 1e-30 (want and got finite).
void check_close(double got, double want, double scale, double rtol) {
  INFO("got " << got << " want " << want << " scale " << scale);
  CHECK(std::abs(got - want) <= rtol * std::max(scale, 1e-30));
}

}  // namespace

// ---- core/opmath.h ----------------------------------------------------------------------------

TEST_CASE("opmath: f16 and bf16 compute in float, the rest in themselves", "[ops][opmath]") {
  STATIC_REQUIRE(std::is_same_v<opmath_t<Half>, float>);
  STATIC_REQUIRE(std::is_same_v<opmath_t<BFloat16>, float>);
  STATIC_REQUIRE(std::is_same_v<opmath_t<float>, float>);
  STATIC_REQUIRE(std::is_same_v<opmath_t<double>, double>);
  STATIC_REQUIRE(std::is_same_v<opmath_t<int64_t>, int64_t>);
  STATIC_REQUIRE(is_reduced_float_v<Half>);
  STATIC_REQUIRE(!is_reduced_float_v<float>);
}

TEST_CASE("opmath: store_op rounds like core/half.h and load_op is exact", "[ops][opmath]") {
  for (float x : sample_floats(4000, 1)) {
    INFO("x = " << x);
    const Half h = store_op<Half>(x);
    const BFloat16 b = store_op<BFloat16>(x);
    CHECK(h.bits == Half(x).bits);
    CHECK(b.bits == BFloat16(x).bits);
    // Widening is exact: a stored value reads back as the float it stands for.
    CHECK(bits_of(load_op(h)) == bits_of(static_cast<float>(h)));
    CHECK(bits_of(load_op(b)) == bits_of(static_cast<float>(b)));
    if (!std::isnan(x)) CHECK(store_op<Half>(load_op(h)).bits == h.bits);  // a round trip keeps the bits
  }
  // Host doubles go through float (what the CPU copy kernel has always done).
  // d is just above a tie between two f16 values; rounded to f32 first, it becomes the tie.
  const double d = 1.0 + std::ldexp(1.0, -11) + std::ldexp(1.0, -40);
  CHECK(store_op<Half>(d).bits == Half(static_cast<float>(d)).bits);
  CHECK(store_op<Half>(d).bits == 0x3c00);  // 1.0 (the tie went to even), not 1 + 2^-10
}

TEST_CASE("opmath: convert goes through the source's compute type", "[ops][opmath]") {
  CHECK(convert<bool>(Half(0.0f)) == false);
  CHECK(convert<bool>(BFloat16(-0.5f)) == true);
  CHECK(convert<int64_t>(Half(-3.75f)) == -3);
  CHECK(convert<float>(true) == 1.0f);
  CHECK(convert<Half>(int32_t{2049}).bits == Half(2048.0f).bits);  // 2049 is not an f16: ties to even
  CHECK(convert<double>(BFloat16(1.5f)) == 1.5);
  CHECK(bits_of(convert<float>(Half::from_bits(0x7e01))) == bits_of(static_cast<float>(Half::from_bits(0x7e01))));
}

TEST_CASE("dtype_visit: one visitor, the inverse of dtype_of", "[ops][opmath]") {
  for (DType dt : {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i64, DType::i32, DType::boolean}) {
    const DType back = visit_dtype(dt, []<typename T>() { return dtype_of<T>(); });
    CHECK(back == dt);
  }
  CHECK(visit_floating_dtype(DType::bf16, []<typename T>() { return sizeof(T); }) == 2);
  CHECK_THROWS_AS(visit_floating_dtype(DType::i64, []<typename T>() { return 0; }), InternalError);
}

// ---- SGD ---------------------------------------------------------------------------------------

namespace {

/// torch.optim.SGD's single-tensor step on one element, in long double.
void sgd_reference(long double& p, long double g, long double& buf, bool first, const SgdHyper& h) {
  if (h.maximize) g = -g;
  if (h.weight_decay != 0) g += h.weight_decay * p;
  if (h.momentum != 0) {
    buf = first ? g : buf * h.momentum + (1 - h.dampening) * g;
    g = h.nesterov ? g + h.momentum * buf : buf;
  }
  p -= h.lr * g;
}

}  // namespace

TEST_CASE("sgd_element matches a long double reference in f32 and f64", "[ops][opmath]") {
  const SgdHyper configs[] = {{.lr = 0.1},
                              {.lr = 0.05, .momentum = 0.9, .dampening = 0.1, .weight_decay = 1e-2},
                              {.lr = 0.01, .momentum = 0.9, .weight_decay = 1e-4, .nesterov = true},
                              {.lr = 0.3, .momentum = 0.5, .maximize = true}};
  std::mt19937 gen(7);
  std::normal_distribution<double> n01;
  for (const SgdHyper& h : configs) {
    for (int trial = 0; trial < 200; ++trial) {
      const double p0 = n01(gen), b0 = n01(gen);
      long double rp = p0, rb = b0;
      float fp = static_cast<float>(p0), fb = static_cast<float>(b0);
      double dp = p0, db = b0;
      long double rp32 = fp, rb32 = fb;  // the reference on the f32-rounded start
      const auto s32 = make_sgd_scalars<float>(h);
      const auto s64 = make_sgd_scalars<double>(h);
      for (int step = 0; step < 5; ++step) {
        const double g = n01(gen);
        const bool first = step == 0 && trial % 2 == 0;
        sgd_reference(rp, g, rb, first, h);
        sgd_reference(rp32, static_cast<float>(g), rb32, first, h);
        sgd_element<double>(dp, g, &db, first, s64);
        sgd_element<float>(fp, static_cast<float>(g), &fb, first, s32);
      }
      check_close(dp, static_cast<double>(rp), std::abs(static_cast<double>(rp)) + 1, 1e-14);
      // f32: each step rounds a few times (the hyperparameters too); 5 steps stay within 1e-6.
      check_close(fp, static_cast<double>(rp32), std::abs(static_cast<double>(rp32)) + 1, 1e-6);
      if (h.momentum != 0) check_close(fb, static_cast<double>(rb32), std::abs(static_cast<double>(rb32)) + 1, 1e-6);
    }
  }
}

TEST_CASE("sgd_element special cases: a new buffer takes the gradient as it is", "[ops][opmath]") {
  const auto s = make_sgd_scalars<float>({.lr = 0.5, .momentum = 0.9, .dampening = 0.5});
  float p = 1.0f, buf = 123.0f;
  sgd_element<float>(p, 0.25f, &buf, /*first=*/true, s);
  CHECK(buf == 0.25f);           // no dampening, no decay of the old value
  CHECK(p == 1.0f - 0.5f * 0.25f);
  // Without momentum the buffer is never touched (nullptr) and the update is p - lr·g.
  const auto plain = make_sgd_scalars<double>({.lr = 0.5});
  double q = 2.0;
  sgd_element<double>(q, 1.0, nullptr, false, plain);
  CHECK(q == 1.5);
  // A NaN gradient makes a NaN parameter (nothing hides it).
  float r = 1.0f;
  sgd_element<float>(r, std::numeric_limits<float>::quiet_NaN(), nullptr, false, make_sgd_scalars<float>({.lr = 0.1}));
  CHECK(std::isnan(r));
}

// ---- Adam --------------------------------------------------------------------------------------

namespace {

/// torch.optim.Adam/AdamW single-tensor step number `step` on one element, in long double.
void adam_reference(long double& p, long double g, long double& m, long double& v, long double& vmax, int step,
                    const AdamHyper& h) {
  if (h.maximize) g = -g;
  if (h.weight_decay != 0) {
    if (h.decoupled_weight_decay) p *= 1 - h.lr * h.weight_decay;
    else g += h.weight_decay * p;
  }
  m = h.beta1 * m + (1 - h.beta1) * g;
  v = h.beta2 * v + (1 - h.beta2) * g * g;
  long double vv = v;
  if (h.amsgrad) {
    vmax = std::max(vmax, v);
    vv = vmax;
  }
  const long double bc1 = 1 - std::pow(static_cast<long double>(h.beta1), step);
  const long double bc2 = 1 - std::pow(static_cast<long double>(h.beta2), step);
  p -= h.lr / bc1 * m / (std::sqrt(vv) / std::sqrt(bc2) + h.eps);
}

}  // namespace

TEST_CASE("make_adam_scalars forms the bias corrections in double", "[ops][opmath]") {
  const AdamHyper h{.lr = 1e-3, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.01};
  for (int step : {1, 2, 10, 1000}) {
    const auto s = make_adam_scalars<double>(h, step);
    CHECK(s.neg_step_size == Approx(-1e-3 / (1 - std::pow(0.9, step))).epsilon(1e-15));
    CHECK(s.bias_correction2_sqrt == Approx(std::sqrt(1 - std::pow(0.999, step))).epsilon(1e-15));
    CHECK(s.w1 == Approx(0.1).epsilon(1e-15));
    CHECK(s.decay_factor == Approx(1 - 1e-5).epsilon(1e-15));
  }
}

TEST_CASE("adam_element matches a long double reference in f32 and f64, both lerp forms", "[ops][opmath]") {
  // beta1 = 0.9 takes lerp's first form (weight 0.1 < 0.5), beta1 = 0.3 the second.
  const AdamHyper configs[] = {
      {.lr = 1e-2, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8},
      {.lr = 1e-2, .beta1 = 0.3, .beta2 = 0.99, .eps = 1e-6, .weight_decay = 0.1},
      {.lr = 1e-3, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.01, .amsgrad = true,
       .decoupled_weight_decay = true},
      {.lr = 1e-2, .beta1 = 0.8, .beta2 = 0.9, .eps = 1e-8, .maximize = true}};
  std::mt19937 gen(11);
  std::normal_distribution<double> n01;
  for (const AdamHyper& h : configs) {
    for (int trial = 0; trial < 100; ++trial) {
      const float p0 = static_cast<float>(n01(gen));
      long double rp = p0, rm = 0, rv = 0, rvmax = 0;
      double dp = p0, dm = 0, dv = 0, dvmax = 0;
      float fp = p0, fm = 0, fv = 0, fvmax = 0;
      for (int step = 1; step <= 30; ++step) {
        const float g = static_cast<float>(n01(gen));
        adam_reference(rp, g, rm, rv, rvmax, step, h);
        adam_element<double>(dp, g, dm, dv, &dvmax, make_adam_scalars<double>(h, step));
        adam_element<float>(fp, g, fm, fv, &fvmax, make_adam_scalars<float>(h, step));
      }
      // The update divides by sqrt(v) + eps: relative errors of m and v carry over to the step
      // (at most lr per step), so the scale is |p| + steps · lr.
      const double scale = std::abs(static_cast<double>(rp)) + 30 * h.lr;
      check_close(dp, static_cast<double>(rp), scale, 1e-12);
      check_close(fp, static_cast<double>(rp), scale, 2e-6);
      check_close(fm, static_cast<double>(rm), std::abs(static_cast<double>(rm)) + 1e-3, 1e-5);
    }
  }
}

TEST_CASE("adam_element: amsgrad keeps the running maximum and NaN propagates", "[ops][opmath]") {
  const AdamHyper h{.lr = 0.1, .beta1 = 0.9, .beta2 = 0.5, .eps = 1e-8, .amsgrad = true};
  float p = 1.0f, m = 0.0f, v = 0.0f, vmax = 0.0f;
  adam_element<float>(p, 4.0f, m, v, &vmax, make_adam_scalars<float>(h, 1));
  const float big = vmax;
  CHECK(big == v);
  adam_element<float>(p, 0.0f, m, v, &vmax, make_adam_scalars<float>(h, 2));
  CHECK(v < big);
  CHECK(vmax == big);  // v decayed, the maximum did not
  CHECK(std::isnan(nan_propagating_max(1.0f, std::numeric_limits<float>::quiet_NaN())));
  CHECK(std::isnan(nan_propagating_max(std::numeric_limits<float>::quiet_NaN(), 1.0f)));
  CHECK(nan_propagating_max(-2.0, 3.0) == 3.0);
}

TEST_CASE("inverse_scale is 1/scale formed in double and rounded once", "[ops][opmath]") {
  for (float s : {1.0f, 3.0f, 65536.0f, 1e-7f, 7.5e30f}) CHECK(inverse_scale(s) == static_cast<float>(1.0 / s));
}

// ---- norms and clipping ------------------------------------------------------------------------

TEST_CASE("norm_accumulate, norm_combine and norm_root give the p-norms of a double reference", "[ops][opmath]") {
  std::mt19937 gen(5);
  std::normal_distribution<double> n01;
  std::vector<double> x(1001);
  for (double& v : x) v = n01(gen);
  auto run = [&](double p) {
    const NormKind k = norm_kind(p);
    double a = 0, b = 0;  // two halves, combined as blocks are
    for (size_t i = 0; i < x.size(); ++i) {
      double& acc = i < 400 ? a : b;
      switch (k) {
        case NormKind::two: acc = norm_accumulate<NormKind::two>(acc, x[i], p); break;
        case NormKind::one: acc = norm_accumulate<NormKind::one>(acc, x[i], p); break;
        case NormKind::inf: acc = norm_accumulate<NormKind::inf>(acc, x[i], p); break;
        case NormKind::general: acc = norm_accumulate<NormKind::general>(acc, x[i], p); break;
      }
    }
    return norm_root(norm_combine(a, b, k), k, p);
  };
  for (double p : {1.0, 2.0, 3.0, 0.5, kInf}) {
    long double ref = 0;
    for (double v : x) ref = std::isinf(p) ? std::max<long double>(ref, std::abs(v)) : ref + std::pow(std::abs(v), p);
    if (!std::isinf(p)) ref = std::pow(ref, 1.0L / p);
    INFO("p = " << p);
    CHECK(run(p) == Approx(static_cast<double>(ref)).epsilon(1e-12));
  }
  CHECK(norm_kind(kInf) == NormKind::inf);
  CHECK(norm_kind(2.0) == NormKind::two);
  CHECK(norm_kind(1.0) == NormKind::one);
  CHECK(norm_kind(2.5) == NormKind::general);
}

TEST_CASE("the inf-norm propagates NaN whichever side it is on", "[ops][opmath]") {
  CHECK(std::isnan(norm_accumulate<NormKind::inf>(1.0, kNaN, kInf)));
  CHECK(std::isnan(norm_accumulate<NormKind::inf>(kNaN, 5.0, kInf)));
  CHECK(std::isnan(norm_combine(kNaN, 5.0, NormKind::inf)));
  CHECK(std::isnan(norm_combine(5.0, kNaN, NormKind::inf)));
  CHECK(norm_combine(2.0, 5.0, NormKind::inf) == 5.0);
  CHECK(norm_accumulate<NormKind::inf>(0.0, -7.0, kInf) == 7.0);
  CHECK(std::isnan(norm_accumulate<NormKind::two>(1.0, kNaN, 2.0)));
}

TEST_CASE("clip_coefficient is PyTorch's f32 formula and clip_scales refuses non-finite totals", "[ops][opmath]") {
  const float c = clip_coefficient(10.0, 1.0);
  CHECK(c == 1.0f * (1.0f / (10.0f + 1e-6f)));
  CHECK(clip_scales(10.0, c));
  CHECK_FALSE(clip_scales(0.5, clip_coefficient(0.5, 1.0)));  // below max_norm: coefficient > 1
  CHECK_FALSE(clip_scales(kInf, clip_coefficient(kInf, 1.0)));
  CHECK_FALSE(clip_scales(kNaN, clip_coefficient(kNaN, 1.0)));
  // A finite f64 total beyond the f32 range is inf where the factor is formed (0): no clip, as for
  // an inf total, rather than every gradient zeroed beside a reported norm of inf.
  CHECK(clip_coefficient(1e300, 1.0) == 0.0f);
  CHECK_FALSE(clip_scales(1e300, clip_coefficient(1e300, 1.0)));
  // f64 gradients' factor: the same formula in f64, where such a total is finite.
  const double c64 = clip_coefficient<double>(10.0 + 1e-12, 1.0);
  CHECK(c64 == 1.0 * (1.0 / (10.0 + 1e-12 + 1e-6)));
  CHECK(c64 != static_cast<double>(clip_coefficient<float>(10.0 + 1e-12, 1.0)));
  CHECK(clip_scales(1e300, clip_coefficient<double>(1e300, 1.0)));
  CHECK_FALSE(clip_scales(kInf, clip_coefficient<double>(kInf, 1.0)));
}

TEST_CASE("clip_value_element clamps both sides and keeps NaN", "[ops][opmath]") {
  CHECK(clip_value_element(3.0f, 0.5f) == 0.5f);
  CHECK(clip_value_element(-3.0f, 0.5f) == -0.5f);
  CHECK(clip_value_element(0.25, 0.5) == 0.25);
  CHECK(std::isnan(clip_value_element(std::numeric_limits<float>::quiet_NaN(), 0.5f)));
  CHECK(clip_value_element(-std::numeric_limits<double>::infinity(), 2.0) == -2.0);
}
