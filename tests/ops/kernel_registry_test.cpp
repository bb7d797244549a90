// The kernel registry's signature check: a kernel looked up with another family's function type
// must raise InternalError (naming the op and both signatures) instead of being called through
// the wrong type, which is undefined behaviour.
#include <string>

#include <catch2/catch.hpp>

#include "core/error.h"
#include "ops/contracts/kernels.h"
#include "ops/op_table.h"

namespace precis::testing {
namespace {

// A signature no real kernel family uses.
using ScratchKernel = int(int);
int scratch_kernel(int x) { return x + 1; }

// The message of the InternalError that looking up (op, cpu, dtype) as Fn raises ("" if none).
template <typename Fn>
std::string lookup_error(OpId op, DType dtype) {
  try {
    kernel<Fn>(op, DeviceType::cpu, dtype);
  } catch (const InternalError& e) {
    return e.what();
  }
  return "";
}

bool contains(const std::string& s, const char* part) { return s.find(part) != std::string::npos; }

TEST_CASE("a kernel looked up with its own signature is returned", "[ops][registry]") {
  CHECK(kernel<kernels::UnaryKernel>(OpId::exp, DeviceType::cpu, DType::f32).get() != nullptr);
  CHECK(kernel<kernels::BinaryKernel>(OpId::add, DeviceType::cpu, DType::f32).get() != nullptr);
}

TEST_CASE("a real kernel looked up with another family's signature throws InternalError", "[ops][registry]") {
  const std::string msg = lookup_error<kernels::BinaryKernel>(OpId::exp, DType::f32);
  INFO(msg);
  CHECK(contains(msg, "exp: the cpu f32 kernel"));
  // Registered as UnaryKernel (one Tensor input and a double), asked for as BinaryKernel.
  CHECK(contains(msg, "registered as void (precis::Tensor const&, precis::Tensor const&, double)"));
  CHECK(contains(msg, "looked up as void (precis::Tensor const&, precis::Tensor const&, precis::Tensor const&, double)"));
}

TEST_CASE("a scratch registration under another signature is caught at lookup and restorable", "[ops][registry]") {
  // CHECK does not throw, so the slot is always restored below.
  kernels::UnaryKernel* const saved = kernel<kernels::UnaryKernel>(OpId::neg, DeviceType::cpu, DType::f64).get();
  register_kernel<ScratchKernel>(OpId::neg, DeviceType::cpu, DType::f64, &scratch_kernel);
  CHECK(kernel<ScratchKernel>(OpId::neg, DeviceType::cpu, DType::f64)(41) == 42);
  const std::string msg = lookup_error<kernels::UnaryKernel>(OpId::neg, DType::f64);
  // Other slots of the same op are untouched.
  const std::string other = lookup_error<kernels::UnaryKernel>(OpId::neg, DType::f32);
  register_kernel<kernels::UnaryKernel>(OpId::neg, DeviceType::cpu, DType::f64, saved);
  INFO(msg);
  CHECK(contains(msg, "neg: the cpu f64 kernel was registered as int (int)"));
  CHECK(contains(msg, "looked up as void (precis::Tensor const&, precis::Tensor const&, double)"));
  CHECK(other.empty());
  // Restored: the real kernel is back under its own signature.
  CHECK(lookup_error<kernels::UnaryKernel>(OpId::neg, DType::f64).empty());
  CHECK_FALSE(lookup_error<ScratchKernel>(OpId::neg, DType::f64).empty());
}

}  // namespace
}  // namespace precis::testing
