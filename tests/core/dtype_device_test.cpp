#include <catch2/catch.hpp>

#include <iterator>
#include <sstream>

#include "core/device.h"
#include "core/dtype.h"
#include "core/error.h"

using namespace precis;

TEST_CASE("dtype names round-trip", "[core][dtype]") {
  const char* names[] = {"f32", "f64", "f16", "bf16", "i64", "i32", "bool", "f8_e4m3", "f8_e5m2"};
  static_assert(std::size(names) == kNumDTypes);
  for (int i = 0; i < kNumDTypes; ++i) {
    const auto t = static_cast<DType>(i);
    REQUIRE(dtype_name(t) == names[i]);
    REQUIRE(dtype_from_name(names[i]) == t);
  }
  REQUIRE_THROWS_AS(dtype_from_name("float32"), ValueError);
  REQUIRE(element_size(DType::bf16) == 2);
  REQUIRE(element_size(DType::i64) == 8);
  REQUIRE(element_size(DType::boolean) == 1);
  REQUIRE(element_size(DType::f8_e4m3) == 1);
  REQUIRE(is_low_precision(DType::f16));
  REQUIRE_FALSE(is_floating(DType::i32));
}

TEST_CASE("promote_types follows PyTorch's table", "[core][dtype]") {
  using D = DType;
  // Rows and columns in enum order: f32, f64, f16, bf16, i64, i32, bool.
  const D table[7][7] = {
      {D::f32, D::f64, D::f32, D::f32, D::f32, D::f32, D::f32},
      {D::f64, D::f64, D::f64, D::f64, D::f64, D::f64, D::f64},
      {D::f32, D::f64, D::f16, D::f32, D::f16, D::f16, D::f16},
      {D::f32, D::f64, D::f32, D::bf16, D::bf16, D::bf16, D::bf16},
      {D::f32, D::f64, D::f16, D::bf16, D::i64, D::i64, D::i64},
      {D::f32, D::f64, D::f16, D::bf16, D::i64, D::i32, D::i32},
      {D::f32, D::f64, D::f16, D::bf16, D::i64, D::i32, D::boolean},
  };
  // The fp8 dtypes promote with nothing but themselves (tests/core/float8_test.cpp).
  for (int a = 0; a < 7; ++a)
    for (int b = 0; b < 7; ++b) {
      INFO(dtype_name(static_cast<D>(a)) << " with " << dtype_name(static_cast<D>(b)));
      REQUIRE(promote_types(static_cast<D>(a), static_cast<D>(b)) == table[a][b]);
    }
}

TEST_CASE("Device parse and str", "[core][device]") {
  REQUIRE(Device::parse("cpu") == Device::cpu());
  REQUIRE(Device::parse("cuda") == Device::cuda(0));
  REQUIRE(Device::parse("cuda:3") == Device::cuda(3));
  REQUIRE(Device::cpu().str() == "cpu");
  REQUIRE(Device::cuda(2).str() == "cuda:2");
  REQUIRE(Device::parse(Device::cuda(11).str()) == Device::cuda(11));
  for (const char* bad : {"", "gpu", "cuda:", "cuda:x", "cuda:-1", "CPU", "cuda:1a"})
    REQUIRE_THROWS_AS(Device::parse(bad), ValueError);
  REQUIRE(std::string(device_type_name(DeviceType::cuda)) == "cuda");
  REQUIRE(Device::cpu().is_cpu());
  REQUIRE_FALSE(Device::cuda().is_cpu());
}

// Printing a dtype or a device the way PyTorch users do (print(x.dtype)): found by
// argument-dependent lookup, so no using-directive is needed.
TEST_CASE("DType and Device print with operator<< and to_string", "[core][dtype]") {
  std::ostringstream os;
  os << precis::DType::bf16 << " " << precis::DType::boolean << " " << precis::Device::cpu() << " "
     << precis::Device::cuda(1);
  REQUIRE(os.str() == "bf16 bool cpu cuda:1");
  REQUIRE(precis::to_string(DType::float32) == "f32");
  REQUIRE(precis::to_string(Device::cuda()) == "cuda:0");
  REQUIRE(detail::str_cat("got ", DType::f16, " on ", Device::cpu()) == "got f16 on cpu");
}
