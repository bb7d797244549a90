#pragma once
// The conv tests' closeness check, shared by conv_test.cpp and conv_gemm_test.cpp: a conv's
// error bound scales with the magnitude of the terms it sums (the same reference run on |x|, |w|,
// |grad|), not with the result, because sums of random signs cancel.
#include <cmath>
#include <vector>

#include <catch2/catch.hpp>

#include "tests/support/tensor_testing.h"

namespace precis::testing {

/// |v| element by element.
inline std::vector<double> abs_of(std::vector<double> v) {
  for (double& e : v) e = std::fabs(e);
  return v;
}

/// |actual - expected| <= factor·(atol + rtol·scale) elementwise under dtype's row of the
/// tolerance table; on failure names the worst element.
inline void require_close_scaled(const Tensor& actual, const std::vector<double>& expected,
                                 const std::vector<double>& scale, DType dtype, const char* what, double factor = 1) {
  INFO(what);
  const std::vector<double> a = actual.to_vector<double>();
  REQUIRE(a.size() == expected.size());
  const Tolerance tol = tolerance(dtype);
  double worst = 0;
  size_t worst_i = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double err = std::fabs(a[i] - expected[i]) / (factor * (tol.atol + tol.rtol * scale[i]));
    if (!(err <= worst)) {
      worst = std::isnan(err) ? INFINITY : err;
      worst_i = i;
    }
  }
  INFO("worst element " << worst_i << ": actual " << a[worst_i] << ", expected " << expected[worst_i] << " ("
                        << worst << "x the tolerance)");
  REQUIRE(worst <= 1.0);
}

}  // namespace precis::testing
