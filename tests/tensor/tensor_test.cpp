// Tensor basics: element access, dtype conversion (rounding, NaN/inf), copy_/fill_, the version
// counter, describe(), printing, and errors.
#include <cmath>
#include <cstring>
#include <limits>
#include <sstream>

#include "tests/support/tensor_testing.h"

using namespace precis;

namespace {

constexpr DType kAllDTypes[] = {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i64, DType::i32, DType::boolean};

uint16_t bits_of(const Tensor& t) {
  REQUIRE(t.numel() == 1);
  uint16_t b;
  std::memcpy(&b, t.contiguous().data_ptr(), 2);
  return b;
}

Tensor f32(float v) { return scalar_tensor(static_cast<double>(v)); }

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("item and to_vector for every dtype", "[tensor]") {
  for (DType dt : kAllDTypes) {
    INFO(dtype_name(dt));
    Tensor t = from_vector<int64_t>({0, 1, 0, 1, 1, 0}, {2, 3}, {.dtype = dt});
    REQUIRE(t.dtype() == dt);
    REQUIRE(t.to_vector<float>() == std::vector<float>{0, 1, 0, 1, 1, 0});
    REQUIRE(t.to_vector<double>() == std::vector<double>{0, 1, 0, 1, 1, 0});
    REQUIRE(t.to_vector<int64_t>() == std::vector<int64_t>{0, 1, 0, 1, 1, 0});
    REQUIRE(t.to_vector<int32_t>() == std::vector<int32_t>{0, 1, 0, 1, 1, 0});
    REQUIRE(t.to_vector<bool>() == std::vector<bool>{false, true, false, true, true, false});
    // Row-major order of the logical view, not of memory.
    REQUIRE(t.t().to_vector<int64_t>() == std::vector<int64_t>{0, 1, 1, 1, 0, 0});
    Tensor one = t.select(0, 1).select(0, 0);
    REQUIRE(one.item<float>() == 1.0f);
    REQUIRE(one.item<double>() == 1.0);
    REQUIRE(one.item<int64_t>() == 1);
    REQUIRE(one.item<int32_t>() == 1);
    REQUIRE(one.item<bool>());
    REQUIRE(t.slice(1, 0, 1).slice(0, 0, 1).item<int32_t>() == 0);  // shape [1, 1]
  }
  REQUIRE(scalar_tensor(-2.75, {.dtype = DType::f64}).item<double>() == -2.75);
  REQUIRE(scalar_tensor(INT64_MIN, {.dtype = DType::i64}).item<int64_t>() == INT64_MIN);
  REQUIRE(zeros({0}).to_vector<float>().empty());
  PRECIS_REQUIRE_THROWS_WITH_ALL(zeros({2}).item<float>(), ValueError, "item()", "exactly one element",
                                 "[2] f32 cpu");
  PRECIS_REQUIRE_THROWS_WITH_ALL(zeros({0}).item<float>(), ValueError, "[0] f32 cpu");
}

TEST_CASE("to(dtype) rounds f32 to f16 to nearest even", "[tensor][conversion]") {
  auto h = [](float v) { return bits_of(f32(v).to(DType::f16)); };
  REQUIRE(h(1.0f) == 0x3C00);
  REQUIRE(h(-2.0f) == 0xC000);
  REQUIRE(h(1.0f + std::ldexp(1.0f, -11)) == 0x3C00);      // tie: 1 is even
  REQUIRE(h(1.0f + 3 * std::ldexp(1.0f, -11)) == 0x3C02);  // tie: 1 + 2^-9 is even
  REQUIRE(h(1.0f + std::ldexp(1.0f, -11) + std::ldexp(1.0f, -20)) == 0x3C01);  // above the tie
  REQUIRE(h(65504.0f) == 0x7BFF);                          // largest finite
  REQUIRE(h(65519.0f) == 0x7BFF);
  REQUIRE(h(65520.0f) == 0x7C00);                          // rounds to inf
  REQUIRE(h(1e10f) == 0x7C00);
  REQUIRE(h(-1e10f) == 0xFC00);
  REQUIRE(h(std::ldexp(1.0f, -14)) == 0x0400);             // smallest normal
  REQUIRE(h(std::ldexp(1.0f, -24)) == 0x0001);             // smallest subnormal
  REQUIRE(h(std::ldexp(1.0f, -25)) == 0x0000);             // tie with 0: to even (0)
  REQUIRE(h(std::ldexp(3.0f, -26)) == 0x0001);             // 0.75 ulp rounds up
  REQUIRE(h(std::ldexp(3.0f, -25)) == 0x0002);             // 1.5 ulp: tie to even (2)
  REQUIRE(h(-0.0f) == 0x8000);
  REQUIRE(h(INFINITY) == 0x7C00);
  REQUIRE(h(-INFINITY) == 0xFC00);
  REQUIRE((h(NAN) & 0x7C00) == 0x7C00);
  REQUIRE((h(NAN) & 0x03FF) != 0);                         // still a NaN
  // And back: every f16 value converts to f32 exactly.
  REQUIRE(f32(0.1f).to(DType::f16).item<float>() == 0.0999755859375f);
  REQUIRE(std::isnan(f32(NAN).to(DType::f16).item<float>()));
  REQUIRE(f32(-INFINITY).to(DType::f16).item<float>() == -INFINITY);
  REQUIRE(std::signbit(f32(-0.0f).to(DType::f16).item<float>()));
  REQUIRE(f32(std::ldexp(1.0f, -24)).to(DType::f16).item<double>() == std::ldexp(1.0, -24));
}

TEST_CASE("to(dtype) rounds f32 to bf16 to nearest even", "[tensor][conversion]") {
  auto b = [](float v) { return bits_of(f32(v).to(DType::bf16)); };
  REQUIRE(b(1.0f) == 0x3F80);
  REQUIRE(b(1.0f + std::ldexp(1.0f, -8)) == 0x3F80);      // tie: to even
  REQUIRE(b(1.0f + 3 * std::ldexp(1.0f, -8)) == 0x3F82);  // tie: to even (up)
  REQUIRE(b(1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -20)) == 0x3F81);
  REQUIRE(b(3.14159265f) == 0x4049);
  REQUIRE(b(std::numeric_limits<float>::max()) == 0x7F80);  // overflows to inf
  REQUIRE(b(3.3895314e38f) == 0x7F7F);                      // largest finite bf16
  REQUIRE(b(std::numeric_limits<float>::denorm_min()) == 0x0000);
  REQUIRE(b(std::ldexp(1.0f, -133)) == 0x0001);             // smallest bf16 subnormal
  REQUIRE(b(-0.0f) == 0x8000);
  REQUIRE(b(INFINITY) == 0x7F80);
  REQUIRE(b(-INFINITY) == 0xFF80);
  REQUIRE((b(NAN) & 0x7F80) == 0x7F80);
  REQUIRE((b(NAN) & 0x007F) != 0);
  // A NaN whose payload sits only in the low 16 bits must stay NaN (not become inf).
  float low_nan;
  const uint32_t bits = 0x7F800001u;
  std::memcpy(&low_nan, &bits, 4);
  REQUIRE(std::isnan(f32(low_nan).to(DType::bf16).item<float>()));
  // f64 to bf16 / f16 goes through the same rounding.
  REQUIRE(scalar_tensor(1.0 + std::ldexp(1.0, -7), {.dtype = DType::f64}).to(DType::bf16).item<double>() ==
          1.0 + std::ldexp(1.0, -7));
  REQUIRE(std::isinf(scalar_tensor(1e300, {.dtype = DType::f64}).to(DType::f16).item<float>()));
}

TEST_CASE("to(dtype) between all dtypes", "[tensor][conversion]") {
  const std::vector<double> v = {0.0, 1.0, -3.0, 2.5, 100.0};
  for (DType from : kAllDTypes) {
    for (DType to : kAllDTypes) {
      INFO(dtype_name(from) << " -> " << dtype_name(to));
      Tensor src = from_vector<double>(from == DType::boolean ? std::vector<double>{0, 1, 1, 0, 1} : v, {5},
                                       {.dtype = from});
      Tensor dst = src.to(to);
      REQUIRE(dst.dtype() == to);
      REQUIRE(dst.sizes() == src.sizes());
      if (from == to) REQUIRE(dst.is_same(src));
      // Through f64 as the reference: every value here is exact in every dtype except i* for 2.5.
      const std::vector<double> s = src.to_vector<double>();
      const std::vector<double> d = dst.to_vector<double>();
      for (size_t i = 0; i < s.size(); ++i) {
        const double want = to == DType::boolean ? (s[i] != 0 ? 1.0 : 0.0) : is_integral(to) ? std::trunc(s[i]) : s[i];
        REQUIRE(d[i] == want);
      }
    }
  }
  // Special values.
  REQUIRE(from_vector<float>({NAN, -0.0f, 0.1f, 0.0f}).to(DType::boolean).to_vector<bool>() ==
          std::vector<bool>{true, false, true, false});
  REQUIRE(from_vector<float>({-2.9f, 2.9f}).to(DType::i64).to_vector<int64_t>() == std::vector<int64_t>{-2, 2});
  REQUIRE(from_vector<int64_t>({(int64_t{1} << 53) + 1}).to(DType::f64).item<double>() == std::ldexp(1.0, 53));
  REQUIRE(from_vector<int64_t>({int64_t{1} << 40}).to(DType::i32).dtype() == DType::i32);
  REQUIRE(from_vector<double>({1e-320}).to(DType::f32).item<float>() == 0.0f);  // f64 subnormal underflows
  REQUIRE(from_vector<double>({1e39}).to(DType::f32).item<float>() == INFINITY);
  REQUIRE(from_vector<float>({65504.0f}).to(DType::f16).to(DType::bf16).item<float>() == 65536.0f);
  // Non-contiguous source.
  Tensor t = arange(6.0).view({2, 3}).t();
  REQUIRE(t.to(DType::i32).to_vector<int32_t>() == std::vector<int32_t>{0, 3, 1, 4, 2, 5});
  // A dense transposed source keeps its layout (PyTorch's preserve_format); a strided one with
  // gaps comes out contiguous.
  REQUIRE(t.to(DType::i32).strides() == t.strides());
  REQUIRE(!t.to(DType::i32).is_contiguous());
  Tensor gaps = arange(12.0).view({3, 4}).narrow(1, 0, 2);
  REQUIRE(gaps.to(DType::i32).is_contiguous());
  REQUIRE(gaps.to(DType::i32).to_vector<int32_t>() == std::vector<int32_t>{0, 1, 4, 5, 8, 9});
  REQUIRE(t.to(Device::cpu()).is_same(t));
}

TEST_CASE("copy_ broadcasts and converts", "[tensor][copy]") {
  Tensor dst = zeros({2, 3}, {.dtype = DType::f64});
  dst.copy_(from_vector<float>({1, 2, 3}));
  REQUIRE(dst.to_vector<double>() == std::vector<double>{1, 2, 3, 1, 2, 3});
  dst.copy_(from_vector<int32_t>({7, 8}, {2, 1}));
  REQUIRE(dst.to_vector<double>() == std::vector<double>{7, 7, 7, 8, 8, 8});
  dst.copy_(scalar_tensor(true, {.dtype = DType::boolean}));
  REQUIRE(dst.to_vector<double>() == std::vector<double>(6, 1.0));
  dst.copy_(arange(6.0, {.dtype = DType::i64}).view({3, 2}).t());  // non-contiguous source
  REQUIRE(dst.to_vector<double>() == std::vector<double>{0, 2, 4, 1, 3, 5});

  // Into a non-contiguous destination: only the view's elements change.
  Tensor base = zeros({3, 4});
  base.slice(1, 1, 4, 2).copy_(from_vector<double>({1, 2, 3, 4, 5, 6}, {3, 2}));
  REQUIRE(base.to_vector<float>() == std::vector<float>{0, 1, 0, 2, 0, 3, 0, 4, 0, 5, 0, 6});
  base.t().copy_(arange(12.0).view({4, 3}));
  REQUIRE(base.to_vector<float>() == std::vector<float>{0, 3, 6, 9, 1, 4, 7, 10, 2, 5, 8, 11});

  // Conversion on the way: rounding to bf16 and f16.
  Tensor low = zeros({2}, {.dtype = DType::bf16});
  low.copy_(from_vector<double>({1.0 + std::ldexp(1.0, -9), 3.14159265}));
  REQUIRE(low.to_vector<float>() == std::vector<float>{1.0f, 3.140625f});
  Tensor half = zeros({3}, {.dtype = DType::f16});
  half.copy_(from_vector<float>({70000.0f, -INFINITY, NAN}));
  const std::vector<float> hv = half.to_vector<float>();
  REQUIRE(hv[0] == INFINITY);
  REQUIRE(hv[1] == -INFINITY);
  REQUIRE(std::isnan(hv[2]));
  // Empty tensors copy nothing (and do not fail).
  Tensor e = zeros({0, 3});
  e.copy_(ones({3}));
  REQUIRE(e.numel() == 0);

  PRECIS_REQUIRE_THROWS_WITH_ALL(zeros({2, 3}).copy_(ones({4})), ShapeError, "copy_", "[4] f32 cpu",
                                 "[2, 3] f32 cpu");
  PRECIS_REQUIRE_THROWS_WITH_ALL(zeros({3}).copy_(ones({1, 3})), ShapeError, "copy_", "[1, 3] f32 cpu");
  // An undefined source is a bad value (ValueError), not a shape mismatch.
  PRECIS_REQUIRE_THROWS_WITH_ALL(zeros({3}).copy_(Tensor()), ValueError, "copy_", "source tensor is undefined",
                                 "destination [3] f32 cpu");
  PRECIS_REQUIRE_THROWS_WITH_ALL(Tensor().copy_(zeros({3})), ValueError, "copy_", "destination tensor is undefined");
  Tensor expanded = zeros({1, 3}).expand({2, 3});
  PRECIS_REQUIRE_THROWS_WITH_ALL(expanded.copy_(ones({2, 3})), ValueError, "copy_", "expanded", "clone()");
}

TEST_CASE("fill_ writes every element of the view in its dtype", "[tensor][copy]") {
  for (DType dt : kAllDTypes) {
    INFO(dtype_name(dt));
    Tensor t = zeros({2, 3}, {.dtype = dt});
    t.fill_(1);
    REQUIRE(t.to_vector<double>() == std::vector<double>(6, 1.0));
    t.zero_();
    REQUIRE(t.to_vector<double>() == std::vector<double>(6, 0.0));
  }
  REQUIRE(zeros({2}, {.dtype = DType::i32}).fill_(2.9).to_vector<int32_t>() == std::vector<int32_t>{2, 2});
  REQUIRE(zeros({1}, {.dtype = DType::i64}).fill_(INT64_MAX).item<int64_t>() == INT64_MAX);
  REQUIRE(zeros({1}).fill_(true).item<float>() == 1.0f);
  REQUIRE(zeros({1}, {.dtype = DType::boolean}).fill_(0.5).item<bool>());
  REQUIRE(zeros({1}, {.dtype = DType::bf16}).fill_(0.1).item<float>() == static_cast<float>(BFloat16(0.1f)));
  REQUIRE(zeros({1}, {.dtype = DType::f16}).fill_(1e6).item<float>() == INFINITY);
  REQUIRE(std::isnan(zeros({1}, {.dtype = DType::f64}).fill_(NAN).item<double>()));

  Tensor base = zeros({4, 4});
  base.slice(0, 0, 4, 2).slice(1, 1, 3).fill_(5.0);  // rows 0, 2; columns 1, 2
  REQUIRE(base.to_vector<float>() == std::vector<float>{0, 5, 5, 0, 0, 0, 0, 0, 0, 5, 5, 0, 0, 0, 0, 0});
  base.t().select(0, 3).fill_(-1.0);  // column 3
  REQUIRE(base.select(1, 3).to_vector<float>() == std::vector<float>{-1, -1, -1, -1});
  Tensor s = scalar_tensor(0.0);
  s.fill_(4.5);
  REQUIRE(s.item<float>() == 4.5f);
}

TEST_CASE("the version counter counts in-place writes", "[tensor]") {
  Tensor t = zeros({3});
  const uint32_t v0 = t.version();
  t.fill_(1.0);
  REQUIRE(t.version() == v0 + 1);
  t.copy_(ones({3}));
  REQUIRE(t.version() == v0 + 2);
  t.zero_();
  REQUIRE(t.version() == v0 + 3);
  // Out-of-place ops and reads leave it alone.
  (void)t.to(DType::f64);
  (void)t.clone();
  (void)t.to_vector<float>();
  (void)t.str();
  REQUIRE(t.version() == v0 + 3);
  // copy_ bumps the destination only.
  Tensor src = ones({3});
  const uint32_t vs = src.version();
  t.copy_(src);
  REQUIRE(src.version() == vs);
  // Views share one counter; a fresh tensor has its own.
  Tensor view = t.view({1, 3});
  view.fill_(2.0);
  REQUIRE(t.version() == view.version());
  REQUIRE(t.version() == v0 + 5);
  REQUIRE(zeros({3}).version() == 0);
}

TEST_CASE("describe and metadata accessors", "[tensor]") {
  REQUIRE(zeros({2, 3}).describe() == "[2, 3] f32 cpu");
  REQUIRE(scalar_tensor(1, {.dtype = DType::i64}).describe() == "[] i64 cpu");
  REQUIRE(zeros({0}, {.dtype = DType::bf16}).describe() == "[0] bf16 cpu");
  REQUIRE(zeros({1}, {.dtype = DType::boolean}).describe() == "[1] bool cpu");
  REQUIRE(Tensor().describe() == "(undefined)");
  REQUIRE_FALSE(Tensor().defined());

  Tensor x = zeros({2, 3, 4}, {.dtype = DType::f16});
  REQUIRE(x.dim() == 3);
  REQUIRE(x.numel() == 24);
  REQUIRE(x.size(0) == 2);
  REQUIRE(x.size(-1) == 4);
  REQUIRE(x.stride(0) == 12);
  REQUIRE(x.stride(-2) == 4);
  REQUIRE(x.element_size() == 2);
  REQUIRE(x.is_floating_point());
  REQUIRE_FALSE(zeros({1}, {.dtype = DType::i32}).is_floating_point());
  REQUIRE(x.storage_offset() == 0);
  REQUIRE(x.select(0, 1).storage_offset() == 12);
}

TEST_CASE("metadata errors name the tensor", "[tensor]") {
  Tensor x = zeros({2, 3});
  PRECIS_REQUIRE_THROWS_WITH_ALL(x.size(2), IndexError, "size", "dimension 2", "[2, 3] f32 cpu", "-2 to 1");
  PRECIS_REQUIRE_THROWS_WITH_ALL(x.size(-3), IndexError, "size", "[2, 3] f32 cpu");
  PRECIS_REQUIRE_THROWS_WITH_ALL(x.stride(5), IndexError, "stride", "[2, 3] f32 cpu");
  PRECIS_REQUIRE_THROWS_WITH_ALL(scalar_tensor(1.0).size(0), IndexError, "size", "0-d", "[] f32 cpu");
  PRECIS_REQUIRE_THROWS_WITH_ALL(x.data_ptr<double>(), DTypeError, "data_ptr<f64>", "f32");
  PRECIS_REQUIRE_THROWS_WITH_ALL(zeros({1}, {.dtype = DType::bf16}).data_ptr<Half>(), DTypeError, "data_ptr<f16>",
                                 "bf16");
  REQUIRE(x.data_ptr<float>() == x.data_ptr());
  PRECIS_REQUIRE_THROWS_WITH_ALL(Tensor().sizes(), ValueError, "undefined tensor");
  PRECIS_REQUIRE_THROWS_WITH_ALL(Tensor().fill_(1.0), ValueError, "fill_", "tensor is undefined");
}

TEST_CASE("str() prints values and shape and dtype", "[tensor][print]") {
  const std::string m = arange(6.0).view({2, 3}).str();
  CHECK(contains(m, "tensor([[0.0000, 1.0000, 2.0000],\n        [3.0000, 4.0000, 5.0000]]"));
  CHECK(contains(m, "shape=[2, 3]"));
  CHECK(contains(m, "dtype=f32"));
  CHECK_FALSE(contains(m, "device"));  // the CPU is not mentioned
  CHECK_FALSE(contains(m, "requires_grad"));

  // 0-d, empty, bool, int (exact at the int64 limits), non-contiguous, special values.
  CHECK(scalar_tensor(-2.5).str() == "tensor(-2.5000, shape=[], dtype=f32)");
  CHECK(zeros({0, 3}).str() == "tensor([], shape=[0, 3], dtype=f32)");
  CHECK(contains(from_vector<bool>({true, false}).str(), "[ True, False]"));
  CHECK(contains(from_vector<bool>({true, false}).str(), "dtype=bool"));
  const std::string ints = from_vector<int64_t>({INT64_MIN, INT64_MAX, 3}).str();
  CHECK(contains(ints, "-9223372036854775808"));
  CHECK(contains(ints, "9223372036854775807"));
  CHECK(contains(ints, "dtype=i64"));
  CHECK(contains(from_vector<int32_t>({1, -20}).str(), "[  1, -20]"));
  CHECK(contains(arange(4.0).view({2, 2}).t().str(), "[[0.0000, 2.0000],\n        [1.0000, 3.0000]]"));
  CHECK(contains(from_vector<float>({NAN, INFINITY, -INFINITY, 1.0f}).str(), "[   nan,    inf,   -inf, 1.0000]"));
  // One number format per tensor: very large or small magnitudes switch all elements to scientific.
  const std::string sci = from_vector<float>({1.0f, 1e-7f, 123456.0f}).str();
  CHECK(contains(sci, "1.0000e+00"));
  CHECK(contains(sci, "1.0000e-07"));
  CHECK(contains(sci, "1.2346e+05"));
  CHECK(contains(from_vector<float>({1.5f}).to(DType::bf16).str(), "dtype=bf16"));
  CHECK(Tensor().str() == "tensor(undefined)");
  std::ostringstream os;
  os << scalar_tensor(1.0);
  CHECK(os.str() == scalar_tensor(1.0).str());
}

// print(x.shape, x.dtype, x.device) in C++: the parts of a tensor print on their own, as str()
// writes them. Shape is a std::vector, so its operator<< is found through `using namespace precis`.
TEST_CASE("a tensor's shape, dtype and device print with operator<< and to_string", "[tensor][print]") {
  const Tensor x = zeros({2, 3}, {.dtype = DType::bf16});
  std::ostringstream os;
  os << x.sizes() << " " << x.dtype() << " " << x.device();
  CHECK(os.str() == "[2, 3] bf16 cpu");
  CHECK(to_string(x.shape()) == "[2, 3]");
  CHECK(to_string(scalar_tensor(1.0).sizes()) == "[]");
  CHECK(contains(x.str(), "shape=" + to_string(x.sizes()) + ", dtype=" + to_string(x.dtype())));
}

TEST_CASE("str() summarises large tensors", "[tensor][print]") {
  const std::string v = arange(2000.0).str();
  CHECK(contains(v, "[   0.0000,    1.0000,    2.0000, ..., 1997.0000, 1998.0000, 1999.0000]"));
  CHECK(contains(v, "shape=[2000]"));
  CHECK_FALSE(contains(v, "1000.0000"));

  const std::string m = arange(3000.0, {.dtype = DType::i64}).view({100, 30}).str();
  CHECK(contains(m, "[[   0,    1,    2, ...,   27,   28,   29],"));
  CHECK(contains(m, "        ...,\n"));
  CHECK(contains(m, "[2970, 2971, 2972, ..., 2997, 2998, 2999]]"));
  CHECK_FALSE(contains(m, "1500"));

  const std::string c = arange(24000.0).view({20, 30, 40}).str();
  CHECK(contains(c, "]],\n\n        ...,\n\n        [["));  // blank lines between 2-D blocks
  // At the threshold (1000 elements) nothing is elided.
  CHECK_FALSE(contains(arange(1000.0).str(), "..."));
}
