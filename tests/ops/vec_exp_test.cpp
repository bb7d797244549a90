// The shifted exponential under softmax, log_softmax and cross_entropy (ops/cpu/vec_exp.h,
// exp_shift_sum): accuracy against the library exp over a dense sweep of its domain, the same
// bits on the AVX2 and AVX-512 paths (cross_entropy's bf16-in-kernel and cast paths, and the
// fused cross_entropy_with_grad, rely on every caller computing the same exponentials), its
// edges (FLT_MIN flush, −inf, NaN, arguments above the shift) and every tail length.
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "ops/cpu/vec_exp.h"
#include "tests/support/tensor_testing.h"

using namespace precis;

namespace {

bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0; }

// The distance from want to got in units of the fp32 ulp at want.
double ulps(float got, double want) {
  const double ulp = std::ldexp(1.0, std::ilogb(static_cast<float>(want)) - 23);
  return std::abs(static_cast<double>(got) - want) / ulp;
}

}  // namespace

TEST_CASE("exp_shift_sum: within 1 ulp of exp over its domain, and the same bits on both paths", "[ops][softmax]") {
  // Every 97th fp32 value in [−88, 0] (about 11.5 M of them, all exponents), shifted by 0 and
  // by a row maximum.
  const float kMin = std::numeric_limits<float>::min();
  std::vector<float> x;
  uint32_t lo_bits, hi_bits;
  const float lo = -88.0f, zero = -0.0f;
  std::memcpy(&lo_bits, &lo, 4);
  std::memcpy(&hi_bits, &zero, 4);
  for (uint64_t b = hi_bits; b <= lo_bits; b += 97) {
    const uint32_t u = static_cast<uint32_t>(b);
    float v;
    std::memcpy(&v, &u, 4);
    x.push_back(v);
  }
  const int64_t n = static_cast<int64_t>(x.size());
  std::vector<float> y2(x.size()), y5(x.size());
  // (The returned sums of 11.5 M terms are not compared: that is the fp32 lanes' accumulation,
  // tested on rows of realistic length below and in softmax_test.)
  (void)cpu::vec_detail::exp_shift_sum_avx2(x.data(), y2.data(), n, 0.0f, 1.0f);
  double worst = 0;
  size_t flushed_wrong = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double want = std::exp(static_cast<double>(x[i]));
    if (want < kMin) {
      flushed_wrong += y2[i] != 0.0f && x[i] < -87.33654475f;
    } else {
      worst = std::max(worst, ulps(y2[i], want));
    }
  }
  CAPTURE(worst);
  CHECK(worst <= 1.0);
  CHECK(flushed_wrong == 0);
#if PRECIS_VEC_EXP_AVX512
  if (cpu::vec_detail::use_avx512()) {
    (void)cpu::vec_detail::exp_shift_sum_avx512(x.data(), y5.data(), n, 0.0f, 1.0f);
    size_t differ = 0;
    for (size_t i = 0; i < x.size(); ++i) differ += !same_bits(y2[i], y5[i]);
    CHECK(differ == 0);
  } else {
    WARN("this CPU has no AVX-512: the AVX-512 path of exp_shift_sum is not compared");
  }
#else
  WARN("not an x86-64 GCC/Clang build: exp_shift_sum has one path");
#endif
}

TEST_CASE("exp_shift_sum: edges, scale, shift and every tail length on both paths", "[ops][softmax]") {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  // Shift 3: 3 − 3 = 0 → 1; 5 > shift is treated as 0 → 1; −inf → 0; NaN → NaN; below
  // ln(FLT_MIN) → exactly 0; just above it → a normal number.
  const std::vector<float> special = {3.0f, 5.0f, -inf, nan, 3.0f - 87.4f, 3.0f - 87.3f, 3.0f - 200.0f, 2.0f};
  for (bool wide : {false, true}) {
#if PRECIS_VEC_EXP_AVX512
    if (wide && !cpu::vec_detail::use_avx512()) continue;
#else
    if (wide) continue;
#endif
    auto run = [&](const float* x, float* y, int64_t n, float shift, float scale) {
#if PRECIS_VEC_EXP_AVX512
      if (wide) return cpu::vec_detail::exp_shift_sum_avx512(x, y, n, shift, scale);
#endif
      return cpu::vec_detail::exp_shift_sum_avx2(x, y, n, shift, scale);
    };
    INFO((wide ? "AVX-512" : "AVX2") << " path");
    std::vector<float> y(special.size());
    const float s = run(special.data(), y.data(), static_cast<int64_t>(special.size()), 3.0f, 2.0f);
    CHECK(y[0] == 2.0f);
    CHECK(y[1] == 2.0f);
    CHECK(same_bits(y[2], 0.0f));
    CHECK(std::isnan(y[3]));
    CHECK(same_bits(y[4], 0.0f));
    CHECK(y[5] > 0.0f);
    CHECK(same_bits(y[6], 0.0f));
    CHECK(std::abs(y[7] - 2.0 * std::exp(-1.0)) <= 2.0 * std::exp(-1.0) * 0x1p-23);
    CHECK(std::isnan(s));
    // Every length 0 .. 70 (the 2-vector loop, its 1-vector tail, partial lanes): the sum, and
    // y written exactly on [0, n) and nowhere after it.
    std::vector<float> row(70);
    for (size_t i = 0; i < row.size(); ++i) row[i] = -0.173f * static_cast<float>(i);
    for (int64_t len = 0; len <= 70; ++len) {
      std::vector<float> out(72, -1.0f);
      const float sum = run(row.data(), out.data(), len, 0.0f, 1.0f);
      double want = 0;
      for (int64_t i = 0; i < len; ++i) {
        const double e = std::exp(static_cast<double>(row[i]));
        want += e;
        CHECK(ulps(out[i], e) <= 1.0);
      }
      CHECK(std::abs(sum - want) <= 1e-6 * std::max(want, 1.0));
      CHECK(out[len] == -1.0f);
      CHECK(run(row.data(), nullptr, len, 0.0f, 1.0f) == sum);
    }
  }
}
