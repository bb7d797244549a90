// The fp8 scaling math (amp/fp8_scaling.h) against Transformer Engine's formulas re-implemented in
// tests/golden/gen_fp8_fixtures.py on recorded amax sequences (fixtures/fp8/delayed_scaling.safetensors),
// bit for bit; and the rules spelled out on small cases.
#include <catch2/catch.hpp>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "amp/fp8_scaling.h"
#include "tensor/safetensors.h"
#include "tests/support/golden.h"

namespace precis::testing {
namespace {

using amp::AmaxCompute;

std::vector<float> values(const Tensor& t) {
  REQUIRE(t.dtype() == DType::f32);
  const auto* p = static_cast<const float*>(t.data_ptr());
  return std::vector<float>(p, p + t.numel());
}

Fp8Format format_of(const std::string& s) { return s == "e4m3" ? Fp8Format::e4m3 : Fp8Format::e5m2; }

void require_same_bits(float got, float want, const std::string& what) {
  INFO(what << ": got " << got << " (0x" << std::hex << std::bit_cast<uint32_t>(got) << "), TE 0x"
            << std::bit_cast<uint32_t>(want) << std::dec << " (" << want << ")");
  REQUIRE(std::bit_cast<uint32_t>(got) == std::bit_cast<uint32_t>(want));
}

TEST_CASE("DelayedScaling and current_scaling match TE's formulas on recorded amax sequences",
          "[amp][fp8][golden]") {
  const SafetensorsFile file = load_safetensors(testing::golden_dir() + "/fp8/delayed_scaling.safetensors");
  std::map<std::string, Tensor> t(file.tensors.begin(), file.tensors.end());
  int delayed = 0, current = 0;
  for (const auto& [name, json] : file.metadata) {
    if (name == "generator") continue;
    const GoldenArgs args = GoldenArgs::parse(json);
    const std::vector<float> amax = values(t.at(name + ".amax")), scale = values(t.at(name + ".scale"));
    if (args.text("recipe") == "delayed") {
      ++delayed;
      amp::DelayedScaling s({.format = format_of(args.text("format")),
                             .margin = static_cast<float>(args.number("margin")),
                             .amax_history_len = args.integer("history_len"),
                             .amax_compute = args.text("algo") == "max" ? AmaxCompute::max : AmaxCompute::most_recent});
      const std::vector<float> scale_inv = values(t.at(name + ".scale_inv"));
      for (size_t step = 0; step < amax.size(); ++step) {
        s.record(amax[step]);
        const amp::Fp8Scale r = s.update();
        const std::string what = name + " step " + std::to_string(step) + " (amax " + std::to_string(amax[step]) + ")";
        require_same_bits(r.scale, scale[step], what + " scale");
        require_same_bits(r.scale_inv, scale_inv[step], what + " scale_inv");
        REQUIRE(s.scale() == r.scale);
      }
      const std::vector<float> history = values(t.at(name + ".history"));
      REQUIRE(s.amax_history().size() == history.size());
      for (size_t i = 0; i < history.size(); ++i) {
        const float got = s.amax_history()[i], want = history[i];
        INFO(name << " history slot " << i);
        REQUIRE((std::isnan(want) ? std::isnan(got) : got == want));
      }
    } else {
      ++current;
      const amp::CurrentScalingOptions o{.format = format_of(args.text("format")),
                                         .amax_epsilon = static_cast<float>(args.number("epsilon")),
                                         .power_2_scale = args.flag("pow2")};
      for (size_t i = 0; i < amax.size(); ++i) {
        const amp::Fp8Scale r = amp::current_scaling(amax[i], o);
        require_same_bits(r.scale, scale[i], name + " amax " + std::to_string(amax[i]));
        require_same_bits(r.scale_inv, 1.0f / scale[i], name + " scale_inv");
      }
    }
  }
  REQUIRE(delayed >= 6);
  REQUIRE(current >= 3);
}

TEST_CASE("DelayedScaling keeps the scale on zero, inf and NaN amaxes and rolls its history", "[amp][fp8]") {
  amp::DelayedScaling s({.format = Fp8Format::e4m3, .amax_history_len = 3});
  REQUIRE(s.scale() == 1.0f);
  REQUIRE(s.amax_history() == std::vector<float>{0, 0, 0});
  s.record(2.0f);
  s.record(7.0f);  // micro-batches combine as the max
  s.record(1.0f);
  REQUIRE(s.update().scale == 64.0f);  // 448 / 7
  REQUIRE(s.amax_history() == std::vector<float>{0, 0, 7});
  REQUIRE(s.scale_inv() == 1.0f / 64.0f);
  s.update();  // nothing recorded: no roll, same scale
  REQUIRE(s.amax_history() == std::vector<float>{0, 0, 7});
  REQUIRE(s.scale() == 64.0f);
  s.record(14.0f);
  REQUIRE(s.update().scale == 32.0f);
  s.record(1.0f);
  REQUIRE(s.update().scale == 32.0f);  // 14 still in the window
  s.record(1.0f);
  s.record(1.0f);
  s.update();
  REQUIRE(s.amax_history() == std::vector<float>{0, 1, 1});  // 7 and 14 rolled out...
  REQUIRE(s.scale() == 32.0f);  // ...but TE's max covers the slot leaving in this update too
  s.record(1.0f);
  REQUIRE(s.update().scale == 448.0f);
  s.record(INFINITY);
  REQUIRE(s.update().scale == 448.0f);  // an inf in the window keeps the scale while it stays
  REQUIRE(s.amax_history() == std::vector<float>{0, 1, INFINITY});
  s.record(std::numeric_limits<float>::quiet_NaN());
  s.record(5.0f);  // a NaN sticks for the step
  REQUIRE(std::isnan(s.amax_history()[0]));
  REQUIRE(s.update().scale == 448.0f);
  REQUIRE_THROWS_AS(amp::DelayedScaling({.amax_history_len = 0}), ValueError);
  REQUIRE_THROWS_AS(amp::DelayedScaling({.margin = NAN}), ValueError);
}

TEST_CASE("DelayedScaling margin, most_recent and an overflowing scale", "[amp][fp8]") {
  amp::DelayedScaling s({.format = Fp8Format::e5m2, .margin = 2, .amax_history_len = 4,
                         .amax_compute = AmaxCompute::most_recent});
  s.record(1024.0f);
  REQUIRE(s.update().scale == 57344.0f / 4 / 1024);
  s.record(7.0f);
  REQUIRE(s.update().scale == 57344.0f / 4 / 7);  // only the newest amax counts
  s.record(1e-39f);  // subnormal amax: 14336 / 1e-39 overflows fp32
  REQUIRE(s.update().scale == std::numeric_limits<float>::max());
}

TEST_CASE("current_scaling follows TE's compute_scale_from_amax", "[amp][fp8]") {
  REQUIRE(amp::current_scaling(7.0f).scale == 64.0f);
  REQUIRE(amp::current_scaling(0.0f).scale == 1.0f);
  REQUIRE(amp::current_scaling(INFINITY).scale == 1.0f);
  REQUIRE(amp::current_scaling(NAN).scale == 1.0f);
  REQUIRE(amp::current_scaling(0.0f, {.amax_epsilon = 0.5f}).scale == 896.0f);
  REQUIRE(amp::current_scaling(3.0f, {.power_2_scale = true}).scale == 128.0f);  // 149.33 rounded down
  REQUIRE(amp::current_scaling(1e-39f).scale == std::numeric_limits<float>::max());
  REQUIRE_THROWS_AS(amp::current_scaling(1.0f, {.amax_epsilon = -1.0f}), ValueError);
}

}  // namespace
}  // namespace precis::testing
