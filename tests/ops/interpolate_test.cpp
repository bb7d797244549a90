// interpolate: PyTorch 2.15's values and gradients (tests/golden/gen_fixtures.py), a naive f64
// reference of PyTorch's formulas (four taps per output of bilinear, the source index of nearest),
// exact copies in nearest for every dtype, f16/bf16 rounded once, and the gradient-check cases.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <tuple>
#include <vector>

#include "ops/functional.h"
#include "tensor/factory.h"
#include "tests/support/golden.h"
#include "tests/support/op_cases.h"
#include "tests/support/tensor_testing.h"

using namespace precis;
using namespace precis::testing;

namespace {

InterpolateMode mode_of(const std::string& name) {
  if (name == "nearest") return InterpolateMode::nearest;
  if (name == "nearest-exact") return InterpolateMode::nearest_exact;
  if (name == "linear") return InterpolateMode::linear;
  if (name == "bilinear") return InterpolateMode::bilinear;
  REQUIRE(name == "trilinear");
  return InterpolateMode::trilinear;
}

// Bilinear of one (H, W) plane at output (i, j), written out as PyTorch's CPU kernel states it:
// h0λ·(w0λ·x00 + w1λ·x01) + h1λ·(w0λ·x10 + w1λ·x11), source positions in double.
double bilinear_at(const std::vector<double>& x, int64_t h, int64_t w, int64_t oh, int64_t ow, int64_t i, int64_t j,
                   bool align) {
  const auto source = [align](int64_t in, int64_t out, int64_t dst, int64_t& lo, int64_t& hi, double& l1) {
    if (in == out) {
      lo = hi = dst, l1 = 0;
      return;
    }
    const double scale = align ? (out > 1 ? double(in - 1) / double(out - 1) : 0.0) : double(in) / double(out);
    double real = align ? scale * double(dst) : scale * (double(dst) + 0.5) - 0.5;
    real = std::max(real, 0.0);
    lo = std::min<int64_t>(static_cast<int64_t>(std::floor(real)), in - 1);
    hi = lo + (lo < in - 1 ? 1 : 0);
    l1 = std::clamp(real - double(lo), 0.0, 1.0);
  };
  int64_t h0, h1, w0, w1;
  double hl, wl;
  source(h, oh, i, h0, h1, hl);
  source(w, ow, j, w0, w1, wl);
  const auto at = [&](int64_t a, int64_t b) { return x[static_cast<size_t>(a * w + b)]; };
  return (1 - hl) * ((1 - wl) * at(h0, w0) + wl * at(h0, w1)) + hl * ((1 - wl) * at(h1, w0) + wl * at(h1, w1));
}

}  // namespace

TEST_CASE("golden interpolate", "[golden]") {
  check_golden_file(golden_dir() + "/ops/interpolate.safetensors",
                    [](const GoldenCase& c, std::map<std::string, Tensor>& in) -> GoldenOutputs {
                      InterpolateOptions o;
                      if (!c.args.is_null("size")) o.size = c.args.ints("size");
                      if (!c.args.is_null("scale_factor")) o.scale_factor = c.args.numbers("scale_factor");
                      o.mode = mode_of(c.args.text("mode"));
                      if (!c.args.is_null("align_corners")) o.align_corners = c.args.flag("align_corners");
                      o.recompute_scale_factor = c.args.flag("recompute_scale_factor");
                      return {{"out", interpolate(in["input"], o)}};
                    });
}

TEST_CASE("interpolate bilinear matches the four-tap f64 formula, align_corners both ways", "[ops][interpolate]") {
  const int64_t h = 5, w = 7;
  const Tensor x = randn_input({2, 3, h, w}, false, 11);
  for (bool align : {false, true}) {
    for (const Shape& size : std::vector<Shape>{{9, 4}, {3, 13}, {5, 7}, {1, 1}, {10, 14}}) {
      INFO("align_corners " << align << ", size " << size[0] << "x" << size[1]);
      const Tensor y = interpolate(x, {.size = size, .mode = InterpolateMode::bilinear, .align_corners = align});
      REQUIRE(y.sizes() == Shape{2, 3, size[0], size[1]});
      std::vector<double> expected;
      for (int64_t p = 0; p < 6; ++p) {
        const std::vector<double> plane = x.reshape({6, h * w}).select(0, p).contiguous().to_vector<double>();
        for (int64_t i = 0; i < size[0]; ++i)
          for (int64_t j = 0; j < size[1]; ++j)
            expected.push_back(bilinear_at(plane, h, w, size[0], size[1], i, j, align));
      }
      PRECIS_REQUIRE_CLOSE(y, from_vector<double>(expected, y.sizes()), DType::f64);
    }
  }
}

TEST_CASE("interpolate nearest copies input values exactly in every dtype, as the source index says",
          "[ops][interpolate]") {
  const Tensor base = randn_input({1, 2, 5, 6}, false, 12);
  // PyTorch's source index floor(dst·in/out) for size (8, 4), at most in - 1.
  std::vector<int64_t> rows, cols;
  for (int64_t i = 0; i < 8; ++i) rows.push_back(std::min<int64_t>(int64_t(std::floor(float(i) * (5.0f / 8.0f))), 4));
  for (int64_t j = 0; j < 4; ++j) cols.push_back(std::min<int64_t>(int64_t(std::floor(float(j) * (6.0f / 4.0f))), 5));
  for (DType dt : {DType::f64, DType::f32, DType::f16, DType::bf16, DType::i64, DType::i32, DType::boolean}) {
    INFO(dtype_name(dt));
    const Tensor x = dt == DType::boolean ? gt(base, 0.0) : is_floating(dt) ? base.to(dt) : mul(base, 10.0).to(dt);
    const Tensor y = interpolate(x, {.size = {8, 4}});
    REQUIRE(y.dtype() == dt);
    const Tensor expected = index_select(index_select(x, 2, from_vector<int64_t>(rows)), 3, from_vector<int64_t>(cols));
    PRECIS_REQUIRE_SAME_BITS(y, expected);
  }
}

TEST_CASE("interpolate nearest: PyTorch's shortcuts for out == in and out == 2 in apply to 4-D input only",
          "[ops][interpolate]") {
  // A scale_factor of 1.2 on 4 samples gives 4 outputs: the formula floor(dst / 1.2) repeats 0,
  // PyTorch's 2-D kernel copies. 2.0000001 gives 8: the formula, floor(dst / 2.0000001), differs
  // from dst / 2 at dst = 2 and 4. Values of PyTorch 2.15 (CPU).
  const auto values = [](const Tensor& y) { return y.reshape({-1}).to_vector<double>(); };
  const Tensor l = arange(4.0, {.dtype = DType::f64});
  CHECK(values(interpolate(l.reshape({1, 1, 4}), {.scale_factor = {1.2}})) == std::vector<double>{0, 0, 1, 2});
  CHECK(values(interpolate(l.reshape({1, 1, 4}), {.scale_factor = {2.0000001}})) ==
        std::vector<double>{0, 0, 0, 1, 1, 2, 2, 3});
  CHECK(values(interpolate(l.reshape({1, 1, 1, 1, 4}), {.scale_factor = {1.2}})) == std::vector<double>{0, 0, 1, 2});
  CHECK(values(interpolate(l.reshape({1, 1, 1, 4}), {.scale_factor = {1.2}})) == std::vector<double>{0, 1, 2, 3});
  CHECK(values(interpolate(l.reshape({1, 1, 1, 4}), {.scale_factor = {1.0, 2.0000001}})) ==
        std::vector<double>{0, 0, 1, 1, 2, 2, 3, 3});
}

TEST_CASE("interpolate nearest in f16 and bf16 sums its gradient in f32 and rounds once", "[ops][interpolate]") {
  // One input sample feeds a 3x3 output: nine upstream gradients of 1 + one ulp. Rounded after each
  // spatial dim the sum drifts by a whole ulp; PyTorch's (and the exact sum's rounding) does not.
  for (const auto& [dt, g, expected] : {std::tuple{DType::f16, 1.0009765625, 9.0078125},
                                        std::tuple{DType::bf16, 1.0078125, 9.0625}}) {
    INFO(dtype_name(dt));
    Tensor x = ones({1, 1, 1, 1}, {.dtype = dt}).requires_grad_();
    interpolate(x, {.size = {3, 3}}).backward(full({1, 1, 3, 3}, g, {.dtype = dt}));
    CHECK(x.grad().item<double>() == expected);
  }
}

TEST_CASE("interpolate in f16 and bf16 blends in f32 and rounds once", "[ops][interpolate]") {
  const Tensor x = randn_input({2, 3, 6, 5}, false, 13);
  for (DType dt : {DType::f16, DType::bf16}) {
    INFO(dtype_name(dt));
    const InterpolateOptions o{.scale_factor = {1.5}, .mode = InterpolateMode::bilinear};
    const Tensor y = interpolate(x.to(dt), o);
    REQUIRE(y.dtype() == dt);
    // The f32 result of the same (f16/bf16-exact) inputs, rounded once.
    PRECIS_REQUIRE_SAME_BITS(y, interpolate(x.to(dt).to(DType::f32), o).to(dt));
  }
}

TEST_CASE("interpolate: scale_factor samples at 1/factor unless recompute_scale_factor, one factor or one per dim",
          "[ops][interpolate]") {
  const Tensor x = randn_input({1, 1, 5, 6}, false, 14);
  const Tensor by_factor = interpolate(x, {.scale_factor = {1.7}, .mode = InterpolateMode::bilinear});
  REQUIRE(by_factor.sizes() == Shape{1, 1, 8, 10});  // floor(5·1.7), floor(6·1.7)
  const Tensor by_size = interpolate(x, {.size = {8, 10}, .mode = InterpolateMode::bilinear});
  const Tensor recomputed =
      interpolate(x, {.scale_factor = {1.7}, .mode = InterpolateMode::bilinear, .recompute_scale_factor = true});
  PRECIS_REQUIRE_SAME_BITS(recomputed, by_size);
  CHECK(max(abs(sub(by_factor, by_size))).item<double>() > 1e-3);  // 1/1.7 is not 5/8
  PRECIS_REQUIRE_SAME_BITS(interpolate(x, {.scale_factor = {2.0, 0.5}}), interpolate(x, {.size = {10, 3}}));
  PRECIS_REQUIRE_SAME_BITS(interpolate(x, {.size = {4}}), interpolate(x, {.size = {4, 4}}));
}

TEST_CASE("interpolate: an empty batch gives an empty result, and gradients flow to a non-contiguous input",
          "[ops][interpolate]") {
  const Tensor empty = interpolate(zeros({0, 2, 3, 3}), {.size = {5, 4}, .mode = InterpolateMode::bilinear});
  CHECK(empty.sizes() == Shape{0, 2, 5, 4});
  Tensor x = randn_input({2, 3, 4, 5}, true, 15, DType::f32);
  const Tensor xt = x.transpose(2, 3);  // (2, 3, 5, 4), strided
  const Tensor y = interpolate(xt, {.scale_factor = {2.0}, .mode = InterpolateMode::bilinear});
  sum(y).backward();
  // Bilinear weights of each output sum to 1, and so each input's gradient sums the weights it
  // got: over the whole input, the number of outputs.
  CHECK(sum(x.grad()).item<double>() == Approx(double(y.numel())).epsilon(1e-5));
}

namespace {

std::vector<GradCase> interpolate_grad_cases() {
  using Fn = std::function<TensorList(const TensorList&)>;
  const auto with = [](InterpolateOptions o) -> Fn {
    return [o](const TensorList& x) { return TensorList{interpolate(x[0], o)}; };
  };
  return {
      {OpId::interpolate, "nearest x2", [] { return TensorList{randn_input({1, 2, 3, 4}, true, 21)}; },
       with({.scale_factor = {2.0}})},
      {OpId::interpolate, "nearest down, uneven", [] { return TensorList{randn_input({2, 1, 7, 5}, true, 22)}; },
       with({.size = {3, 4}})},
      {OpId::interpolate, "bilinear up", [] { return TensorList{randn_input({1, 2, 3, 4}, true, 23)}; },
       with({.size = {5, 7}, .mode = InterpolateMode::bilinear})},
      {OpId::interpolate, "bilinear align_corners, non-contiguous",
       [] { return TensorList{non_contiguous(randn_input({1, 2, 4, 3}, true, 24))}; },
       with({.size = {6, 2}, .mode = InterpolateMode::bilinear, .align_corners = true})},
      {OpId::interpolate, "linear down", [] { return TensorList{randn_input({2, 2, 9}, true, 25)}; },
       with({.size = {4}, .mode = InterpolateMode::linear})},
      {OpId::interpolate, "trilinear", [] { return TensorList{randn_input({1, 1, 2, 3, 3}, true, 26)}; },
       with({.scale_factor = {1.5}, .mode = InterpolateMode::trilinear})},
  };
}

const bool kInterpolateCases = register_grad_cases(interpolate_grad_cases());

}  // namespace
