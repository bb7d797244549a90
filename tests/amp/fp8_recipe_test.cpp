// The fp8 recipe's device-side pieces (amp/fp8_recipe.h) against the host rules they mirror: the
// scaled cast against detail::float_to_f8_bits_saturating(float(x) · scale) on every f16 and bf16
// input, and DelayedScalingState against the host DelayedScaling (whose formula the golden tests
// of fp8_scaling_test.cpp pin to Transformer Engine's) on amax sequences with zeros, infs, NaNs
// and extreme magnitudes — bit for bit after every step.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "amp/audit.h"
#include "amp/fp8_recipe.h"
#include "core/float8.h"
#include "core/half.h"
#include "ops/functional.h"
#include "tensor/factory.h"
#include "tests/support/tensor_testing.h"

using namespace precis;
using namespace precis::amp;

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
const float kNaN = std::numeric_limits<float>::quiet_NaN();

std::vector<uint8_t> bytes_of(const Tensor& t) {
  const Tensor c = t.contiguous();
  const auto* p = static_cast<const uint8_t*>(c.data_ptr());
  return std::vector<uint8_t>(p, p + c.numel());
}

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// Every 16-bit pattern as an f16 or bf16 tensor, and the same values as floats.
std::pair<Tensor, std::vector<float>> all_16bit(DType dtype) {
  std::vector<float> values(65536);
  for (uint32_t c = 0; c < 65536; ++c)
    values[c] = dtype == DType::f16 ? precis::detail::half_bits_to_float(static_cast<uint16_t>(c))
                                    : precis::detail::bf16_bits_to_float(static_cast<uint16_t>(c));
  return {from_vector<float>(values).to(dtype), values};
}

}  // namespace

TEST_CASE("fp8_scaled_cast saturates float(x) * scale as the host rule, on every f16 and bf16 input",
          "[amp][fp8]") {
  for (DType dtype : {DType::f16, DType::bf16}) {
    const auto [x, values] = all_16bit(dtype);
    for (Fp8Format format : {Fp8Format::e4m3, Fp8Format::e5m2}) {
      for (float scale : {1.0f, 0.5f, 3.7f, 1024.0f, 1.0f / 4096.0f, 1e30f}) {
        INFO(dtype_name(dtype) << " x " << scale << (format == Fp8Format::e4m3 ? " -> e4m3" : " -> e5m2"));
        const Fp8Cast c = fp8_scaled_cast(x, full({}, scale), format);
        REQUIRE(c.data.dtype() == (format == Fp8Format::e4m3 ? DType::f8_e4m3 : DType::f8_e5m2));
        const std::vector<uint8_t> got = bytes_of(c.data);
        size_t wrong = 0, first = 0;
        for (size_t i = 0; i < values.size(); ++i) {
          if (got[i] != precis::detail::float_to_f8_bits_saturating(values[i] * scale, format)) {
            if (wrong++ == 0) first = i;
          }
        }
        INFO(wrong << " codes differ; the first input " << values[first]);
        REQUIRE(wrong == 0);
        REQUIRE(std::isnan(c.amax.item<float>()));  // the NaN patterns are among the inputs
      }
    }
  }
  // amax is max |x| before scaling, in f32; an f32 input keeps all its bits.
  const Tensor x = from_vector<float>({-3.25f, 1e-30f, 2.5f, -0.0f});
  const Fp8Cast c = fp8_scaled_cast(x, full({}, 100.0f), Fp8Format::e5m2);
  CHECK(c.amax.item<float>() == 3.25f);
  CHECK(bytes_of(c.data)[1] == 0x00);  // 1e-28 flushes to +0
  CHECK(bytes_of(c.data)[3] == 0x80);  // -0 keeps its sign
  CHECK(fp8_scaled_cast(zeros({0}), full({}, 1.0f), Fp8Format::e4m3).amax.item<float>() == 0.0f);
}

TEST_CASE("fp8_scaled_cast refuses what it cannot cast, naming the operand", "[amp][fp8]") {
  PRECIS_REQUIRE_THROWS_WITH_ALL(fp8_scaled_cast(zeros({2}, {.dtype = DType::f64}), full({}, 1.0f), Fp8Format::e4m3),
                                 DTypeError, "fp8_scaled_cast", "f64");
  PRECIS_REQUIRE_THROWS_WITH_ALL(fp8_scaled_cast(zeros({2}), full({2}, 1.0f), Fp8Format::e4m3), DTypeError, "scale",
                                 "one f32 value");
  PRECIS_REQUIRE_THROWS_WITH_ALL(
      fp8_scaled_cast(zeros({2}), full({}, 1.0, {.dtype = DType::f64}), Fp8Format::e4m3), DTypeError, "scale", "f64");
}

TEST_CASE("DelayedScalingState equals the host DelayedScaling bit for bit after every step", "[amp][fp8]") {
  std::mt19937 rng(29);
  // Amaxes a run can record: ordinary magnitudes, zero (nothing recorded), inf, NaN, values whose
  // scale overflows fp32 (tiny) or underflows (huge).
  const std::vector<float> specials = {0.0f, kInf, kNaN, 1e-40f, 1e-38f, 3e38f, 448.0f, 57344.0f};
  for (int64_t length : {1, 2, 5, 16}) {
    for (AmaxCompute compute : {AmaxCompute::max, AmaxCompute::most_recent}) {
      for (float margin : {0.0f, 1.0f, -2.5f}) {
        for (Fp8Format format : {Fp8Format::e4m3, Fp8Format::e5m2}) {
          const DelayedScalingOptions o{.format = format, .margin = margin, .amax_history_len = length,
                                        .amax_compute = compute};
          INFO("history " << length << (compute == AmaxCompute::max ? " max" : " most_recent") << " margin "
                          << margin);
          DelayedScaling host(o);
          DelayedScalingState dev(o);
          for (int step = 0; step < 40; ++step) {
            INFO("step " << step);
            const int records = static_cast<int>(rng() % 3);  // 0 records: the slot stays 0
            for (int r = 0; r < records; ++r) {
              const float a = rng() % 5 == 0 ? specials[rng() % specials.size()]
                                             : std::ldexp(static_cast<float>(rng() % 1000 + 1), static_cast<int>(rng() % 40) - 20);
              host.record(a);
              dev.record(full({}, a));
            }
            const Fp8Scale s = host.update();
            dev.update();
            REQUIRE(bits(dev.scale().item<float>()) == bits(s.scale));
            REQUIRE(bits(dev.scale_inv().item<float>()) == bits(s.scale_inv));
            const std::vector<float> h = dev.amax_history().to_vector<float>();
            REQUIRE(h.size() == host.amax_history().size());
            for (size_t i = 0; i < h.size(); ++i) {
              INFO("slot " << i << ": " << h[i] << " vs " << host.amax_history()[i]);
              REQUIRE((bits(h[i]) == bits(host.amax_history()[i]) || (std::isnan(h[i]) && std::isnan(host.amax_history()[i]))));
            }
          }
        }
      }
    }
  }
}

TEST_CASE("DelayedScalingState updates its tensors in place and round-trips its state", "[amp][fp8]") {
  DelayedScalingState s({.amax_history_len = 4});
  const Tensor scale = s.scale(), history = s.amax_history();
  s.record(full({}, 2.0f));
  s.update();
  CHECK(s.scale().data_ptr() == scale.data_ptr());  // a captured step keeps reading these
  CHECK(s.amax_history().data_ptr() == history.data_ptr());
  CHECK(scale.item<float>() == 224.0f);  // 448 / 2
  const StateDict saved = s.state_dict();
  s.record(full({}, 7.0f));
  s.update();
  s.load_state_dict(saved);
  CHECK(scale.item<float>() == 224.0f);
  CHECK(s.amax_history().to_vector<float>() == std::vector<float>{0.0f, 0.0f, 0.0f, 2.0f});
  DelayedScalingState other({.amax_history_len = 8});
  PRECIS_REQUIRE_THROWS_WITH_ALL(other.load_state_dict(saved), ShapeError, "amax history", "8 values");
  PRECIS_REQUIRE_THROWS_WITH_ALL(s.record(full({}, 1.0, {.dtype = DType::f64})), DTypeError, "amax", "f32");
}

// [cuda]: the same ops on a GPU give the CPU's bits (element-wise ops and a max: no summation order).
TEST_CASE("fp8_scaled_cast and DelayedScalingState on CUDA equal the CPU's bit for bit", "[amp][fp8][cuda]") {
  PRECIS_REQUIRE_CUDA();
  const Device gpu = Device::cuda(0);
  for (DType dtype : {DType::f16, DType::bf16}) {
    const Tensor x = all_16bit(dtype).first;
    for (Fp8Format format : {Fp8Format::e4m3, Fp8Format::e5m2}) {
      const Fp8Cast want = fp8_scaled_cast(x, full({}, 3.7f), format);
      const Fp8Cast got = fp8_scaled_cast(x.to(gpu), full({}, 3.7f, {.device = gpu}), format);
      CHECK(bytes_of(got.data.to(Device::cpu())) == bytes_of(want.data));
      CHECK(std::isnan(got.amax.item<float>()));
    }
  }
  DelayedScalingState host({.amax_history_len = 6}), dev({.amax_history_len = 6}, gpu);
  for (float a : {2.0f, 0.0f, kInf, 1e-40f, 300.0f, kNaN, 5.0f, 0.0f, 1e6f}) {
    host.record(full({}, a));
    dev.record(full({}, a, {.device = gpu}));
    host.update();
    dev.update();
    REQUIRE(bits(dev.scale().item<float>()) == bits(host.scale().item<float>()));
    REQUIRE(bits(dev.scale_inv().item<float>()) == bits(host.scale_inv().item<float>()));
  }
}

// An open amp::Audit records every fp8 cast: amax, scale, and how many values saturated or
// flushed to zero — what a user checks before trusting a scale.
TEST_CASE("an Audit records fp8 casts: amax, scale, saturated and flushed values", "[amp][fp8][audit]") {
  Audit audit;
  const Tensor x = from_vector<float>({1000.0f, 1.0f, 1e-6f, 0.0f, -500.0f});
  (void)fp8_scaled_cast(x, full({}, 1.0f), Fp8Format::e4m3, "x");
  (void)fp8_scaled_cast(x, full({}, 0.5f), Fp8Format::e4m3, "x");  // 500 still saturates, -250 not
  const std::vector<Fp8AuditRecord> records = audit.fp8_records();
  REQUIRE(records.size() == 1);
  const Fp8AuditRecord& r = records[0];
  CHECK(r.operand == "x");
  CHECK(r.casts == 2);
  CHECK(r.elements == 10);
  CHECK(r.nonzero == 8);
  CHECK(r.saturated == 3);  // 1000 and -500 at scale 1, 1000 at scale 0.5 (E4M3's max is 448)
  CHECK(r.flushed == 2);    // 1e-6 at both scales (E4M3's smallest subnormal is 2^-9)
  CHECK(r.amax == 1000.0);
  CHECK(r.last_scale == 0.5);
  CHECK(audit.report().find("fp8 operand") != std::string::npos);
}
