// conv2d: forward and all three gradients against a naive f64 reference over many geometries
// (stride, padding, dilation, groups incl. depthwise, 1×1, bias or not, non-contiguous and
// unbatched input), low-precision spot checks, gradient-check cases, and bad input.
#include <array>
#include <cmath>
#include <string>

#include "amp/autocast.h"
#include "core/thread_pool.h"
#include "ops/functional.h"
#include "tests/support/concurrency.h"
#include "tests/support/op_cases.h"
#include "tests/ops/conv_close.h"
#include "tests/support/tensor_testing.h"

namespace precis {
namespace {

using testing::randn_input;
using testing::TensorList;

struct Geometry {
  int64_t n, c, h, w, o, kh, kw;
  std::vector<int64_t> stride{1, 1}, padding{0, 0}, dilation{1, 1};
  int64_t groups = 1;
  bool bias = true;
};

std::string describe(const Geometry& g) {
  return "x (" + std::to_string(g.n) + ", " + std::to_string(g.c) + ", " + std::to_string(g.h) + ", " +
         std::to_string(g.w) + ") w (" + std::to_string(g.o) + ", " + std::to_string(g.c / g.groups) + ", " +
         std::to_string(g.kh) + ", " + std::to_string(g.kw) + ") stride " + shape_str(g.stride) + " padding " +
         shape_str(g.padding) + " dilation " + shape_str(g.dilation) + " groups " + std::to_string(g.groups) +
         (g.bias ? " bias" : "");
}

int64_t pair(const std::vector<int64_t>& v, int d) { return v.size() == 1 ? v[0] : v[d]; }

// The convolution written out as its definition, in f64: out, and for an upstream gradient g the
// gradients of x, w and b. Called with |x|, |w|, |b|, |g| it gives the scale that bounds the
// rounding error of each element (terms cancel, so the error is not bounded relative to the value).
struct Reference {
  std::vector<double> out, gx, gw, gb;
  Shape out_shape;
};

Reference reference_conv(const Geometry& g, const std::vector<double>& x, const std::vector<double>& w,
                         const std::vector<double>& b, const std::vector<double>& go) {
  const int64_t sh = pair(g.stride, 0), sw = pair(g.stride, 1), ph = pair(g.padding, 0), pw = pair(g.padding, 1);
  const int64_t dh = pair(g.dilation, 0), dw = pair(g.dilation, 1);
  const int64_t ho = (g.h + 2 * ph - dh * (g.kh - 1) - 1) / sh + 1, wo = (g.w + 2 * pw - dw * (g.kw - 1) - 1) / sw + 1;
  const int64_t cg = g.c / g.groups, og = g.o / g.groups;
  Reference r;
  r.out_shape = {g.n, g.o, ho, wo};
  r.out.assign(g.n * g.o * ho * wo, 0.0);
  r.gx.assign(x.size(), 0.0);
  r.gw.assign(w.size(), 0.0);
  r.gb.assign(g.o, 0.0);
  for (int64_t n = 0; n < g.n; ++n)
    for (int64_t o = 0; o < g.o; ++o)
      for (int64_t i = 0; i < ho; ++i)
        for (int64_t j = 0; j < wo; ++j) {
          const int64_t oi = ((n * g.o + o) * ho + i) * wo + j;
          double acc = b.empty() ? 0.0 : b[o];
          const double gv = go.empty() ? 0.0 : go[oi];
          r.gb[o] += gv;
          for (int64_t c = 0; c < cg; ++c)
            for (int64_t u = 0; u < g.kh; ++u)
              for (int64_t v = 0; v < g.kw; ++v) {
                const int64_t ih = i * sh - ph + u * dh, iw = j * sw - pw + v * dw;
                if (ih < 0 || ih >= g.h || iw < 0 || iw >= g.w) continue;
                const int64_t xi = ((n * g.c + (o / og) * cg + c) * g.h + ih) * g.w + iw;
                const int64_t wi = ((o * cg + c) * g.kh + u) * g.kw + v;
                acc += x[xi] * w[wi];
                r.gx[xi] += gv * w[wi];
                r.gw[wi] += gv * x[xi];
              }
          r.out[oi] = acc;
        }
  return r;
}

using testing::abs_of;
using testing::require_close_scaled;

// Runs conv2d forward and backward in `dtype` on inputs drawn in f64 and rounded to dtype, and
// compares everything with the reference on the rounded values. `prepare` may re-lay the input
// out (non-contiguous) without changing its values.
// A channels-last (NHWC in memory) copy of a 4-D tensor.
Tensor to_channels_last(const Tensor& t) { return t.permute({0, 2, 3, 1}).contiguous().permute({0, 3, 1, 2}); }
bool is_channels_last(const Tensor& t) { return t.permute({0, 2, 3, 1}).is_contiguous(); }

enum class InputLayout { contiguous, non_contiguous, channels_last };

void check_against_reference(const Geometry& g, DType dtype, InputLayout layout = InputLayout::contiguous) {
  INFO(describe(g) << " " << dtype_name(dtype)
                   << (layout == InputLayout::non_contiguous ? " non-contiguous"
                       : layout == InputLayout::channels_last ? " channels-last"
                                                              : ""));
  const Tensor x64 = randn_input({g.n, g.c, g.h, g.w}, false, 1).to(dtype).to(DType::f64);
  const Tensor w64 = randn_input({g.o, g.c / g.groups, g.kh, g.kw}, false, 2).to(dtype).to(DType::f64);
  const Tensor b64 = g.bias ? randn_input({g.o}, false, 3).to(dtype).to(DType::f64) : Tensor();
  const std::vector<double> xv = x64.to_vector<double>(), wv = w64.to_vector<double>(),
                            bv = g.bias ? b64.to_vector<double>() : std::vector<double>();
  Reference probe = reference_conv(g, xv, wv, bv, {});
  const Tensor go64 = randn_input(probe.out_shape, false, 4).to(dtype).to(DType::f64);
  const std::vector<double> gov = go64.to_vector<double>();
  const Reference ref = reference_conv(g, xv, wv, bv, gov);
  const Reference scale = reference_conv(g, abs_of(xv), abs_of(wv), abs_of(bv), abs_of(gov));

  Tensor x = x64.to(dtype);
  if (layout == InputLayout::non_contiguous) x = testing::non_contiguous(x);
  if (layout == InputLayout::channels_last) x = to_channels_last(x);
  x.requires_grad_(true);
  // The layout of the gradient conv2d sends to x (a leaf's .grad itself is stored contiguous).
  bool grad_channels_last = false;
  x.register_hook([&](const Tensor& gx) {
    grad_channels_last = is_channels_last(gx) && !gx.is_contiguous();
    return Tensor();
  });
  Tensor w = w64.to(dtype).requires_grad_(true);
  Tensor b = g.bias ? b64.to(dtype).requires_grad_(true) : Tensor();
  const Tensor out = conv2d(x, w, b, g.stride, g.padding, g.dilation, g.groups);
  REQUIRE(out.sizes() == ref.out_shape);
  REQUIRE(out.dtype() == dtype);
  require_close_scaled(out, ref.out, scale.out, dtype, "output");
  // A channels-last input keeps its layout: the output and the input gradient are channels-last,
  // and a channels-last upstream gradient is taken as it is.
  if (layout == InputLayout::channels_last) CHECK(is_channels_last(out));
  out.backward(layout == InputLayout::channels_last ? to_channels_last(go64.to(dtype)) : go64.to(dtype));
  require_close_scaled(x.grad(), ref.gx, scale.gx, dtype, "input gradient");
  if (layout == InputLayout::channels_last && g.c > 1) CHECK(grad_channels_last);
  CHECK(w.grad().is_contiguous());
  require_close_scaled(w.grad(), ref.gw, scale.gw, dtype, "weight gradient");
  if (g.bias) require_close_scaled(b.grad(), ref.gb, scale.gb, dtype, "bias gradient");
}

const std::vector<Geometry>& geometries() {
  static const std::vector<Geometry> all = {
      {2, 3, 7, 6, 4, 3, 3},
      {2, 4, 8, 8, 6, 3, 3, {2, 2}, {1, 1}, {1, 1}, 1, false},
      {1, 4, 9, 7, 4, 3, 2, {1, 2}, {2, 1}, {2, 1}, 2, true},           // groups, asymmetric everything
      {2, 6, 8, 8, 6, 3, 3, {1}, {1}, {1}, 6, true},                    // depthwise, 1-value geometry
      {1, 3, 6, 6, 6, 3, 3, {1, 1}, {1, 1}, {1, 1}, 3, false},          // depthwise with multiplier 2
      {2, 8, 5, 5, 16, 1, 1},                                           // 1×1
      {2, 8, 6, 7, 4, 1, 1, {2, 2}, {0, 0}, {1, 1}, 1, false},          // 1×1 stride 2
      {1, 2, 3, 3, 3, 5, 5, {1, 1}, {1, 1}},                            // kernel as large as the padded input
      {2, 3, 11, 10, 5, 5, 5, {3, 3}, {2, 2}},                          // windows left over at the end
      {2, 32, 10, 10, 32, 3, 3, {1, 1}, {1, 1}},                        // blocked-layout sizes
      {3, 17, 9, 9, 33, 3, 3, {2, 2}, {1, 1}, {1, 1}, 1, false},        // odd channel counts
      {4, 3, 16, 16, 16, 3, 3, {1, 1}, {1, 1}},                         // a first layer
      {2, 16, 8, 8, 32, 3, 3, {1, 1}, {2, 2}, {2, 2}, 4, true},         // dilated groups
  };
  return all;
}

TEST_CASE("conv2d: forward and gradients match a naive reference", "[ops][conv]") {
  for (DType dtype : {DType::f32, DType::f64})
    for (const Geometry& g : geometries()) check_against_reference(g, dtype);
}

TEST_CASE("conv2d: non-contiguous input", "[ops][conv]") {
  for (DType dtype : {DType::f32, DType::f64}) {
    check_against_reference(geometries()[0], dtype, InputLayout::non_contiguous);
    check_against_reference(geometries()[9], dtype, InputLayout::non_contiguous);
  }
}

// Channels-last input: f32 and bf16 run oneDNN's nhwc kernels in place (or its blocked ones with
// reorders where it has no nhwc one), f64 and f16 NCHW copies; all must match the reference.
TEST_CASE("conv2d: channels-last input gives channels-last output and gradients", "[ops][conv]") {
  for (DType dtype : {DType::f32, DType::f64})
    for (const Geometry& g : geometries())
      if (g.n > 0 && g.h * g.w > 1) check_against_reference(g, dtype, InputLayout::channels_last);
  for (DType dtype : {DType::bf16, DType::f16})
    for (int i : {0, 2, 6, 9, 11}) check_against_reference(geometries()[i], dtype, InputLayout::channels_last);
}

// An upstream gradient in either layout gives the same gradients (the backward re-lays it out).
TEST_CASE("conv2d: channels-last input with a contiguous upstream gradient", "[ops][conv]") {
  const Tensor x0 = randn_input({2, 16, 6, 6}, false, 1), w0 = randn_input({8, 16, 3, 3}, false, 2);
  const Tensor up = randn_input({2, 8, 6, 6}, false, 3);
  Tensor a = x0.clone().requires_grad_(true), b = to_channels_last(x0).detach().requires_grad_(true);
  Tensor wa = w0.clone().requires_grad_(true), wb = w0.clone().requires_grad_(true);
  bool grad_channels_last = false;
  b.register_hook([&](const Tensor& gx) {
    grad_channels_last = is_channels_last(gx) && !gx.is_contiguous();
    return Tensor();
  });
  conv2d(a, wa, Tensor(), {1}, {1}).backward(up);
  conv2d(b, wb, Tensor(), {1}, {1}).backward(up);
  CHECK(grad_channels_last);
  PRECIS_REQUIRE_CLOSE(b.grad(), a.grad(), DType::f32);
  PRECIS_REQUIRE_CLOSE(wb.grad(), wa.grad(), DType::f32);
}

TEST_CASE("conv2d: one thread and several give the same results", "[ops][conv]") {
  const int saved = get_num_threads();
  set_num_threads(1);
  check_against_reference(geometries()[9], DType::f32);
  check_against_reference(geometries()[2], DType::f64);
  set_num_threads(saved);
}

// The primitive cache is shared by all threads and each thread has its own oneDNN stream;
// concurrent calls with different and equal shapes must give the serial results.
TEST_CASE("conv2d: concurrent calls from several threads", "[ops][conv]") {
  const Tensor x1 = randn_input({2, 16, 8, 8}, false, 1, DType::f32), w1 = randn_input({16, 16, 3, 3}, false, 2, DType::f32);
  const Tensor x2 = randn_input({3, 8, 6, 6}, false, 3, DType::f32), w2 = randn_input({32, 8, 1, 1}, false, 4, DType::f32);
  const std::vector<float> r1 = conv2d(x1, w1, Tensor(), {1}, {1}).to_vector<float>();
  const std::vector<float> r2 = conv2d(x2, w2, Tensor(), {2}).to_vector<float>();
  testing::check_concurrent_calls(4, 30, [&](int t, int i) {
    const bool first = (t + i) % 2 == 0;
    const std::vector<float> got = first ? conv2d(x1, w1, Tensor(), {1}, {1}).to_vector<float>()
                                         : conv2d(x2, w2, Tensor(), {2}).to_vector<float>();
    return got == (first ? r1 : r2);
  });
}

// One backward kernel computes whichever of the three gradients are wanted (oneDNN shares
// grad_out's reorder between its two passes when both run); a subset must equal the full run.
TEST_CASE("conv2d: any subset of operands needing gradients gets the full run's gradients", "[ops][conv]") {
  for (DType dtype : {DType::f32, DType::bf16, DType::f64}) {
    const Tensor x0 = randn_input({2, 32, 10, 10}, false, 1, dtype), w0 = randn_input({32, 32, 3, 3}, false, 2, dtype),
                 b0 = randn_input({32}, false, 3, dtype), go = randn_input({2, 32, 10, 10}, false, 4, dtype);
    auto grads = [&](bool need_x, bool need_w, bool need_b) {
      Tensor x = x0.detach().requires_grad_(need_x), w = w0.detach().requires_grad_(need_w),
             b = b0.detach().requires_grad_(need_b);
      conv2d(x, w, b, {1}, {1}).backward(go);
      return std::array<Tensor, 3>{x.grad(), w.grad(), b.grad()};
    };
    const std::array<Tensor, 3> full = grads(true, true, true);
    for (int mask = 1; mask < 7; ++mask) {
      INFO(dtype_name(dtype) << " x " << (mask & 1) << " w " << (mask >> 1 & 1) << " b " << (mask >> 2 & 1));
      const std::array<Tensor, 3> got = grads(mask & 1, mask & 2, mask & 4);
      for (int i = 0; i < 3; ++i) {
        REQUIRE(got[i].defined() == static_cast<bool>(mask & (1 << i)));
        if (got[i].defined())
          REQUIRE(got[i].to(DType::f64).to_vector<double>() == full[i].to(DType::f64).to_vector<double>());
      }
    }
  }
}

// No input channels: the output is the bias, and the bias gradient still sums grad_out (oneDNN
// left it zero; such problems take the im2col path).
TEST_CASE("conv2d: zero input channels give the bias and its gradient", "[ops][conv]") {
  for (DType dtype : {DType::f32, DType::bf16, DType::f16, DType::f64}) {
    INFO(dtype_name(dtype));
    Tensor x = zeros({2, 0, 5, 5}, {.dtype = dtype}).requires_grad_(true);
    Tensor w = zeros({3, 0, 3, 3}, {.dtype = dtype}).requires_grad_(true);
    Tensor b = full({3}, 1.5, {.dtype = dtype}).requires_grad_(true);
    const Tensor y = conv2d(x, w, b, {1}, {1});
    REQUIRE(y.sizes() == Shape{2, 3, 5, 5});
    CHECK(y.to(DType::f64).to_vector<double>() == std::vector<double>(150, 1.5));
    sum(y).backward();
    CHECK(b.grad().to(DType::f64).to_vector<double>() == std::vector<double>(3, 50.0));
    CHECK(x.grad().numel() == 0);
    CHECK(w.grad().numel() == 0);
  }
}

TEST_CASE("conv2d: unbatched (C, H, W) input", "[ops][conv]") {
  for (DType dtype : {DType::f32, DType::f64}) {
    const Tensor x = randn_input({3, 6, 5}, true, 1, dtype), w = randn_input({4, 3, 3, 3}, true, 2, dtype);
    const Tensor b = randn_input({4}, true, 3, dtype);
    const Tensor out = conv2d(x, w, b, {1}, {1});
    REQUIRE(out.sizes() == Shape{4, 6, 5});
    const Tensor batched = conv2d(x.detach().unsqueeze(0), w.detach(), b.detach(), {1}, {1});
    PRECIS_REQUIRE_CLOSE(out, batched.squeeze(0), dtype);
    out.backward(ones_like(out));
    REQUIRE(x.grad().sizes() == x.sizes());
  }
}

TEST_CASE("conv2d: an empty batch gives an empty output and zero weight gradients", "[ops][conv]") {
  const Tensor x = randn_input({0, 3, 5, 5}, true, 1, DType::f32), w = randn_input({4, 3, 3, 3}, true, 2, DType::f32);
  const Tensor b = randn_input({4}, true, 3, DType::f32);
  const Tensor out = conv2d(x, w, b);
  REQUIRE(out.sizes() == Shape{0, 4, 3, 3});
  sum(out).backward();
  CHECK(sum(abs(w.grad())).item<float>() == 0.0f);
  CHECK(sum(abs(b.grad())).item<float>() == 0.0f);
}

// Low-precision results are compared with the reference on the rounded inputs: what remains is the
// kernel's own error (fp32 accumulation, one rounding of each result), bounded by the tolerance
// table's bf16/f16 rows.
TEST_CASE("conv2d: bf16 and f16 spot checks", "[ops][conv]") {
  for (DType dtype : {DType::bf16, DType::f16}) {
    check_against_reference(geometries()[9], dtype);
    check_against_reference(geometries()[2], dtype);
    check_against_reference(geometries()[6], dtype);
  }
}

TEST_CASE("conv2d: runs in bf16 under autocast, gradients reach fp32 parameters as fp32", "[ops][conv]") {
  const Tensor x = randn_input({2, 4, 6, 6}, true, 1, DType::f32), w = randn_input({8, 4, 3, 3}, true, 2, DType::f32);
  const Tensor b = randn_input({8}, true, 3, DType::f32);
  Tensor y;
  {
    amp::Autocast autocast(DType::bf16);
    y = conv2d(x, w, b, {1}, {1});
    CHECK(y.dtype() == DType::bf16);
    // Pooling is Passthrough: it stays in its input's dtype.
    CHECK(max_pool2d(y, {2}).dtype() == DType::bf16);
    CHECK(avg_pool2d(x, {2}).dtype() == DType::f32);
  }
  sum(y.to(DType::f32)).backward();
  CHECK(x.grad().dtype() == DType::f32);
  CHECK(w.grad().dtype() == DType::f32);
  CHECK(b.grad().dtype() == DType::f32);
}

TEST_CASE("conv2d: bad channels-last input names the operands", "[ops][conv]") {
  const Tensor x = to_channels_last(zeros({2, 4, 8, 8}));
  REQUIRE(is_channels_last(x));
  PRECIS_REQUIRE_THROWS_WITH_ALL(conv2d(x, zeros({6, 3, 3, 3})), ShapeError, "conv2d", "input has 4 channels",
                                 "[2, 4, 8, 8]", "[6, 3, 3, 3] f32 cpu");
  PRECIS_REQUIRE_THROWS_WITH_ALL(conv2d(x, zeros({6, 4, 3, 3}, {.dtype = DType::f64})), DTypeError, "conv2d",
                                 "different dtypes", "[6, 4, 3, 3] f64 cpu");
  PRECIS_REQUIRE_THROWS_WITH_ALL(conv2d(x, zeros({6, 4, 9, 9})), ShapeError, "conv2d", "larger than the padded input");
}

TEST_CASE("conv2d: bad input names the operands", "[ops][conv]") {
  const Tensor x = zeros({2, 4, 8, 8});
  SECTION("channel mismatch") {
    PRECIS_REQUIRE_THROWS_WITH_ALL(conv2d(x, zeros({6, 3, 3, 3})), ShapeError, "conv2d", "input has 4 channels",
                                   "[2, 4, 8, 8] f32 cpu", "[6, 3, 3, 3] f32 cpu");
  }
  SECTION("groups not dividing the channels") {
    PRECIS_REQUIRE_THROWS_WITH_ALL(conv2d(x, zeros({6, 2, 3, 3}), Tensor(), {1}, {0}, {1}, 4), ShapeError, "conv2d",
                                   "divisible by groups", "[6, 2, 3, 3] f32 cpu");
    PRECIS_REQUIRE_THROWS_WITH_ALL(conv2d(zeros({2, 5, 8, 8}), zeros({4, 2, 3, 3}), Tensor(), {1}, {0}, {1}, 2),
                                   ShapeError, "conv2d", "input has 5 channels", "[2, 5, 8, 8] f32 cpu");
    PRECIS_REQUIRE_THROWS_WITH_ALL(conv2d(x, zeros({4, 4, 3, 3}), Tensor(), {1}, {0}, {1}, 0), ValueError, "groups");
  }
  SECTION("kernel larger than the padded input") {
    PRECIS_REQUIRE_THROWS_WITH_ALL(conv2d(x, zeros({2, 4, 11, 3}), Tensor(), {1}, {1}), ShapeError, "conv2d",
                                   "larger than the padded input height", "[2, 4, 11, 3] f32 cpu");
    PRECIS_REQUIRE_THROWS_WITH_ALL(conv2d(x, zeros({2, 4, 3, 3}), Tensor(), {1}, {0}, {5}), ShapeError,
                                   "padded input", "dilation 5");
  }
  SECTION("wrong ndim") {
    PRECIS_REQUIRE_THROWS_WITH_ALL(conv2d(zeros({4, 8}), zeros({2, 4, 3, 3})), ShapeError, "conv2d", "4-D",
                                   "[4, 8] f32 cpu");
    PRECIS_REQUIRE_THROWS_WITH_ALL(conv2d(x, zeros({2, 4, 3})), ShapeError, "conv2d", "weight must be 4-D",
                                   "[2, 4, 3] f32 cpu");
  }
  SECTION("bias, dtype, geometry") {
    PRECIS_REQUIRE_THROWS_WITH_ALL(conv2d(x, zeros({2, 4, 3, 3}), zeros({3})), ShapeError, "bias must be (2)",
                                   "[3] f32 cpu");
    PRECIS_REQUIRE_THROWS_WITH_ALL(conv2d(x, zeros({2, 4, 3, 3}, {.dtype = DType::f64})), DTypeError,
                                   "different dtypes", "[2, 4, 3, 3] f64 cpu", "[2, 4, 8, 8] f32 cpu");
    PRECIS_REQUIRE_THROWS_WITH_ALL(conv2d(zeros({2, 4, 8, 8}, {.dtype = DType::i64}), zeros({2, 4, 3, 3},
                                          {.dtype = DType::i64})),
                                   DTypeError, "floating");
    PRECIS_REQUIRE_THROWS_WITH_ALL(conv2d(x, zeros({2, 4, 3, 3}), Tensor(), {0}), ValueError, "stride", ">= 1");
    PRECIS_REQUIRE_THROWS_WITH_ALL(conv2d(x, zeros({2, 4, 3, 3}), Tensor(), {1, 1, 1}), ValueError, "stride",
                                   "1 or 2 values");
    PRECIS_REQUIRE_THROWS_WITH_ALL(conv2d(x, zeros({2, 4, 3, 3}), Tensor(), {1}, {-1}), ValueError, "padding");
  }
}

// ---- conv_transpose2d: the adjoint of conv2d, checked through reference_conv -------------------

struct TransposeGeometry {
  int64_t n, c, h, w, o, kh, kw;  // input (n, c, h, w), weight (c, o / groups, kh, kw)
  std::vector<int64_t> stride{1, 1}, padding{0, 0}, output_padding{0, 0};
  int64_t groups = 1;
  std::vector<int64_t> dilation{1, 1};
  bool bias = true;

  int64_t out_size(int d) const {
    const int64_t in = d == 0 ? h : w, k = d == 0 ? kh : kw;
    return (in - 1) * pair(stride, d) - 2 * pair(padding, d) + pair(dilation, d) * (k - 1) + pair(output_padding, d) +
           1;
  }
  // The conv2d whose input gradient this is: input (n, o, Ho, Wo), weight (c, o / groups, kh, kw).
  Geometry adjoint() const { return {n, o, out_size(0), out_size(1), c, kh, kw, stride, padding, dilation, groups}; }
};

// out, gx, gw, gb of conv_transpose2d for the upstream gradient go, from the conv2d reference.
Reference reference_transpose(const TransposeGeometry& t, const std::vector<double>& x, const std::vector<double>& w,
                              const std::vector<double>& b, const std::vector<double>& go) {
  const Geometry a = t.adjoint();
  const std::vector<double> zeros_in(static_cast<size_t>(a.n * a.c * a.h * a.w), 0.0);
  Reference r;
  r.out_shape = {t.n, t.o, a.h, a.w};
  r.out = reference_conv(a, zeros_in, w, {}, x).gx;  // conv2d's input gradient for grad_out = x
  const int64_t plane = a.h * a.w;
  for (size_t i = 0; i < r.out.size(); ++i)
    if (!b.empty()) r.out[i] += b[(static_cast<int64_t>(i) / plane) % t.o];
  if (!go.empty()) {
    const Reference through = reference_conv(a, go, w, {}, x);  // input go, output gradient x
    r.gx = through.out;
    r.gw = through.gw;
    r.gb.assign(static_cast<size_t>(t.o), 0.0);
    for (size_t i = 0; i < go.size(); ++i) r.gb[(static_cast<int64_t>(i) / plane) % t.o] += go[i];
  }
  return r;
}

void check_transpose_against_reference(const TransposeGeometry& t, DType dtype, InputLayout layout) {
  INFO("conv_transpose2d " << describe(t.adjoint()) << " output_padding " << shape_str(t.output_padding) << " "
                           << dtype_name(dtype) << (layout == InputLayout::channels_last ? " channels-last" : ""));
  const Tensor x64 = randn_input({t.n, t.c, t.h, t.w}, false, 21).to(dtype).to(DType::f64);
  const Tensor w64 = randn_input({t.c, t.o / t.groups, t.kh, t.kw}, false, 22).to(dtype).to(DType::f64);
  const Tensor b64 = t.bias ? randn_input({t.o}, false, 23).to(dtype).to(DType::f64) : Tensor();
  const Tensor go64 = randn_input({t.n, t.o, t.out_size(0), t.out_size(1)}, false, 24).to(dtype).to(DType::f64);
  const std::vector<double> xv = x64.to_vector<double>(), wv = w64.to_vector<double>(),
                            bv = t.bias ? b64.to_vector<double>() : std::vector<double>(), gov = go64.to_vector<double>();
  const Reference ref = reference_transpose(t, xv, wv, bv, gov);
  const Reference scale = reference_transpose(t, abs_of(xv), abs_of(wv), abs_of(bv), abs_of(gov));

  Tensor x = x64.to(dtype);
  if (layout == InputLayout::non_contiguous) x = testing::non_contiguous(x);
  if (layout == InputLayout::channels_last) x = to_channels_last(x);
  x.requires_grad_(true);
  Tensor w = w64.to(dtype).requires_grad_(true);
  Tensor b = t.bias ? b64.to(dtype).requires_grad_(true) : Tensor();
  const Tensor out = conv_transpose2d(x, w, b, t.stride, t.padding, t.output_padding, t.groups, t.dilation);
  REQUIRE(out.sizes() == ref.out_shape);
  REQUIRE(out.dtype() == dtype);
  if (layout == InputLayout::channels_last) CHECK(is_channels_last(out));
  require_close_scaled(out, ref.out, scale.out, dtype, "output");
  out.backward(go64.to(dtype));
  require_close_scaled(x.grad(), ref.gx, scale.gx, dtype, "input gradient");
  require_close_scaled(w.grad(), ref.gw, scale.gw, dtype, "weight gradient");
  if (t.bias) require_close_scaled(b.grad(), ref.gb, scale.gb, dtype, "bias gradient");
}

const std::vector<TransposeGeometry>& transpose_geometries() {
  static const std::vector<TransposeGeometry> all = {
      {2, 3, 5, 4, 4, 3, 3},
      {2, 4, 4, 4, 3, 4, 4, {2, 2}, {1, 1}, {0, 0}, 1, {1, 1}, false},  // DCGAN's k4 s2 p1: doubles H and W
      {1, 4, 4, 5, 2, 3, 3, {2, 2}, {1, 1}, {1, 1}},                    // U-Net's k3 s2 p1 output_padding 1
      {2, 4, 3, 3, 6, 3, 3, {1, 1}, {1, 1}, {0, 0}, 2, {2, 2}},         // groups and dilation
      {1, 2, 3, 4, 3, 2, 3, {2, 1}, {1, 0}, {1, 0}, 1, {1, 2}},         // asymmetric everything
      {2, 6, 4, 4, 6, 3, 3, {2, 2}, {0, 0}, {1, 1}, 6, {1, 1}, false},  // depthwise
      {3, 8, 5, 5, 16, 1, 1, {1, 1}, {0, 0}, {0, 0}, 1, {1, 1}},        // 1×1
      {2, 32, 6, 6, 16, 2, 2, {2, 2}},                                  // blocked-layout sizes, k2 s2
  };
  return all;
}

TEST_CASE("conv_transpose2d: forward and gradients match conv2d's adjoint", "[ops][conv]") {
  for (DType dtype : {DType::f32, DType::f64})
    for (const TransposeGeometry& t : transpose_geometries()) {
      check_transpose_against_reference(t, dtype, InputLayout::contiguous);
      check_transpose_against_reference(t, dtype, InputLayout::non_contiguous);
      check_transpose_against_reference(t, dtype, InputLayout::channels_last);
    }
}

TEST_CASE("conv_transpose2d: inverts conv2d's geometry, unbatched input, empty batch", "[ops][conv]") {
  // A stride-2 conv2d and the transposed conv2d with output_padding 1 restore an even size.
  const Tensor x = randn_input({1, 3, 8, 8}, false, 31).to(DType::f32);
  const Tensor w = randn_input({4, 3, 3, 3}, false, 32).to(DType::f32);
  const Tensor down = conv2d(x, w, Tensor(), {2}, {1});
  REQUIRE(down.sizes() == Shape{1, 4, 4, 4});
  CHECK(conv_transpose2d(down, w, Tensor(), {2}, {1}, {1}).sizes() == x.sizes());
  // Unbatched (C, H, W): the batched result without its batch dim.
  const Tensor u = randn_input({3, 4, 5}, false, 33).to(DType::f32);
  const Tensor wt = randn_input({3, 2, 3, 3}, false, 34).to(DType::f32);
  const Tensor bt = randn_input({2}, false, 35).to(DType::f32);
  const Tensor unbatched = conv_transpose2d(u, wt, bt, {2}, {1}, {1});
  REQUIRE(unbatched.sizes() == Shape{2, 8, 10});
  CHECK(unbatched.to_vector<float>() == conv_transpose2d(u.unsqueeze(0), wt, bt, {2}, {1}, {1}).to_vector<float>());
  // f16/bf16 with a bias keep their dtype on an empty batch too.
  for (DType dt : {DType::f16, DType::bf16})
    CHECK(conv_transpose2d(zeros({0, 3, 4, 5}, {.dtype = dt}), wt.to(dt), bt.to(dt), {2}).dtype() == dt);
  // An empty batch: an empty output, and zero gradients for the weight and the bias.
  Tensor e = zeros({0, 3, 4, 5}).requires_grad_();
  Tensor we = wt.detach().requires_grad_(), be = bt.detach().requires_grad_();
  const Tensor eo = conv_transpose2d(e, we, be);
  REQUIRE(eo.sizes() == Shape{0, 2, 6, 7});
  sum(eo).backward();
  CHECK(we.grad().to_vector<float>() == std::vector<float>(static_cast<size_t>(we.numel()), 0.0f));
  CHECK(be.grad().to_vector<float>() == std::vector<float>{0.0f, 0.0f});
}

TEST_CASE("conv_transpose2d: runs in bf16 under autocast, fp32 parameters get fp32 gradients", "[ops][conv]") {
  Tensor x = randn_input({2, 4, 5, 5}, false, 41).to(DType::f32).requires_grad_();
  Tensor w = randn_input({4, 3, 4, 4}, false, 42).to(DType::f32).requires_grad_();
  Tensor b = randn_input({3}, false, 43).to(DType::f32).requires_grad_();
  Tensor out;
  {
    amp::Autocast autocast(DType::bf16);
    out = conv_transpose2d(x, w, b, {2}, {1});
  }
  REQUIRE(out.dtype() == DType::bf16);
  REQUIRE(out.sizes() == Shape{2, 3, 10, 10});
  sum(out.to(DType::f32)).backward();
  CHECK(x.grad().dtype() == DType::f32);
  CHECK(w.grad().dtype() == DType::f32);
  CHECK(b.grad().dtype() == DType::f32);
  CHECK(b.grad().to_vector<float>() == std::vector<float>{200.0f, 200.0f, 200.0f});  // 2·10·10 ones each
}

TEST_CASE("conv_transpose2d: bad input names the operands", "[ops][conv]") {
  const Tensor x = zeros({2, 4, 5, 5}), w = zeros({4, 3, 3, 3});
  PRECIS_REQUIRE_THROWS_WITH_ALL(conv_transpose2d(x, zeros({3, 3, 3, 3})), ShapeError, "conv_transpose2d",
                                 "4 channels", "weight.size(0) is 3", "(in_channels, out_channels / groups, kH, kW)");
  PRECIS_REQUIRE_THROWS_WITH_ALL(conv_transpose2d(x, w, zeros({4})), ShapeError, "bias must be (3)");
  PRECIS_REQUIRE_THROWS_WITH_ALL(conv_transpose2d(x, zeros({4, 3, 3, 3}), Tensor(), {1}, {0}, {0}, 3), ShapeError,
                                 "divisible by groups = 3");
  PRECIS_REQUIRE_THROWS_WITH_ALL(conv_transpose2d(x, w, Tensor(), {2}, {1}, {2}), ValueError, "output_padding",
                                 "smaller than stride");
  // PyTorch also takes output_padding below dilation: the message says so, and what to do instead.
  PRECIS_REQUIRE_THROWS_WITH_ALL(conv_transpose2d(x, w, Tensor(), {1}, {0}, {1}, 1, {2}), ValueError,
                                 "smaller than stride", "below dilation", "pad()");
  PRECIS_REQUIRE_THROWS_WITH_ALL(conv_transpose2d(zeros({1, 4, 1, 1}), w, Tensor(), {1}, {2}), ShapeError,
                                 "output height would be -1", "padding");
  PRECIS_REQUIRE_THROWS_WITH_ALL(conv_transpose2d(x, w.to(DType::f64)), DTypeError, "different dtypes", "f64");
  PRECIS_REQUIRE_THROWS_WITH_ALL(conv_transpose2d(zeros({4, 5}), w), ShapeError, "4-D (N, C, H, W)");
  PRECIS_REQUIRE_THROWS_WITH_ALL(conv_transpose2d(x, w, Tensor(), {0}), ValueError, "stride", ">= 1");
  PRECIS_REQUIRE_THROWS_WITH_ALL(conv_transpose2d(x, w, Tensor(), {int64_t{1} << 62}), ValueError, "overflows int64");
}

Tensor grad_input(const Shape& s, uint64_t seed) { return randn_input(s, true, seed); }

testing::GradCase transpose_case(const std::string& label, const TransposeGeometry& t) {
  return {OpId::conv_transpose2d, label,
          [t] {
            TensorList in{grad_input({t.n, t.c, t.h, t.w}, 51), grad_input({t.c, t.o / t.groups, t.kh, t.kw}, 52)};
            if (t.bias) in.push_back(grad_input({t.o}, 53));
            return in;
          },
          [t](const TensorList& x) {
            return TensorList{conv_transpose2d(x[0], x[1], t.bias ? x[2] : Tensor(), t.stride, t.padding,
                                               t.output_padding, t.groups, t.dilation)};
          }};
}

TEST_CASE("conv1d: conv2d over a height of 1, unbatched input, errors name conv1d", "[ops][conv]") {
  const Tensor x = randn_input({2, 4, 13}, false, 61).to(DType::f32), w = randn_input({6, 2, 3}, false, 62).to(DType::f32);
  const Tensor b = randn_input({6}, false, 63).to(DType::f32);
  const Tensor y = conv1d(x, w, b, 2, 1, 2, 2);
  REQUIRE(y.sizes() == Shape{2, 6, 6});  // (13 + 2 − 2·2 − 1) / 2 + 1
  PRECIS_REQUIRE_SAME_BITS(y, conv2d(x.unsqueeze(2), w.unsqueeze(2), b, {1, 2}, {0, 1}, {1, 2}, 2).squeeze(2));
  PRECIS_REQUIRE_SAME_BITS(conv1d(x.select(0, 1), w, b, 2, 1, 2, 2), y.select(0, 1));
  PRECIS_REQUIRE_THROWS_WITH_ALL(conv1d(x, randn_input({6, 3, 3}, false, 64).to(DType::f32)), ShapeError, "conv1d",
                                 "4 channels");
  PRECIS_REQUIRE_THROWS_WITH_ALL(conv1d(x.unsqueeze(0), w), ShapeError, "conv1d", "3-D (N, C, L)");
  PRECIS_REQUIRE_THROWS_WITH_ALL(conv1d(x, w.unsqueeze(0)), ShapeError, "conv1d", "weight must be 3-D");
  PRECIS_REQUIRE_THROWS_WITH_ALL(conv1d(x, w, Tensor(), 1, 0, 1, 4), ShapeError, "conv1d", "divisible by groups");
}

const bool kTransposeCases = testing::register_grad_cases({
    transpose_case("3x3 with bias", {2, 2, 3, 4, 3, 3, 3}),
    transpose_case("k4 stride 2 padding 1 no bias", {1, 3, 3, 3, 2, 4, 4, {2, 2}, {1, 1}, {0, 0}, 1, {1, 1}, false}),
    transpose_case("stride 2 output_padding 1", {1, 2, 3, 2, 2, 3, 3, {2, 2}, {1, 1}, {1, 1}}),
    transpose_case("groups 2 dilation 2", {1, 4, 3, 3, 4, 3, 3, {1, 1}, {1, 1}, {0, 0}, 2, {2, 2}}),
    {OpId::conv_transpose2d, "channels-last input, stride 2",
     [] { return TensorList{grad_input({2, 3, 3, 3}, 54), grad_input({3, 2, 3, 3}, 55), grad_input({2}, 56)}; },
     [](const TensorList& x) { return TensorList{conv_transpose2d(to_channels_last(x[0]), x[1], x[2], {2}, {1}, {1})}; }},
    {OpId::conv1d, "stride 2 padding 1 dilation 2 groups 2 bias",
     [] { return TensorList{grad_input({2, 4, 9}, 71), grad_input({4, 2, 3}, 72), grad_input({4}, 73)}; },
     [](const TensorList& x) { return TensorList{conv1d(x[0], x[1], x[2], 2, 1, 2, 2)}; }},
    {OpId::conv1d, "unbatched non-contiguous input",
     [] { return TensorList{testing::non_contiguous(grad_input({3, 7}, 74)), grad_input({2, 3, 2}, 75)}; },
     [](const TensorList& x) { return TensorList{conv1d(x[0], x[1])}; }},
    {OpId::conv_transpose2d, "unbatched non-contiguous input",
     [] { return TensorList{testing::non_contiguous(grad_input({2, 3, 4}, 57)), grad_input({2, 3, 2, 2}, 58)}; },
     [](const TensorList& x) { return TensorList{conv_transpose2d(x[0], x[1], Tensor(), {2})}; }},
});

testing::GradCase conv_case(const std::string& label, const Geometry& g) {
  return {OpId::conv2d, label,
          [g] {
            TensorList in{grad_input({g.n, g.c, g.h, g.w}, 11), grad_input({g.o, g.c / g.groups, g.kh, g.kw}, 12)};
            if (g.bias) in.push_back(grad_input({g.o}, 13));
            return in;
          },
          [g](const TensorList& x) {
            return TensorList{conv2d(x[0], x[1], g.bias ? x[2] : Tensor(), g.stride, g.padding, g.dilation, g.groups)};
          }};
}

const bool kConvCases = testing::register_grad_cases({
    conv_case("3x3 with bias", {2, 2, 5, 4, 3, 3, 3}),
    conv_case("stride 2 padding 1 no bias", {1, 3, 6, 5, 2, 3, 3, {2, 2}, {1, 1}, {1, 1}, 1, false}),
    conv_case("dilation and asymmetric geometry", {1, 2, 6, 7, 2, 2, 3, {1, 2}, {1, 0}, {2, 1}}),
    conv_case("groups 2", {1, 4, 4, 4, 4, 3, 3, {1, 1}, {1, 1}, {1, 1}, 2, true}),
    conv_case("depthwise", {2, 3, 4, 4, 3, 3, 3, {1, 1}, {1, 1}, {1, 1}, 3, true}),
    conv_case("1x1 stride 2", {2, 3, 4, 4, 2, 1, 1, {2, 2}, {0, 0}, {1, 1}, 1, true}),
    // Channels-last: the copy inside the case puts the NHWC conv path (f64: NCHW copies) in the graph.
    {OpId::conv2d, "channels-last input, stride 2, padding 1",
     [] { return TensorList{grad_input({2, 3, 5, 4}, 16), grad_input({4, 3, 3, 3}, 17), grad_input({4}, 18)}; },
     [](const TensorList& x) {
       return TensorList{conv2d(to_channels_last(x[0]), x[1], x[2], {2}, {1})};
     }},
    {OpId::conv2d, "unbatched non-contiguous input",
     [] { return TensorList{testing::non_contiguous(grad_input({2, 5, 4}, 14)), grad_input({3, 2, 2, 2}, 15)}; },
     [](const TensorList& x) { return TensorList{conv2d(x[0], x[1], Tensor(), {1}, {1})}; }},
});

}  // namespace
}  // namespace precis
