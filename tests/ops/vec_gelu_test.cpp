// The erf form of gelu in fp32 (ops/cpu/vec_gelu.h): accuracy of gelu and gelu' against the f64
// reference over a dense sweep, the same bits on the AVX2, AVX-512 and scalar paths (gelu,
// gelu_backward and linear_gelu's epilogue rely on it for their bit-identity in any split), every
// tail length, and the special values.
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "ops/cpu/vec_gelu.h"
#include "tests/support/tensor_testing.h"

using namespace precis;
namespace gv = precis::cpu::gelu_vec_detail;

namespace {

bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0; }

// Every step-th fp32 value in [lo, hi] (both signs' bit patterns walked from 0 outwards).
std::vector<float> sweep(float hi, uint32_t step) {
  std::vector<float> x;
  uint32_t top;
  std::memcpy(&top, &hi, 4);
  for (uint64_t b = 0; b <= top; b += step) {
    const uint32_t u = static_cast<uint32_t>(b);
    float v;
    std::memcpy(&v, &u, 4);
    x.push_back(v);
    x.push_back(-v);
  }
  return x;
}

struct Outputs {
  std::vector<float> y, d, y_only, d_only, gd;
};

// The three instantiations of each path, as the dispatch calls them.
struct ScalarPath {
  template <bool kY, bool kD> static void run(const float* g, const float* x, float* y, float* d, int64_t n) {
    gv::gelu_erf_scalar_loop<kY, kD>(g, x, y, d, n);
  }
};
#if PRECIS_VEC_EXP_AVX512
struct Avx2Path {
  template <bool kY, bool kD> static void run(const float* g, const float* x, float* y, float* d, int64_t n) {
    gv::gelu_erf_avx2<kY, kD>(g, x, y, d, n);
  }
};
struct Avx512Path {
  template <bool kY, bool kD> static void run(const float* g, const float* x, float* y, float* d, int64_t n) {
    gv::gelu_erf_avx512<kY, kD>(g, x, y, d, n);
  }
};
#endif

// One path's outputs over x: gelu and gelu' together and each alone, and g·gelu' (g: a pattern).
template <typename Path>
Outputs run(const std::vector<float>& x, const std::vector<float>& g) {
  const int64_t n = static_cast<int64_t>(x.size());
  std::vector<float> v(x.size());
  Outputs o{v, v, v, v, v};
  Path::template run<true, true>(nullptr, x.data(), o.y.data(), o.d.data(), n);
  Path::template run<true, false>(nullptr, x.data(), o.y_only.data(), nullptr, n);
  Path::template run<false, true>(nullptr, x.data(), nullptr, o.d_only.data(), n);
  Path::template run<false, true>(g.data(), x.data(), nullptr, o.gd.data(), n);
  return o;
}

size_t mismatches(const Outputs& a, const Outputs& b) {
  size_t bad = 0;
  for (size_t i = 0; i < a.y.size(); ++i)
    bad += !same_bits(a.y[i], b.y[i]) || !same_bits(a.d[i], b.d[i]) || !same_bits(a.y_only[i], b.y_only[i]) ||
           !same_bits(a.d_only[i], b.d_only[i]) || !same_bits(a.gd[i], b.gd[i]);
  return bad;
}

std::vector<float> pattern(size_t n) {
  std::vector<float> g(n);
  for (size_t i = 0; i < n; ++i) g[i] = 0.25f + static_cast<float>(i % 13) * 0.37f - (i % 2 ? 2.5f : 0.0f);
  return g;
}

}  // namespace

TEST_CASE("gelu erf form in fp32: accuracy against f64 and the same bits on every path", "[ops][unary]") {
  // Every 61st fp32 value of either sign up to 14 (about 35 M values, every exponent).
  const std::vector<float> x = sweep(14.0f, 61);
  const std::vector<float> g = pattern(x.size());
  const Outputs scalar = run<ScalarPath>(x, g);
  // Each output alone has the bits of both together.
  size_t alone_differs = 0;
  for (size_t i = 0; i < x.size(); ++i)
    alone_differs += !same_bits(scalar.y_only[i], scalar.y[i]) || !same_bits(scalar.d_only[i], scalar.d[i]);
  CHECK(alone_differs == 0);
  constexpr double kFloor = 1e-37;
  double worst_y = 0, worst_d = 0, worst_tiny = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double xv = x[i];
    const double phi = 0.5 * std::erfc(-xv / std::sqrt(2.0));
    const double xdens = xv * std::exp(-0.5 * xv * xv) / std::sqrt(2.0 * M_PI);
    const double y = xv * phi, d = phi + xdens;
    // gelu relative to itself down to |gelu(x)| = 1e-37 (x > -13.1); below, where e^(-x²/2) falls
    // under FLT_MIN and vec_exp.h flushes it to 0, an absolute error under 1e-37 (the flushed
    // values are at most ~6e-38). (1 + erf in the former code cancelled from x < -3 on: an
    // absolute error of ~1e-7 there.) gelu' relative to the size of its two terms (it crosses zero
    // near x = -0.75), with the same floor.
    const double err_y = std::abs(scalar.y[i] - y), err_d = std::abs(scalar.d[i] - d);
    if (std::abs(y) >= kFloor)
      worst_y = std::max(worst_y, err_y / std::abs(y));
    else
      worst_tiny = std::max(worst_tiny, err_y);
    const double terms = phi + std::abs(xdens);
    if (terms >= kFloor)
      worst_d = std::max(worst_d, err_d / terms);
    else
      worst_tiny = std::max(worst_tiny, err_d);
  }
  CAPTURE(worst_y, worst_d, worst_tiny);
  CHECK(worst_y <= 5e-7);
  CHECK(worst_d <= 5e-7);
  CHECK(worst_tiny <= kFloor);
#if PRECIS_VEC_EXP_AVX512
  CHECK(mismatches(run<Avx2Path>(x, g), scalar) == 0);
  if (cpu::vec_detail::use_avx512()) {
    CHECK(mismatches(run<Avx512Path>(x, g), scalar) == 0);
  } else {
    WARN("no AVX-512 on this CPU: the 16-lane path is not compared");
  }
#endif
}

TEST_CASE("gelu erf form in fp32: every tail length and offset gives the scalar bits", "[ops][unary]") {
  std::vector<float> x(64);
  for (size_t i = 0; i < x.size(); ++i) x[i] = -6.0f + 0.1931f * static_cast<float>(i);
  const std::vector<float> g = pattern(x.size());
  for (int64_t off = 0; off < 3; ++off)
    for (int64_t n = 0; n + off <= 40; ++n) {
      std::vector<float> y(x.size(), 7.0f), d(x.size(), 7.0f), want_y(x.size(), 7.0f), want_d(x.size(), 7.0f);
      cpu::gelu_erf(x.data() + off, y.data() + off, d.data() + off, n);
      gv::gelu_erf_scalar_loop<true, true>(nullptr, x.data() + off, want_y.data() + off, want_d.data() + off, n);
      CAPTURE(off, n);
      CHECK(std::memcmp(y.data(), want_y.data(), y.size() * 4) == 0);  // also: nothing written past n
      CHECK(std::memcmp(d.data(), want_d.data(), d.size() * 4) == 0);
      cpu::gelu_erf_backward(g.data() + off, x.data() + off, y.data() + off, n);
      gv::gelu_erf_scalar_loop<false, true>(g.data() + off, x.data() + off, nullptr, want_y.data() + off, n);
      CHECK(std::memcmp(y.data(), want_y.data(), y.size() * 4) == 0);
      std::vector<float> y_only(x.size(), 7.0f), want_y_only(x.size(), 7.0f);  // gelu alone
      cpu::gelu_erf(x.data() + off, y_only.data() + off, nullptr, n);
      gv::gelu_erf_scalar_loop<true, false>(nullptr, x.data() + off, want_y_only.data() + off, nullptr, n);
      CHECK(std::memcmp(y_only.data(), want_y_only.data(), y_only.size() * 4) == 0);
    }
}

TEST_CASE("gelu erf form in fp32: special values", "[ops][unary]") {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> x = {inf, -inf, nan, 0.0f, -0.0f, 20.0f, -20.0f, 1e-30f, -1e-30f};
  std::vector<float> y(x.size()), d(x.size());
  cpu::gelu_erf(x.data(), y.data(), d.data(), static_cast<int64_t>(x.size()));
  CHECK(y[0] == inf);
  CHECK(d[0] == 1.0f);
  CHECK(std::isnan(y[1]));  // −inf·Φ(−inf) = −inf·0, NaN as in PyTorch
  CHECK(d[1] == 0.0f);
  CHECK(std::isnan(y[2]));
  CHECK(std::isnan(d[2]));
  CHECK((y[3] == 0.0f && d[3] == 0.5f));
  CHECK((y[4] == 0.0f && d[4] == 0.5f));
  CHECK((y[5] == 20.0f && d[5] == 1.0f));
  CHECK((y[6] == 0.0f && d[6] == 0.0f));
  CHECK((y[7] == 0.5e-30f && d[7] == 0.5f));
  CHECK((y[8] == -0.5e-30f && d[8] == 0.5f));
}
