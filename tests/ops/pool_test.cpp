// Pooling: max_pool2d (values, indices, NaN), avg_pool2d (padding, ceil_mode, count_include_pad,
// divisor_override) and adaptive_avg_pool2d, forward and backward against naive f64 references,
// low-precision spot checks, gradient-check cases, and bad input.
#include <cmath>
#include <limits>
#include <string>
#include <utility>

#include "ops/functional.h"
#include "tests/support/op_cases.h"
#include "tests/support/tensor_testing.h"

namespace precis {
namespace {

using testing::randn_input;
using testing::TensorList;

struct PoolArgs {
  std::vector<int64_t> kernel, stride, padding{0}, dilation{1};
  bool ceil_mode = false;
  bool count_include_pad = true;
  int64_t divisor_override = 0;
};

int64_t at(const std::vector<int64_t>& v, int d) { return v.size() == 1 ? v[0] : v[d]; }

std::string describe(const Shape& s, const PoolArgs& a) {
  return "x " + shape_str(s) + " kernel " + shape_str(a.kernel) + " stride " + shape_str(a.stride) + " padding " +
         shape_str(a.padding) + " dilation " + shape_str(a.dilation) + (a.ceil_mode ? " ceil" : "") +
         (a.count_include_pad ? "" : " exclude-pad") + " divisor " + std::to_string(a.divisor_override);
}

// Output size along dim d, written from PyTorch's documented formula.
int64_t out_size(int64_t in, const PoolArgs& a, int d) {
  const int64_t k = at(a.kernel, d), s = a.stride.empty() ? k : at(a.stride, d), p = at(a.padding, d),
                dil = at(a.dilation, d);
  const double v = static_cast<double>(in + 2 * p - dil * (k - 1) - 1) / static_cast<double>(s) + 1;
  int64_t o = static_cast<int64_t>(a.ceil_mode ? std::ceil(v) : std::floor(v));
  if (a.ceil_mode && (o - 1) * s >= in + p) --o;
  return o;
}

// A reference pooling result in f64: the output (shape, values; indices for max pooling) and, for
// an upstream gradient, the input gradient.
struct PoolRef {
  std::vector<double> out, gx;
  std::vector<int64_t> idx;
  Shape shape;
};

// The reference for pooling the (N, C, H, W) input xs of `numel` values to (ho, wo): shape set,
// input gradient zero, no values yet.
PoolRef start_ref(const Shape& xs, size_t numel, int64_t ho, int64_t wo) {
  PoolRef r;
  r.shape = {xs[0], xs[1], ho, wo};
  r.gx.assign(numel, 0.0);
  return r;
}

// Max pooling of planes (N·C of them, H×W each). A NaN in a window is the result.
PoolRef reference_max(const Shape& xs, const std::vector<double>& x, const PoolArgs& a, const std::vector<double>& go) {
  const int64_t planes = xs[0] * xs[1], h = xs[2], w = xs[3];
  const int64_t ho = out_size(h, a, 0), wo = out_size(w, a, 1);
  PoolRef r = start_ref(xs, x.size(), ho, wo);
  for (int64_t pl = 0; pl < planes; ++pl)
    for (int64_t i = 0; i < ho; ++i)
      for (int64_t j = 0; j < wo; ++j) {
        double best = -INFINITY;
        int64_t best_i = -1;
        for (int64_t u = 0; u < at(a.kernel, 0); ++u)
          for (int64_t v = 0; v < at(a.kernel, 1); ++v) {
            const int64_t sh = a.stride.empty() ? at(a.kernel, 0) : at(a.stride, 0);
            const int64_t sw = a.stride.empty() ? at(a.kernel, 1) : at(a.stride, 1);
            const int64_t ih = i * sh - at(a.padding, 0) + u * at(a.dilation, 0);
            const int64_t iw = j * sw - at(a.padding, 1) + v * at(a.dilation, 1);
            if (ih < 0 || ih >= h || iw < 0 || iw >= w) continue;
            const double val = x[(pl * h + ih) * w + iw];
            if (best_i < 0 || val > best || std::isnan(val)) {  // the last NaN wins, as PyTorch
              best = val;
              best_i = ih * w + iw;
            }
          }
        r.out.push_back(best);
        r.idx.push_back(best_i);
        if (!go.empty()) r.gx[pl * h * w + best_i] += go[r.out.size() - 1];
      }
  return r;
}

// Average pooling with PyTorch's divisor rules.
PoolRef reference_avg(const Shape& xs, const std::vector<double>& x, const PoolArgs& a, const std::vector<double>& go) {
  const int64_t planes = xs[0] * xs[1], h = xs[2], w = xs[3];
  const int64_t ho = out_size(h, a, 0), wo = out_size(w, a, 1);
  PoolRef r = start_ref(xs, x.size(), ho, wo);
  const int64_t kh = at(a.kernel, 0), kw = at(a.kernel, 1);
  const int64_t sh = a.stride.empty() ? kh : at(a.stride, 0), sw = a.stride.empty() ? kw : at(a.stride, 1);
  const int64_t ph = at(a.padding, 0), pw = at(a.padding, 1);
  for (int64_t pl = 0; pl < planes; ++pl)
    for (int64_t i = 0; i < ho; ++i)
      for (int64_t j = 0; j < wo; ++j) {
        // The window within the padded input, then within the input.
        const int64_t h0 = i * sh - ph, w0 = j * sw - pw;
        const int64_t h1 = std::min(h0 + kh, h + ph), w1 = std::min(w0 + kw, w + pw);
        const int64_t padded = (h1 - h0) * (w1 - w0);
        double s = 0;
        int64_t count = 0;
        for (int64_t ih = std::max<int64_t>(h0, 0); ih < std::min(h1, h); ++ih)
          for (int64_t iw = std::max<int64_t>(w0, 0); iw < std::min(w1, w); ++iw) {
            s += x[(pl * h + ih) * w + iw];
            ++count;
          }
        const double div = a.divisor_override != 0 ? a.divisor_override : a.count_include_pad ? padded : count;
        r.out.push_back(count == 0 ? 0.0 : s / div);
        if (go.empty() || count == 0) continue;
        for (int64_t ih = std::max<int64_t>(h0, 0); ih < std::min(h1, h); ++ih)
          for (int64_t iw = std::max<int64_t>(w0, 0); iw < std::min(w1, w); ++iw)
            r.gx[(pl * h + ih) * w + iw] += go[r.out.size() - 1] / div;
      }
  return r;
}

PoolRef reference_adaptive(const Shape& xs, const std::vector<double>& x, int64_t ho, int64_t wo,
                           const std::vector<double>& go) {
  const int64_t planes = xs[0] * xs[1], h = xs[2], w = xs[3];
  PoolRef r = start_ref(xs, x.size(), ho, wo);
  for (int64_t pl = 0; pl < planes; ++pl)
    for (int64_t i = 0; i < ho; ++i)
      for (int64_t j = 0; j < wo; ++j) {
        const int64_t h0 = static_cast<int64_t>(std::floor(double(i * h) / ho));
        const int64_t h1 = static_cast<int64_t>(std::ceil(double((i + 1) * h) / ho));
        const int64_t w0 = static_cast<int64_t>(std::floor(double(j * w) / wo));
        const int64_t w1 = static_cast<int64_t>(std::ceil(double((j + 1) * w) / wo));
        const double n = static_cast<double>((h1 - h0) * (w1 - w0));
        double s = 0;
        for (int64_t ih = h0; ih < h1; ++ih)
          for (int64_t iw = w0; iw < w1; ++iw) s += x[(pl * h + ih) * w + iw];
        r.out.push_back(s / n);
        if (go.empty()) continue;
        for (int64_t ih = h0; ih < h1; ++ih)
          for (int64_t iw = w0; iw < w1; ++iw) r.gx[(pl * h + ih) * w + iw] += go[r.out.size() - 1] / n;
      }
  return r;
}

Tensor tensor_of(const std::vector<double>& v, const Shape& s) { return from_vector<double>(v, s); }

// Inputs drawn in f64, rounded to dtype; references computed on the rounded values.
struct Inputs {
  Tensor x;  // dtype, requires grad
  std::vector<double> xv;
};

Inputs make_input(const Shape& s, DType dtype, bool non_contiguous = false, uint64_t seed = 1) {
  Tensor x = randn_input(s, false, seed).to(dtype);
  Inputs in{x, x.to_vector<double>()};
  if (non_contiguous) in.x = testing::non_contiguous(in.x);
  in.x.requires_grad_(true);
  return in;
}

std::vector<double> upstream(const Shape& s, DType dtype) {
  return randn_input(s, false, 9).to(dtype).to_vector<double>();
}

// An upstream gradient for the output of `reference` (a PoolRef of an upstream gradient, empty for
// none) and the reference with it.
template <typename Reference>
std::pair<std::vector<double>, PoolRef> reference_with_upstream(Reference&& reference, DType dtype) {
  std::vector<double> go = upstream(reference(std::vector<double>{}).shape, dtype);
  PoolRef ref = reference(go);
  return {std::move(go), std::move(ref)};
}

// The forward output y (approximately) and, after backward with go, the input gradient against ref.
void check_close_to_ref(const Tensor& y, const Inputs& in, const std::vector<double>& go, const PoolRef& ref,
                        const Shape& s, DType dtype) {
  REQUIRE(y.sizes() == ref.shape);
  PRECIS_REQUIRE_CLOSE(y, tensor_of(ref.out, ref.shape), dtype);
  y.backward(tensor_of(go, ref.shape).to(dtype));
  PRECIS_REQUIRE_CLOSE(in.x.grad(), tensor_of(ref.gx, s), dtype);
}

const std::vector<std::pair<Shape, PoolArgs>>& max_configs() {
  static const std::vector<std::pair<Shape, PoolArgs>> all = {
      {{2, 3, 8, 8}, {{2}, {}}},
      {{2, 3, 9, 7}, {{3, 3}, {2, 2}, {1, 1}}},
      {{1, 4, 10, 9}, {{3, 2}, {2, 1}, {1, 0}, {2, 1}}},
      {{2, 2, 9, 9}, {{3}, {2}, {1}, {1}, true}},
      {{1, 2, 6, 5}, {{2}, {3}, {0}, {1}, true}},
      {{2, 2, 11, 8}, {{3}, {3}, {1}, {2}, true}},
      {{64, 5, 4, 4}, {{2}, {1}}},
  };
  return all;
}

void check_max(const Shape& s, const PoolArgs& a, DType dtype, bool non_contiguous = false) {
  INFO(describe(s, a) << " " << dtype_name(dtype));
  const Inputs in = make_input(s, dtype, non_contiguous);
  const auto [go, ref] =
      reference_with_upstream([&](const std::vector<double>& g) { return reference_max(s, in.xv, a, g); }, dtype);
  auto [values, indices] = max_pool2d_with_indices(in.x, a.kernel, a.stride, a.padding, a.dilation, a.ceil_mode);
  REQUIRE(values.sizes() == ref.shape);
  REQUIRE(indices.dtype() == DType::i64);
  CHECK(values.to_vector<double>() == ref.out);  // max is exact
  CHECK(indices.to_vector<int64_t>() == ref.idx);
  const Tensor plain = max_pool2d(in.x, a.kernel, a.stride, a.padding, a.dilation, a.ceil_mode);
  CHECK(plain.to_vector<double>() == ref.out);
  values.backward(tensor_of(go, ref.shape).to(dtype));
  PRECIS_REQUIRE_CLOSE(in.x.grad(), tensor_of(ref.gx, s), dtype);
}

TEST_CASE("max_pool2d: values, indices and gradient match a naive reference", "[ops][pool]") {
  for (DType dtype : {DType::f32, DType::f64})
    for (const auto& [s, a] : max_configs()) check_max(s, a, dtype);
  check_max(max_configs()[1].first, max_configs()[1].second, DType::f32, true);
}

TEST_CASE("max_pool2d: NaN propagates, -inf is a value", "[ops][pool]") {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (DType dtype : {DType::f32, DType::f64, DType::bf16}) {
    INFO(dtype_name(dtype));
    const Tensor x = from_vector<double>({1, nan, 3, 4, -INFINITY, -INFINITY, -INFINITY, -INFINITY}, {1, 2, 2, 2})
                         .to(dtype);
    auto [v, i] = max_pool2d_with_indices(x, {2});
    const std::vector<double> vv = v.to_vector<double>();
    CHECK(std::isnan(vv[0]));
    CHECK(vv[1] == -INFINITY);
    CHECK(i.to_vector<int64_t>() == std::vector<int64_t>{1, 0});
  }
}

TEST_CASE("max_pool2d: unbatched input", "[ops][pool]") {
  const Tensor x = randn_input({3, 6, 6}, true, 2, DType::f32);
  const Tensor y = max_pool2d(x, {2});
  REQUIRE(y.sizes() == Shape{3, 3, 3});
  PRECIS_REQUIRE_CLOSE(y, max_pool2d(x.detach().unsqueeze(0), {2}).squeeze(0), DType::f32);
  sum(y).backward();
  CHECK(sum(x.grad()).item<float>() == 27.0f);
}

const std::vector<std::pair<Shape, PoolArgs>>& avg_configs() {
  static const std::vector<std::pair<Shape, PoolArgs>> all = {
      {{2, 3, 8, 8}, {{2}, {}}},
      {{2, 3, 9, 7}, {{3, 3}, {2, 2}, {1, 1}}},
      {{2, 3, 9, 7}, {{3, 3}, {2, 2}, {1, 1}, {1}, false, false}},
      {{1, 4, 10, 9}, {{3, 2}, {2, 1}, {1, 0}}},
      {{2, 2, 9, 9}, {{3}, {2}, {1}, {1}, true}},
      {{2, 2, 9, 9}, {{3}, {2}, {1}, {1}, true, false}},
      {{1, 2, 6, 5}, {{2}, {3}, {0}, {1}, true}},
      {{1, 2, 7, 7}, {{3}, {2}, {1}, {1}, false, true, 5}},
  };
  return all;
}

void check_avg(const Shape& s, const PoolArgs& a, DType dtype, bool non_contiguous = false) {
  INFO(describe(s, a) << " " << dtype_name(dtype));
  const Inputs in = make_input(s, dtype, non_contiguous);
  const auto [go, ref] =
      reference_with_upstream([&](const std::vector<double>& g) { return reference_avg(s, in.xv, a, g); }, dtype);
  check_close_to_ref(avg_pool2d(in.x, a.kernel, a.stride, a.padding, a.ceil_mode, a.count_include_pad,
                                a.divisor_override),
                     in, go, ref, s, dtype);
}

TEST_CASE("avg_pool2d: forward and gradient match a naive reference", "[ops][pool]") {
  for (DType dtype : {DType::f32, DType::f64})
    for (const auto& [s, a] : avg_configs()) check_avg(s, a, dtype);
  check_avg(avg_configs()[2].first, avg_configs()[2].second, DType::f64, true);
}

void check_adaptive(const Shape& s, int64_t ho, int64_t wo, DType dtype, bool non_contiguous = false) {
  INFO("x " << shape_str(s) << " -> (" << ho << ", " << wo << ") " << dtype_name(dtype));
  const Inputs in = make_input(s, dtype, non_contiguous);
  const std::vector<double> go = upstream({s[0], s[1], ho, wo}, dtype);
  const PoolRef ref = reference_adaptive(s, in.xv, ho, wo, go);
  check_close_to_ref(adaptive_avg_pool2d(in.x, {ho, wo}), in, go, ref, s, dtype);
}

TEST_CASE("adaptive_avg_pool2d: forward and gradient match a naive reference", "[ops][pool]") {
  for (DType dtype : {DType::f32, DType::f64}) {
    check_adaptive({2, 3, 8, 8}, 1, 1, dtype);   // global average pooling
    check_adaptive({2, 3, 7, 9}, 3, 4, dtype);   // overlapping windows
    check_adaptive({1, 2, 5, 5}, 5, 5, dtype);   // identity
    check_adaptive({1, 2, 3, 4}, 6, 7, dtype);   // upsampling
    check_adaptive({2, 3, 10, 6}, 4, 2, dtype, true);
  }
  const Tensor x = randn_input({3, 5, 5}, false, 3, DType::f32);
  CHECK(adaptive_avg_pool2d(x, {2}).sizes() == Shape{3, 2, 2});
}

TEST_CASE("pooling: bf16 and f16 spot checks", "[ops][pool]") {
  for (DType dtype : {DType::bf16, DType::f16}) {
    check_max(max_configs()[1].first, max_configs()[1].second, dtype);
    check_avg(avg_configs()[1].first, avg_configs()[1].second, dtype);
    check_adaptive({2, 3, 7, 9}, 3, 4, dtype);
  }
}

TEST_CASE("pooling: bad input names the op and the input", "[ops][pool]") {
  const Tensor x = zeros({2, 3, 8, 8});
  PRECIS_REQUIRE_THROWS_WITH_ALL(max_pool2d(x, {3}, {}, {2}), ValueError, "max_pool2d", "at most half");
  PRECIS_REQUIRE_THROWS_WITH_ALL(avg_pool2d(x, {2}, {}, {2}), ValueError, "avg_pool2d", "at most half");
  PRECIS_REQUIRE_THROWS_WITH_ALL(max_pool2d(zeros({8, 8}), {2}), ShapeError, "max_pool2d", "4-D", "[8, 8] f32 cpu");
  PRECIS_REQUIRE_THROWS_WITH_ALL(max_pool2d(x, {9}), ShapeError, "max_pool2d", "larger than the padded input",
                                 "[2, 3, 8, 8] f32 cpu");
  PRECIS_REQUIRE_THROWS_WITH_ALL(max_pool2d(x, {3}, {1}, {1}, {5}), ShapeError, "dilation 5");
  PRECIS_REQUIRE_THROWS_WITH_ALL(max_pool2d(x, {0}), ValueError, "kernel_size", ">= 1");
  PRECIS_REQUIRE_THROWS_WITH_ALL(max_pool2d(x, {2}, {0}), ValueError, "stride", ">= 1");
  PRECIS_REQUIRE_THROWS_WITH_ALL(avg_pool2d(x, {2, 2, 2}), ValueError, "kernel_size", "1 or 2 values");
  PRECIS_REQUIRE_THROWS_WITH_ALL(avg_pool2d(x, {2}, {}, {0}, false, true, -1), ValueError, "divisor_override");
  PRECIS_REQUIRE_THROWS_WITH_ALL(adaptive_avg_pool2d(x, {0, 1}), ValueError, "adaptive_avg_pool2d", "output_size");
  PRECIS_REQUIRE_THROWS_WITH_ALL(adaptive_avg_pool2d(zeros({2, 3, 0, 4}), {1}), ShapeError, "empty",
                                 "[2, 3, 0, 4] f32 cpu");
  PRECIS_REQUIRE_THROWS_WITH_ALL(max_pool2d(zeros({1, 2, 4, 4}, {.dtype = DType::i64}), {2}), DTypeError,
                                 "max_pool2d", "floating", "[1, 2, 4, 4] i64 cpu");
}

TEST_CASE("max_pool2d: editing the returned indices in place is caught in backward", "[ops][pool]") {
  const Tensor x = randn_input({1, 1, 4, 4}, true, 5, DType::f64);
  auto [v, i] = max_pool2d_with_indices(x, {2});
  i.fill_(0);
  REQUIRE_THROWS_AS(sum(v).backward(), StateError);
}

Tensor grad_input(const Shape& s, uint64_t seed) { return randn_input(s, true, seed); }

const bool kPoolCases = testing::register_grad_cases({
    {OpId::max_pool2d, "2x2", [] { return TensorList{grad_input({2, 2, 4, 4}, 21)}; },
     [](const TensorList& x) { return TensorList{max_pool2d(x[0], {2})}; }},
    {OpId::max_pool2d, "overlapping, padded, dilated, ceil mode",
     [] { return TensorList{grad_input({1, 2, 7, 6}, 22)}; },
     [](const TensorList& x) { return TensorList{max_pool2d(x[0], {3, 2}, {2, 1}, {1, 1}, {1, 2}, true)}; }},
    {OpId::max_pool2d, "unbatched non-contiguous",
     [] { return TensorList{testing::non_contiguous(grad_input({2, 5, 5}, 23))}; },
     [](const TensorList& x) { return TensorList{max_pool2d(x[0], {3}, {2}, {1})}; }},
    {OpId::avg_pool2d, "padded, count_include_pad", [] { return TensorList{grad_input({2, 2, 5, 5}, 24)}; },
     [](const TensorList& x) { return TensorList{avg_pool2d(x[0], {3}, {2}, {1})}; }},
    {OpId::avg_pool2d, "ceil mode, padding excluded", [] { return TensorList{grad_input({1, 2, 6, 7}, 25)}; },
     [](const TensorList& x) { return TensorList{avg_pool2d(x[0], {3, 2}, {2, 2}, {1, 1}, true, false)}; }},
    {OpId::avg_pool2d, "divisor_override, non-contiguous",
     [] { return TensorList{testing::non_contiguous(grad_input({1, 3, 4, 4}, 26))}; },
     [](const TensorList& x) { return TensorList{avg_pool2d(x[0], {2}, {1}, {0}, false, true, 3)}; }},
    {OpId::max_pool1d, "overlapping, padded, dilated, ceil mode", [] { return TensorList{grad_input({2, 2, 9}, 31)}; },
     [](const TensorList& x) { return TensorList{max_pool1d(x[0], 3, 2, 1, 2, true)}; }},
    {OpId::max_pool1d, "unbatched non-contiguous",
     [] { return TensorList{testing::non_contiguous(grad_input({3, 8}, 32))}; },
     [](const TensorList& x) { return TensorList{max_pool1d(x[0], 2)}; }},
    {OpId::avg_pool1d, "padded, padding excluded", [] { return TensorList{grad_input({2, 2, 7}, 33)}; },
     [](const TensorList& x) { return TensorList{avg_pool1d(x[0], 3, 2, 1, false, false)}; }},
    {OpId::avg_pool1d, "ceil mode, unbatched", [] { return TensorList{grad_input({3, 8}, 34)}; },
     [](const TensorList& x) { return TensorList{avg_pool1d(x[0], 3, 2, 0, true)}; }},
    {OpId::adaptive_avg_pool2d, "overlapping windows", [] { return TensorList{grad_input({2, 2, 5, 7}, 27)}; },
     [](const TensorList& x) { return TensorList{adaptive_avg_pool2d(x[0], {3, 4})}; }},
    {OpId::adaptive_avg_pool2d, "global, unbatched", [] { return TensorList{grad_input({3, 4, 4}, 28)}; },
     [](const TensorList& x) { return TensorList{adaptive_avg_pool2d(x[0], {1})}; }},
});

}  // namespace
}  // namespace precis
