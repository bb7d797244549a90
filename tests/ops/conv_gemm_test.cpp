// The GEMM route of the CPU conv2d (im2col + oneDNN matmul on channels-last activations,
// ops/cpu/conv_gemm.cpp): every ResNet-18 shape class (3×3 stride 1 and 2 with padding, 1×1 stride
// 1 and 2, the 3-channel stem, the 512-channel 4×4 stage) against a naive f64 reference and
// against oneDNN's convolution primitives, f32 and bf16; and that conv2d really takes the route
// where the shape rule says so.
#ifdef PRECIS_HAS_ONEDNN

#include <cmath>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "ops/cpu/conv_impl.h"
#include "ops/functional.h"
#include "tensor/factory.h"
#include "tests/ops/conv_close.h"
#include "tests/support/tensor_testing.h"

namespace precis {
namespace {

using cpu::ConvShape;

struct Case {
  int64_t n, c, hw, o, k, stride, pad;
};

ConvShape shape_of(const Case& t) {
  ConvShape s{};
  s.n = t.n;
  s.c = t.c;
  s.h = s.w = t.hw;
  s.o = t.o;
  s.kh = s.kw = t.k;
  s.ho = s.wo = (t.hw + 2 * t.pad - t.k) / t.stride + 1;
  s.p.stride[0] = s.p.stride[1] = t.stride;
  s.p.padding[0] = s.p.padding[1] = t.pad;
  s.nhwc = true;
  return s;
}

std::string describe(const Case& t) {
  return "x (" + std::to_string(t.n) + ", " + std::to_string(t.c) + ", " + std::to_string(t.hw) + ", " +
         std::to_string(t.hw) + ") channels-last, w (" + std::to_string(t.o) + ", " + std::to_string(t.c) + ", " +
         std::to_string(t.k) + ", " + std::to_string(t.k) + ") stride " + std::to_string(t.stride) + " padding " +
         std::to_string(t.pad);
}

// The convolution's definition in f64 on NHWC x (N, H, W, C), w (O, C, kh, kw), go (N, Ho, Wo, O).
struct Reference {
  std::vector<double> out, gx, gw, gb;
};
Reference reference(const ConvShape& s, const std::vector<double>& x, const std::vector<double>& w,
                    const std::vector<double>& b, const std::vector<double>& go) {
  Reference r;
  r.out.assign(s.n * s.ho * s.wo * s.o, 0.0);
  r.gx.assign(x.size(), 0.0);
  r.gw.assign(w.size(), 0.0);
  r.gb.assign(s.o, 0.0);
  for (int64_t n = 0; n < s.n; ++n)
    for (int64_t oh = 0; oh < s.ho; ++oh)
      for (int64_t ow = 0; ow < s.wo; ++ow)
        for (int64_t o = 0; o < s.o; ++o) {
          const int64_t yi = ((n * s.ho + oh) * s.wo + ow) * s.o + o;
          double acc = b[o];
          r.gb[o] += go[yi];
          for (int64_t c = 0; c < s.c; ++c)
            for (int64_t i = 0; i < s.kh; ++i)
              for (int64_t j = 0; j < s.kw; ++j) {
                const int64_t ih = oh * s.p.stride[0] - s.p.padding[0] + i;
                const int64_t iw = ow * s.p.stride[1] - s.p.padding[1] + j;
                if (ih < 0 || ih >= s.h || iw < 0 || iw >= s.w) continue;
                const int64_t xi = ((n * s.h + ih) * s.w + iw) * s.c + c, wi = ((o * s.c + c) * s.kh + i) * s.kw + j;
                acc += x[xi] * w[wi];
                r.gx[xi] += go[yi] * w[wi];
                r.gw[wi] += go[yi] * x[xi];
              }
          r.out[yi] = acc;
        }
  return r;
}

using testing::abs_of;
using testing::require_close_scaled;

struct Results {
  Tensor out, gx, gw, gb;
};

// All three passes through the GEMM route (gemm) or oneDNN's convolution primitives.
Results run(bool gemm, DType dtype, const ConvShape& s, const Tensor& x, const Tensor& w, const Tensor& b,
            const Tensor& go) {
  Results r{empty({s.n, s.ho, s.wo, s.o}, {.dtype = dtype}), empty({s.n, s.h, s.w, s.c}, {.dtype = dtype}),
            empty({s.o, s.c, s.kh, s.kw}, {.dtype = dtype}), empty({s.o}, {.dtype = dtype})};
  if (gemm) {
    REQUIRE(cpu::gemm_conv_forward(dtype, s, x.data_ptr(), w.data_ptr(), b.data_ptr(), r.out.data_ptr()));
    REQUIRE(cpu::gemm_conv_backward_input(dtype, s, go.data_ptr(), w.data_ptr(), r.gx.data_ptr()));
    REQUIRE(cpu::gemm_conv_backward_weight(dtype, s, go.data_ptr(), x.data_ptr(), r.gw.data_ptr(), r.gb.data_ptr()));
  } else {
    REQUIRE(cpu::onednn_conv_forward(dtype, s, x.data_ptr(), w.data_ptr(), b.data_ptr(), r.out.data_ptr()));
    REQUIRE(cpu::onednn_conv_backward(dtype, s, go.data_ptr(), x.data_ptr(), w.data_ptr(), r.gx.data_ptr(),
                                      r.gw.data_ptr(), r.gb.data_ptr()));
  }
  return r;
}

void check_case(const Case& t, DType dtype) {
  INFO(describe(t) << " " << dtype_name(dtype));
  const ConvShape s = shape_of(t);
  // Drawn in f64 and rounded to dtype; the reference sees the rounded values.
  const Tensor x = testing::randn_input({s.n, s.h, s.w, s.c}, false, 1).to(dtype);
  const Tensor w = testing::randn_input({s.o, s.c, s.kh, s.kw}, false, 2).to(dtype);
  const Tensor b = testing::randn_input({s.o}, false, 3).to(dtype);
  const Tensor go = testing::randn_input({s.n, s.ho, s.wo, s.o}, false, 4).to(dtype);
  const auto values = [](const Tensor& v) { return v.to(DType::f64).to_vector<double>(); };
  const Reference ref = reference(s, values(x), values(w), values(b), values(go));
  const Reference scale = reference(s, abs_of(values(x)), abs_of(values(w)), abs_of(values(b)), abs_of(values(go)));
  REQUIRE(cpu::gemm_conv_applies(dtype, s));
  const Results g = run(true, dtype, s, x, w, b, go);
  require_close_scaled(g.out, ref.out, scale.out, dtype, "GEMM route: output");
  require_close_scaled(g.gx, ref.gx, scale.gx, dtype, "GEMM route: input gradient");
  require_close_scaled(g.gw, ref.gw, scale.gw, dtype, "GEMM route: weight gradient");
  require_close_scaled(g.gb, ref.gb, scale.gb, dtype, "GEMM route: bias gradient");
  // oneDNN's convolution on the same operands: within the same bound of the reference, and of the
  // GEMM route by twice that (an elementwise relative comparison would fail where terms cancel:
  // e.g. bf16 col2im sums rounded bf16 terms, exact to the scale, not to the small result).
  const Results d = run(false, dtype, s, x, w, b, go);
  require_close_scaled(d.out, ref.out, scale.out, dtype, "oneDNN: output");
  require_close_scaled(d.gx, ref.gx, scale.gx, dtype, "oneDNN: input gradient");
  require_close_scaled(d.gw, ref.gw, scale.gw, dtype, "oneDNN: weight gradient");
  require_close_scaled(d.gb, ref.gb, scale.gb, dtype, "oneDNN: bias gradient");
  require_close_scaled(g.out, values(d.out), scale.out, dtype, "GEMM route vs oneDNN: output", 2);
  require_close_scaled(g.gx, values(d.gx), scale.gx, dtype, "GEMM route vs oneDNN: input gradient", 2);
  require_close_scaled(g.gw, values(d.gw), scale.gw, dtype, "GEMM route vs oneDNN: weight gradient", 2);
}

// ResNet-18's shape classes at small batch and map sizes (the 512-channel 4×4 stage as it is).
const std::vector<Case>& cases() {
  static const std::vector<Case> all = {
      {2, 16, 8, 16, 3, 1, 1},   // 3×3 stride 1, padding 1 (the basic block)
      {2, 16, 8, 32, 3, 2, 1},   // 3×3 stride 2 (a stage's first conv)
      {2, 16, 8, 32, 1, 2, 0},   // 1×1 stride 2 (the projection shortcut)
      {2, 16, 5, 24, 1, 1, 0},   // 1×1 stride 1
      {2, 3, 9, 8, 3, 1, 1},     // the 3-channel stem
      {3, 5, 7, 7, 3, 2, 1},     // odd sizes: windows overlap unevenly
      {2, 512, 4, 512, 3, 1, 1}, // ResNet-18 CIFAR's last stage
  };
  return all;
}

TEST_CASE("conv2d GEMM route: matches the reference and oneDNN's convolution", "[ops][conv]") {
  for (DType dtype : {DType::f32, DType::bf16})
    for (const Case& t : cases()) check_case(t, dtype);
}

TEST_CASE("conv2d GEMM route: one thread gives the same results", "[ops][conv]") {
  const int saved = get_num_threads();
  set_num_threads(1);
  check_case(cases()[1], DType::bf16);
  set_num_threads(saved);
}

TEST_CASE("conv2d GEMM route: the shape rule", "[ops][conv]") {
  const ConvShape last = shape_of({64, 512, 4, 512, 3, 1, 1}), first = shape_of({64, 64, 32, 64, 3, 1, 1});
  const ConvShape stage3 = shape_of({64, 256, 8, 256, 3, 1, 1});
  using cpu::ConvPass;
  // Never f32, never outside gemm_conv_applies, never where the rule was not measured.
  CHECK_FALSE(cpu::gemm_conv_preferred(DType::f32, last, ConvPass::forward));
  ConvShape grouped = last;
  grouped.p.groups = 2;
  CHECK_FALSE(cpu::gemm_conv_preferred(DType::bf16, grouped, ConvPass::backward_weight));
  ConvShape nchw = last;
  nchw.nhwc = false;
  CHECK_FALSE(cpu::gemm_conv_preferred(DType::bf16, nchw, ConvPass::backward_weight));
  CHECK_FALSE(cpu::gemm_conv_preferred(DType::bf16, first, ConvPass::forward));
  CHECK_FALSE(cpu::gemm_conv_preferred(DType::bf16, first, ConvPass::backward_weight));
  if (!cpu::gemm_conv_rule_active()) {
    WARN("no AMX bf16 on this CPU: the GEMM route's rule is off here and its positive cases are not checked");
    CHECK_FALSE(cpu::gemm_conv_preferred(DType::bf16, last, ConvPass::forward));
    return;
  }
  for (ConvPass pass : {ConvPass::forward, ConvPass::backward_input, ConvPass::backward_weight})
    CHECK(cpu::gemm_conv_preferred(DType::bf16, last, pass));
  CHECK(cpu::gemm_conv_preferred(DType::bf16, stage3, ConvPass::backward_weight));
  CHECK_FALSE(cpu::gemm_conv_preferred(DType::bf16, stage3, ConvPass::forward));
}

// conv2d itself (not just the rule) sends a channels-last bf16 512-channel 4×4 problem through the
// GEMM route: all three passes, counted by the route.
TEST_CASE("conv2d GEMM route: conv2d takes it for a 512-channel 4x4 bf16 channels-last input", "[ops][conv]") {
  if (!cpu::gemm_conv_rule_active()) {
    WARN("no AMX bf16 on this CPU: the GEMM route is not taken here (not checked)");
    return;
  }
  const Tensor x0 = testing::randn_input({2, 512, 4, 4}, false, 1).to(DType::bf16);
  Tensor x = x0.permute({0, 2, 3, 1}).contiguous().permute({0, 3, 1, 2}).detach().requires_grad_(true);
  Tensor w = testing::randn_input({512, 512, 3, 3}, false, 2).to(DType::bf16).requires_grad_(true);
  const int64_t before = cpu::gemm_conv_passes_run();
  conv2d(x, w, Tensor(), {1}, {1}).sum().backward();
  CHECK(cpu::gemm_conv_passes_run() - before == 3);
  REQUIRE(x.grad().defined());
  REQUIRE(w.grad().defined());
}

// oneDNN 2.x on AMX: the input gradient of a stride-1 convolution runs as a forward convolution
// (ops/cpu/conv_onednn.cpp); check_case compares it with the f64 reference in f32 and bf16.
TEST_CASE("conv2d oneDNN: a stride-1 input gradient as a forward convolution matches the reference",
          "[ops][conv]") {
  const Case basic = cases()[0];  // 16 -> 16 channels, 3x3 stride 1 padding 1 on 8x8
  const ConvShape s = shape_of(basic);
  // Never where it was not measured: strided, grouped, 4x4 maps, channel counts off the blocks.
  for (const Case& other : {cases()[1], cases()[2], cases()[6], Case{2, 24, 8, 24, 3, 1, 1}})
    CHECK_FALSE(cpu::onednn_input_gradient_as_forward(shape_of(other)));
  ConvShape grouped = s;
  grouped.p.groups = 2;
  CHECK_FALSE(cpu::onednn_input_gradient_as_forward(grouped));
  if (cpu::onednn_major_version() >= 3 || !cpu::gemm_conv_rule_active()) {
    WARN("oneDNN " << cpu::onednn_major_version()
                   << " or no AMX: the input gradient runs as oneDNN's own (not checked here)");
    CHECK_FALSE(cpu::onednn_input_gradient_as_forward(s));
    return;
  }
  REQUIRE(cpu::onednn_input_gradient_as_forward(s));
  ConvShape nchw = s;  // either activation layout
  nchw.nhwc = false;
  CHECK(cpu::onednn_input_gradient_as_forward(nchw));
  for (DType dtype : {DType::f32, DType::bf16}) {
    const int64_t before = cpu::onednn_input_gradients_as_forward_run();
    check_case(basic, dtype);  // the oneDNN side's input gradient against the reference
    CHECK(cpu::onednn_input_gradients_as_forward_run() > before);
  }
}

}  // namespace
}  // namespace precis

#endif  // PRECIS_HAS_ONEDNN
