// FP8 casts (core/float8.h): every code of both formats widened, and every f16 and bf16 input
// (and f32 values at every rounding boundary) narrowed by the plain and the saturating cast,
// against PyTorch's results (tests/golden/gen_fp8_fixtures.py; fixtures/fp8/casts.safetensors.gz).
// Plus the same rules through the tensor layer (Tensor::to, fill, safetensors) and the typed
// errors of ops that do not take fp8.
#include <catch2/catch.hpp>

#include <zlib.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "core/dtype_visit.h"
#include "core/float8.h"
#include "ops/functional.h"
#include "tensor/factory.h"
#include "tensor/safetensors.h"
#include "tests/support/golden.h"

using namespace precis;

namespace {

std::string gunzip_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE(in.good());
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string gz = ss.str();
  z_stream zs{};
  REQUIRE(inflateInit2(&zs, 16 + MAX_WBITS) == Z_OK);  // 16: gzip header
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(gz.data()));
  zs.avail_in = static_cast<uInt>(gz.size());
  std::string out;
  char buf[1 << 16];
  int rc = Z_OK;
  while (rc == Z_OK) {
    zs.next_out = reinterpret_cast<Bytef*>(buf);
    zs.avail_out = sizeof buf;
    rc = inflate(&zs, Z_NO_FLUSH);
    out.append(buf, sizeof buf - zs.avail_out);
  }
  inflateEnd(&zs);
  REQUIRE(rc == Z_STREAM_END);
  return out;
}

const SafetensorsFile& casts_fixture() {
  static const SafetensorsFile file =
      from_safetensors_bytes(gunzip_file(testing::golden_dir() + "/fp8/casts.safetensors.gz"));
  return file;
}

Tensor fixture(const std::string& name) {
  for (const auto& [n, t] : casts_fixture().tensors)
    if (n == name) return t;
  FAIL("no tensor " << name << " in casts.safetensors.gz");
  return {};
}

template <typename T>
const T* data_of(const Tensor& t, DType want) {
  REQUIRE(t.dtype() == want);
  return static_cast<const T*>(t.data_ptr());
}

uint8_t narrow(float f, Fp8Format fmt, bool saturating) {
  if (saturating) return detail::float_to_f8_bits_saturating(f, fmt);
  return fmt == Fp8Format::e4m3 ? detail::float_to_f8e4m3_bits(f) : detail::float_to_f8e5m2_bits(f);
}

float widen(uint8_t b, Fp8Format fmt) {
  return fmt == Fp8Format::e4m3 ? detail::f8e4m3_bits_to_float(b) : detail::f8e5m2_bits_to_float(b);
}

const char* fmt_name(Fp8Format f) { return f == Fp8Format::e4m3 ? "e4m3" : "e5m2"; }
DType fmt_dtype(Fp8Format f) { return f == Fp8Format::e4m3 ? DType::f8_e4m3 : DType::f8_e5m2; }

constexpr Fp8Format kFormats[] = {Fp8Format::e4m3, Fp8Format::e5m2};

}  // namespace

TEST_CASE("fp8 fixture records the torch version that made it", "[core][fp8][golden]") {
  const auto& meta = casts_fixture().metadata;
  REQUIRE(meta.count("generator") == 1);
  REQUIRE(meta.at("generator").find("torch 2.") != std::string::npos);
}

TEST_CASE("fp8 widening of all 256 codes matches PyTorch bit for bit", "[core][fp8][golden]") {
  for (Fp8Format fmt : kFormats) {
    INFO(fmt_name(fmt));
    const std::string p = fmt_name(fmt);
    const auto* f32 = data_of<uint32_t>(fixture(p + ".to_f32"), DType::f32);
    const auto* bf16 = data_of<uint16_t>(fixture(p + ".to_bf16"), DType::bf16);
    const auto* f16 = data_of<uint16_t>(fixture(p + ".to_f16"), DType::f16);
    for (int c = 0; c < 256; ++c) {
      INFO("code 0x" << std::hex << c);
      const float v = widen(static_cast<uint8_t>(c), fmt);
      REQUIRE(std::bit_cast<uint32_t>(v) == f32[c]);
      // PyTorch rounds a NaN to bf16 as the canonical 0x7FC0 (sign dropped); precis keeps the sign
      // and payload (core/half.h). Both are NaN; every other code is exact.
      if (std::isnan(v)) {
        REQUIRE(std::isnan(detail::bf16_bits_to_float(bf16[c])));
        REQUIRE(std::isnan(detail::half_bits_to_float(f16[c])));
      } else {
        REQUIRE(detail::float_to_bf16_bits(v) == bf16[c]);
        REQUIRE(detail::float_to_half_bits(v) == f16[c]);
        REQUIRE(static_cast<float>(BFloat16(v)) == v);  // exact: every fp8 value is a bf16 value
        REQUIRE(static_cast<float>(Half(v)) == v);
      }
    }
  }
}

TEST_CASE("fp8 narrowing of every f16 and bf16 input matches PyTorch bit for bit", "[core][fp8][golden]") {
  for (const char* src : {"f16", "bf16"}) {
    const bool is_f16 = std::string(src) == "f16";
    for (Fp8Format fmt : kFormats) {
      for (bool sat : {false, true}) {
        const std::string name = std::string(src) + ".to_" + fmt_name(fmt) + (sat ? ".saturated" : "");
        INFO(name);
        const auto* want = data_of<uint8_t>(fixture(name), fmt_dtype(fmt));
        int64_t mismatches = 0;
        uint32_t first = 0;
        for (uint32_t i = 0; i < 65536; ++i) {
          const auto h = static_cast<uint16_t>(i);
          const float x = is_f16 ? detail::half_bits_to_float(h) : detail::bf16_bits_to_float(h);
          if (narrow(x, fmt, sat) != want[i] && mismatches++ == 0) first = i;
        }
        INFO(mismatches << " mismatches; first input 0x" << std::hex << first << " -> 0x"
                        << int{narrow(is_f16 ? detail::half_bits_to_float(static_cast<uint16_t>(first))
                                             : detail::bf16_bits_to_float(static_cast<uint16_t>(first)),
                                      fmt, sat)}
                        << ", PyTorch 0x" << int{want[first]});
        REQUIRE(mismatches == 0);
      }
    }
  }
}

TEST_CASE("fp8 narrowing of f32 values at every rounding boundary matches PyTorch", "[core][fp8][golden]") {
  const Tensor in = fixture("f32.inputs");
  const auto* x = data_of<float>(in, DType::f32);
  REQUIRE(in.numel() > 4000);
  for (Fp8Format fmt : kFormats) {
    for (bool sat : {false, true}) {
      const std::string name = std::string("f32.to_") + fmt_name(fmt) + (sat ? ".saturated" : "");
      INFO(name);
      const auto* want = data_of<uint8_t>(fixture(name), fmt_dtype(fmt));
      for (int64_t i = 0; i < in.numel(); ++i) {
        INFO("input " << x[i] << " (0x" << std::hex << std::bit_cast<uint32_t>(x[i]) << ")");
        REQUIRE(int{narrow(x[i], fmt, sat)} == int{want[i]});
      }
    }
  }
}

TEST_CASE("fp8 rounding round-trips every code and brackets every value", "[core][fp8]") {
  // Independent of the fixtures: every non-NaN code narrows back to itself, and a value strictly
  // between two neighbours rounds to one of them.
  for (Fp8Format fmt : kFormats) {
    INFO(fmt_name(fmt));
    for (int c = 0; c < 256; ++c) {
      const float v = widen(static_cast<uint8_t>(c), fmt);
      if (std::isnan(v)) {
        REQUIRE(std::isnan(widen(narrow(v, fmt, false), fmt)));
        REQUIRE(std::isnan(widen(narrow(v, fmt, true), fmt)));
        continue;
      }
      REQUIRE(narrow(v, fmt, false) == c);
      if (std::isfinite(v)) REQUIRE(narrow(v, fmt, true) == c);
    }
    for (int c = 0; c < 0x7b; ++c) {  // positive finite codes below each format's top
      const float lo = widen(static_cast<uint8_t>(c), fmt), hi = widen(static_cast<uint8_t>(c + 1), fmt);
      if (!std::isfinite(hi) || std::isnan(hi)) continue;
      const float mid = (lo + hi) / 2;
      const uint8_t r = narrow(std::nextafter(mid, 0.0f), fmt, false);
      REQUIRE(r == c);
      REQUIRE(narrow(std::nextafter(mid, INFINITY), fmt, false) == c + 1);
      REQUIRE(narrow(mid, fmt, false) == ((c & 1) == 0 ? c : c + 1));  // ties to even
    }
  }
}

TEST_CASE("fp8 overflow: E4M3 saturates in both casts, E5M2 only in the saturating one", "[core][fp8]") {
  // The documented rules (core/float8.h, docs/fp8.md), spelled out.
  REQUIRE(static_cast<float>(Float8E4M3(1e6f)) == 448.0f);
  REQUIRE(static_cast<float>(Float8E4M3(-INFINITY)) == -448.0f);
  REQUIRE(static_cast<float>(Float8E4M3(470.0f)) == 448.0f);
  REQUIRE(std::isinf(static_cast<float>(Float8E5M2(61440.0f))));
  REQUIRE(static_cast<float>(Float8E5M2(61439.0f)) == 57344.0f);
  REQUIRE(static_cast<float>(Float8E5M2(-INFINITY)) == -INFINITY);
  REQUIRE(widen(detail::float_to_f8_bits_saturating(1e9f, Fp8Format::e5m2), Fp8Format::e5m2) == 57344.0f);
  REQUIRE(widen(detail::float_to_f8_bits_saturating(-INFINITY, Fp8Format::e5m2), Fp8Format::e5m2) == -57344.0f);
  REQUIRE(detail::float_to_f8_bits_saturating(NAN, Fp8Format::e5m2) == 0x7f);
  REQUIRE(detail::float_to_f8_bits_saturating(-NAN, Fp8Format::e4m3) == 0xff);
  REQUIRE(fp8_max(Fp8Format::e4m3) == Float8E4M3::max);
  REQUIRE(fp8_max(Fp8Format::e5m2) == Float8E5M2::max);
}

TEST_CASE("fp8 dtypes: names, sizes, promotion and safetensors names", "[core][fp8][dtype]") {
  REQUIRE(dtype_name(DType::f8_e4m3) == "f8_e4m3");
  REQUIRE(dtype_from_name("f8_e5m2") == DType::f8_e5m2);
  REQUIRE(DType::float8_e4m3fn == DType::f8_e4m3);
  REQUIRE(element_size(DType::f8_e5m2) == 1);
  REQUIRE(is_float8(DType::f8_e4m3));
  REQUIRE_FALSE(is_floating(DType::f8_e4m3));
  REQUIRE(promote_types(DType::f8_e4m3, DType::f8_e4m3) == DType::f8_e4m3);
  REQUIRE_THROWS_AS(promote_types(DType::f8_e4m3, DType::f32), DTypeError);
  REQUIRE_THROWS_AS(promote_types(DType::bf16, DType::f8_e5m2), DTypeError);
  REQUIRE_THROWS_AS(promote_types(DType::f8_e4m3, DType::f8_e5m2), DTypeError);
  REQUIRE(safetensors_dtype_name(DType::f8_e4m3) == "F8_E4M3");
  REQUIRE(dtype_from_safetensors_name("F8_E5M2") == DType::f8_e5m2);
  REQUIRE(dtype_of<Float8E4M3>() == DType::f8_e4m3);
}

TEST_CASE("Tensor::to casts to and from fp8 with the plain rule", "[core][fp8][tensor]") {
  // Every bf16 pattern through the copy kernel (contiguous and strided) equals the scalar cast,
  // which the golden tests above pin to PyTorch.
  std::vector<uint16_t> raw(65536);
  for (uint32_t i = 0; i < 65536; ++i) raw[i] = static_cast<uint16_t>(i);
  Tensor src = empty({65536}, {.dtype = DType::bf16});
  std::memcpy(src.data_ptr(), raw.data(), raw.size() * 2);
  for (DType f8 : {DType::f8_e4m3, DType::f8_e5m2}) {
    const Fp8Format fmt = f8 == DType::f8_e4m3 ? Fp8Format::e4m3 : Fp8Format::e5m2;
    INFO(dtype_name(f8));
    const Tensor y = src.to(f8);
    REQUIRE(y.dtype() == f8);
    const auto* yb = static_cast<const uint8_t*>(y.data_ptr());
    for (uint32_t i = 0; i < 65536; ++i) REQUIRE(int{yb[i]} == int{narrow(detail::bf16_bits_to_float(raw[i]), fmt, false)});
    const Tensor strided = src.view({256, 256}).t().to(f8).contiguous();
    const auto* sb = static_cast<const uint8_t*>(strided.data_ptr());
    for (uint32_t r = 0; r < 256; ++r)
      for (uint32_t c = 0; c < 256; ++c)
        REQUIRE(int{sb[r * 256 + c]} == int{narrow(detail::bf16_bits_to_float(raw[c * 256 + r]), fmt, false)});
    // Back to f32, f16, bf16: exact widening.
    const Tensor back = y.to(DType::f32);
    const auto* bf = static_cast<const float*>(back.data_ptr());
    for (uint32_t i = 0; i < 65536; ++i) {
      const float want = widen(yb[i], fmt);
      REQUIRE((std::isnan(want) ? std::isnan(bf[i]) : bf[i] == want));
    }
    // fp8 -> bf16 -> fp8 is the identity on every code (NaNs included: 0x7F | sign both ways).
    const Tensor again = y.to(DType::bf16).to(f8);
    REQUIRE(std::memcmp(again.data_ptr(), y.data_ptr(), 65536) == 0);
  }
}

TEST_CASE("fp8 fill, factories and safetensors round trip", "[core][fp8][tensor]") {
  Tensor z = full({3, 4}, 500.0, {.dtype = DType::f8_e4m3});
  REQUIRE(z.dtype() == DType::f8_e4m3);
  Tensor zf = z.to(DType::f32);
  for (int64_t i = 0; i < 12; ++i) REQUIRE(static_cast<const float*>(zf.data_ptr())[i] == 448.0f);  // saturated
  Tensor w = full({5}, 1e5, {.dtype = DType::f8_e5m2}).to(DType::f32);
  REQUIRE(std::isinf(static_cast<const float*>(w.data_ptr())[0]));
  Tensor x = randn({7, 9}).to(DType::f8_e5m2);
  const std::string bytes = to_safetensors_bytes({{"x", x}});
  REQUIRE(bytes.find("F8_E5M2") != std::string::npos);
  const SafetensorsFile back = from_safetensors_bytes(bytes);
  REQUIRE(back.tensors.size() == 1);
  const Tensor& y = back.tensors[0].second;
  REQUIRE(y.dtype() == DType::f8_e5m2);
  REQUIRE(std::memcmp(y.data_ptr(), x.data_ptr(), 63) == 0);
  REQUIRE(cat({x, x}, 0).sizes() == Shape{14, 9});
}

TEST_CASE("ops that do not compute in fp8 say so with a typed error", "[core][fp8][errors]") {
  const Tensor x = randn({4, 4}).to(DType::f8_e4m3);
  const auto says_cast = Catch::Matchers::Contains("cast to bf16 or f32 first");
  REQUIRE_THROWS_WITH(add(x, x), says_cast);
  REQUIRE_THROWS_AS(add(x, x), Error);
  REQUIRE_THROWS_WITH(x.sum(), says_cast);
  REQUIRE_THROWS_WITH(relu(x), says_cast);
  REQUIRE_THROWS_WITH(matmul(x, x), Catch::Matchers::Contains("f8_e4m3"));
  REQUIRE_THROWS_AS(add(x, randn({4, 4})), DTypeError);
  Tensor leaf = x;
  REQUIRE_THROWS_AS(leaf.requires_grad_(true), DTypeError);
}

// [cuda]: the device copy and fill kernels cast with the same code (core/float8.h compiled by
// nvcc): every bf16 and f16 input, both formats, both directions, bit for bit the CPU's.
TEST_CASE("fp8 casts on CUDA equal the CPU's on every 16-bit input", "[core][fp8][cuda]") {
  PRECIS_REQUIRE_CUDA();
  const Device dev = Device::cuda(0);
  std::vector<uint16_t> raw(65536);
  for (uint32_t i = 0; i < 65536; ++i) raw[i] = static_cast<uint16_t>(i);
  for (DType src_dtype : {DType::bf16, DType::f16}) {
    Tensor src = empty({65536}, {.dtype = src_dtype});
    std::memcpy(src.data_ptr(), raw.data(), raw.size() * 2);
    for (DType f8 : {DType::f8_e4m3, DType::f8_e5m2}) {
      INFO(dtype_name(src_dtype) << " -> " << dtype_name(f8));
      const Tensor cpu = src.to(f8);
      const Tensor gpu = src.to(dev).to(f8).to(Device::cpu());
      REQUIRE(std::memcmp(cpu.data_ptr(), gpu.data_ptr(), 65536) == 0);
      // Strided on the device too, and back to f32.
      const Tensor gpu_t = src.to(dev).view({256, 256}).t().to(f8).contiguous().to(Device::cpu());
      REQUIRE(std::memcmp(src.view({256, 256}).t().to(f8).contiguous().data_ptr(), gpu_t.data_ptr(), 65536) == 0);
      const Tensor back_cpu = cpu.to(DType::f32), back_gpu = cpu.to(dev).to(DType::f32).to(Device::cpu());
      REQUIRE(std::memcmp(back_cpu.data_ptr(), back_gpu.data_ptr(), 65536 * 4) == 0);
      const Tensor filled = full({3}, 1e6, {.dtype = f8, .device = dev}).to(Device::cpu());
      REQUIRE(int{static_cast<const uint8_t*>(filled.data_ptr())[0]} ==
              int{static_cast<const uint8_t*>(full({3}, 1e6, {.dtype = f8}).data_ptr())[0]});
    }
  }
}
