#pragma once
// Shared test helpers: seeded inputs, non-contiguous copies, comparisons against references with
// tolerances kept in one table, and error-message checks.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "ops/op_table.h"
#include "core/device.h"
#include "tensor/factory.h"
#include "tensor/tensor.h"

namespace precis::testing {

/// Forward tolerances per dtype for comparing an op's result with a reference computed in f64.
/// The one table all tests use (docs/design/testing.md); widen a value only with a reason written here.
struct Tolerance {
  double rtol;
  double atol;
};
Tolerance tolerance(DType dtype);
/// What a low-precision comparison looks at: an op's output, or an input gradient computed by
/// backward in the low dtype (which passes through more rounded intermediates).
enum class Compared { output, gradient };
/// The tolerance for comparing `op`'s f16/bf16 result with the f64 reference computed on the same
/// rounded inputs: tolerance(dtype) widened by the gradient factor and the op's entry in the
/// per-op multiplier table (both in tensor_testing.cpp, with their reasons); f32/f64 are never
/// widened.
Tolerance tolerance(DType dtype, OpId op, Compared what = Compared::output);

/// Seeded standard-normal f64 tensor (requires_grad as asked).
Tensor randn_input(const Shape& sizes, bool requires_grad = true, uint64_t seed = 0, DType dtype = DType::f64);
/// Seeded uniform tensor in [lo, hi).
Tensor uniform_input(const Shape& sizes, double lo, double hi, bool requires_grad = true, uint64_t seed = 0,
                     DType dtype = DType::f64);
/// The same values as `t` in a non-contiguous layout (a transposed copy transposed back), as a leaf
/// with t's requires_grad.
Tensor non_contiguous(const Tensor& t);

/// max |a - b| / (atol + rtol·|b|) <= 1 elementwise (NaNs must match); a and b same shape.
/// On failure the returned string names the worst element.
std::string allclose_report(const Tensor& actual, const Tensor& expected, Tolerance tol);
inline bool allclose(const Tensor& a, const Tensor& b, Tolerance tol) { return allclose_report(a, b, tol).empty(); }

/// Empty when a and b (CPU or not) have the same dtype, shape and bytes; otherwise what differs
/// (the first differing element and how many differ).
std::string same_bits_report(const Tensor& a, const Tensor& b);

}  // namespace precis::testing

/// REQUIREs that actual and expected are identical bit for bit.
#define PRECIS_REQUIRE_SAME_BITS(actual, expected)                                            \
  do {                                                                                       \
    const std::string _report = ::precis::testing::same_bits_report((actual), (expected));   \
    INFO(_report);                                                                           \
    REQUIRE(_report.empty());                                                                \
  } while (0)

/// REQUIREs actual ≈ expected under the tolerance of `dtype`, printing the worst element if not.
#define PRECIS_REQUIRE_CLOSE(actual, expected, dtype)                                                 \
  do {                                                                                                \
    const std::string _report = ::precis::testing::allclose_report((actual), (expected),              \
                                                                   ::precis::testing::tolerance(dtype)); \
    INFO(_report);                                                                                    \
    REQUIRE(_report.empty());                                                                         \
  } while (0)

/// REQUIREs that expr throws ErrorType with a message containing every given substring.
#define PRECIS_REQUIRE_THROWS_WITH_ALL(expr, ErrorType, ...)                          \
  do {                                                                                \
    bool _thrown = false;                                                             \
    try {                                                                             \
      (void)(expr);                                                                   \
    } catch (const ErrorType& _e) {                                                   \
      _thrown = true;                                                                 \
      const std::string _msg = _e.what();                                             \
      for (const char* _part : {__VA_ARGS__}) {                                       \
        INFO("message: " << _msg << "\nmissing: " << _part);                          \
        CHECK(_msg.find(_part) != std::string::npos);                                 \
      }                                                                               \
    }                                                                                 \
    INFO("expected " #ErrorType " from " #expr);                                      \
    REQUIRE(_thrown);                                                                 \
  } while (0)

/// Whether PRECIS_REQUIRE_GPU=1 is set: on the GPU machine (tests/gpu/run.sh) a [cuda] test that
/// finds no usable device must fail, never pass having run nothing (a driver too old for the build
/// reads as "no device").
namespace precis::testing {
inline bool gpu_required() {
  const char* v = std::getenv("PRECIS_REQUIRE_GPU");
  return v != nullptr && std::string(v) == "1";
}
}  // namespace precis::testing

/// Ends a [cuda] test early, with a warning, on a machine without a CUDA device (Catch2 v2 has no
/// SKIP), so the CPU-only CI passes; with PRECIS_REQUIRE_GPU=1 (tests/gpu/run.sh) the missing
/// device is a failure instead. tests/gpu/strict_switch_test.sh proves both behaviours. It must be
/// a test's first statement: ctest reports a test whose output holds the warning's text as skipped
/// (tests/CMakeLists.txt, SKIP_REGULAR_EXPRESSION), so nothing may have run before it
/// (tests/architecture/cuda_tags.py checks that).
#define PRECIS_REQUIRE_CUDA()                                                                       \
  do {                                                                                              \
    if (!::precis::cuda_is_available()) {                                                           \
      if (::precis::testing::gpu_required())                                                        \
        FAIL("PRECIS_REQUIRE_GPU=1: no usable CUDA device (cuda_device_count() = "                  \
             << ::precis::cuda_device_count() << "); a [cuda] test may not skip on the GPU machine"); \
      WARN("no CUDA device, whole test skipped");                                                  \
      return;                                                                                       \
    }                                                                                               \
  } while (0)

/// For a [cuda] test that runs on the CPU always and on the GPU too when one is present: whether
/// its GPU part (`what`, a few words) can run here. Without a usable device the skip is never
/// silent: a warning naming the part, or with PRECIS_REQUIRE_GPU=1 (tests/gpu/run.sh) a failure
/// (FAIL_CHECK, so the CPU part still runs and reports). Evaluate it once and keep the result:
///   const bool gpu = PRECIS_CUDA_PART("to_device's case, cpu to cuda and back");
#define PRECIS_CUDA_PART(what)                                                                      \
  ([&]() -> bool {                                                                                  \
    if (::precis::cuda_is_available()) return true;                                                 \
    if (::precis::testing::gpu_required()) {                                                        \
      FAIL_CHECK("PRECIS_REQUIRE_GPU=1: no usable CUDA device (cuda_device_count() = "              \
                 << ::precis::cuda_device_count() << "); the GPU part (" << (what)                  \
                 << ") of a [cuda] test may not skip on the GPU machine");                          \
    } else {                                                                                        \
      WARN("no CUDA device; skipped the GPU part: " << (what));                                     \
    }                                                                                               \
    return false;                                                                                   \
  }())
