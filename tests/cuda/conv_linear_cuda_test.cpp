// conv2d (cuDNN, ops/cuda/conv_cudnn.cpp), conv_transpose2d (on conv2d's kernels) and linear
// (cuBLASLt, ops/cuda/linear_cublaslt.cpp) on cuda:0 against the CPU ops: forward and every gradient, f32/f16/bf16/f64, NCHW and
// channels-last, groups, stride, padding, dilation, bias; results bit-identical from run to run;
// bad inputs. Tests tagged [cuda] return early (with a warning) without a GPU; the [cuda_api]
// test checks the registrations on any CUDA build. The host-side planning these kernels use is
// checked on every machine by tests/ops/conv_plan_test.cpp.
//
// The reference is the CPU op in f64 on the same (rounded) inputs. Convolution and GEMM outputs
// are sums whose terms cancel, so an element's error is bounded relative to the sum of the terms'
// magnitudes, not to the result: that scale is the same op (and its backward) on |x|, |w|, |b| and
// |grad|, and an element passes when |gpu − ref| <= tol(dtype) · scale.
#include <cmath>
#include <string>
#include <vector>

#include "core/device.h"
#include "ops/math/conv_plan.h"
#include "ops/float32_precision.h"
#include "ops/functional.h"
#include "ops/op_table.h"
#include "tensor/factory.h"
#include "tests/support/tensor_testing.h"

using namespace precis;
using precis::testing::randn_input;

namespace {

const Device kGpu = Device::cuda(0);

// The rounding a correct kernel may show, relative to the scale: output rounding of the dtype
// plus fp32 accumulation of up to a few hundred terms. f32 allows 1e-4: cuDNN may pick Winograd or
// FFT algorithms, whose transforms amplify rounding by 10-100x (a wrong result is off by O(1)).
double scale_tolerance(DType t) {
  switch (t) {
    case DType::f64: return 1e-10;  // the same transforms in f64
    case DType::f32: return 1e-4;
    case DType::f16: return 2e-3;   // 2^-10 output rounding (+ the bias added after rounding)
    case DType::bf16: return 1.6e-2;  // 2^-7
    default: return 0;
  }
}

void require_within_scale(const Tensor& actual, const Tensor& ref, const Tensor& scale, DType dtype, const char* what) {
  REQUIRE(actual.sizes() == ref.sizes());
  const std::vector<double> a = actual.to(Device::cpu()).to(DType::f64).contiguous().to_vector<double>();
  const std::vector<double> r = ref.contiguous().to_vector<double>();
  const std::vector<double> s = scale.contiguous().to_vector<double>();
  const double tol = scale_tolerance(dtype);
  for (size_t i = 0; i < a.size(); ++i) {
    INFO(what << " " << dtype_name(dtype) << " element " << i << ": " << a[i] << " vs " << r[i] << " (scale " << s[i]
              << ")");
    REQUIRE(std::abs(a[i] - r[i]) <= tol * s[i] + 1e-30);
  }
}

struct ConvCase {
  Shape x, w;
  std::vector<int64_t> stride, padding, dilation;
  int64_t groups;
  bool bias;
};

const ConvCase kConvCases[] = {
    {{2, 8, 9, 9}, {16, 8, 3, 3}, {1}, {1}, {1}, 1, true},          // ResNet 3×3
    {{2, 16, 8, 8}, {8, 16, 1, 1}, {2}, {0}, {1}, 1, false},        // 1×1 stride-2 shortcut
    {{1, 3, 15, 15}, {8, 3, 7, 7}, {2}, {3}, {1}, 1, true},         // stem, 3 input channels
    {{2, 8, 10, 11}, {8, 4, 3, 2}, {2, 1}, {1, 0}, {2, 1}, 2, true},  // groups, asymmetric geometry
    {{2, 8, 7, 7}, {8, 1, 3, 3}, {1}, {1}, {1}, 8, false},          // depthwise
};

struct ConvRun {
  Tensor out, gx, gw, gb;
};

// A new leaf on `device` with t's values. Not t.to(device) alone: that returns t itself when it is
// already there (as in PyTorch), and requires_grad_ would then change the caller's tensor, whose
// next use (|x| for the error scale) would record a graph and make it a non-leaf.
Tensor new_leaf(const Tensor& t, Device device) {
  Tensor leaf = t.to(device).detach();
  leaf.requires_grad_(true);
  return leaf;
}

// conv2d with leaves on `device` (the input channels-last when asked); gradients from `g`.
ConvRun run_conv(const ConvCase& c, const Tensor& x0, const Tensor& w0, const Tensor& b0, const Tensor& g0,
                 Device device, bool channels_last) {
  // A channels-last input is a leaf of shape (N, H, W, C) seen through a permutation, so the
  // convolution gets NHWC strides and the leaf's gradient is the input gradient in NHWC order.
  Tensor leaf = new_leaf(channels_last ? x0.permute({0, 2, 3, 1}).contiguous() : x0, device);
  const Tensor x = channels_last ? leaf.permute({0, 3, 1, 2}) : leaf;
  Tensor w = new_leaf(w0, device);
  Tensor b;
  if (c.bias) b = new_leaf(b0, device);
  const Tensor out = conv2d(x, w, b, c.stride, c.padding, c.dilation, c.groups);
  if (channels_last && device.is_cuda())
    REQUIRE(kernels::conv_is_dense(out.sizes(), out.strides(), kernels::ConvLayout::nhwc));
  out.backward(g0.to(device));
  ConvRun r{out, channels_last ? leaf.grad().permute({0, 3, 1, 2}) : leaf.grad(), w.grad(), Tensor()};
  if (c.bias) r.gb = b.grad();
  return r;
}

Tensor abs64(const Tensor& t) { return abs(t.to(DType::f64)); }

}  // namespace

TEST_CASE("the CUDA backend registers conv2d (with cuDNN) and linear for every floating dtype", "[cuda_api]") {
#ifdef PRECIS_HAS_CUDA
  for (DType dt : {DType::f32, DType::f64, DType::f16, DType::bf16}) {
    CHECK(find_kernel(OpId::linear, DeviceType::cuda, dt) != nullptr);
#ifdef PRECIS_HAS_CUDNN
    CHECK(find_kernel(OpId::conv2d, DeviceType::cuda, dt) != nullptr);
    CHECK(find_kernel(OpId::conv2d_backward, DeviceType::cuda, dt) != nullptr);
#else
    WARN("built without cuDNN (PRECIS_CUDNN): no CUDA convolutions to check");
#endif
  }
#else
  WARN("CPU-only build: no CUDA kernels to check");
#endif
}

TEST_CASE("cuDNN conv2d forward and gradients match the CPU op, NCHW and channels-last", "[cuda]") {
  PRECIS_REQUIRE_CUDA();
  // The f32 kernels' IEEE path against the CPU: TF32 (the conv default, as PyTorch's) rounds
  // inputs to 10 mantissa bits, beyond these tolerances; tests/cuda/float32_precision_cuda_test.cpp
  // checks it.
  const Float32PrecisionGuard ieee(Float32Precision::ieee);
  uint64_t seed = 100;
  for (const ConvCase& c : kConvCases) {
    for (DType dt : {DType::f32, DType::f16, DType::bf16, DType::f64}) {
      for (bool channels_last : {false, true}) {
        INFO("x " << shape_str(c.x) << " w " << shape_str(c.w) << " groups " << c.groups << " "
                  << (channels_last ? "NHWC" : "NCHW"));
        const Tensor x0 = randn_input(c.x, false, ++seed, DType::f32).to(dt);
        const Tensor w0 = randn_input(c.w, false, ++seed, DType::f32).to(dt);
        const Tensor b0 = randn_input({c.w[0]}, false, ++seed, DType::f32).to(dt);
        // The upstream gradient's shape from a CPU forward.
        const Tensor probe = conv2d(x0.to(DType::f64), w0.to(DType::f64), Tensor(), c.stride, c.padding, c.dilation,
                                    c.groups);
        const Tensor g0 = randn_input(probe.sizes(), false, ++seed, DType::f32).to(dt);
        const ConvRun gpu = run_conv(c, x0, w0, b0, g0, kGpu, channels_last);
        const ConvRun ref = run_conv(c, x0.to(DType::f64), w0.to(DType::f64), b0.to(DType::f64), g0.to(DType::f64),
                                     Device::cpu(), false);
        const ConvRun scale = run_conv(c, abs64(x0), abs64(w0), abs64(b0), abs64(g0), Device::cpu(), false);
        require_within_scale(gpu.out, ref.out, scale.out, dt, "out");
        require_within_scale(gpu.gx, ref.gx, scale.gx, dt, "grad input");
        require_within_scale(gpu.gw, ref.gw, scale.gw, dt, "grad weight");
        if (c.bias) require_within_scale(gpu.gb, ref.gb, scale.gb, dt, "grad bias");
      }
    }
  }
}

// conv_transpose2d with leaves on `device` (the input channels-last when asked): out and the
// gradients from `g0`, on the CPU in f64 for comparison.
std::vector<Tensor> run_transpose(const Tensor& x0, const Tensor& w0, const Tensor& b0, const Tensor& g0, Device device,
                                  bool channels_last) {
  Tensor leaf = new_leaf(channels_last ? x0.permute({0, 2, 3, 1}).contiguous() : x0, device);
  const Tensor x = channels_last ? leaf.permute({0, 3, 1, 2}) : leaf;
  Tensor w = new_leaf(w0, device), b = new_leaf(b0, device);
  const Tensor out = conv_transpose2d(x, w, b, {2}, {1}, {1});
  out.backward(g0.to(device));
  const Tensor gx = channels_last ? leaf.grad().permute({0, 3, 1, 2}) : leaf.grad();
  std::vector<Tensor> r;
  for (const Tensor& t : {out, gx, w.grad(), b.grad()}) r.push_back(t.to(Device::cpu()).to(DType::f64).contiguous());
  return r;
}

TEST_CASE("conv_transpose2d on CUDA (conv2d's cuDNN passes) matches the CPU op, NCHW and channels-last", "[cuda]") {
  PRECIS_REQUIRE_CUDA();
  const Float32PrecisionGuard ieee(Float32Precision::ieee);
  uint64_t seed = 300;
  for (DType dt : {DType::f32, DType::f16, DType::bf16, DType::f64}) {
    for (bool channels_last : {false, true}) {
      INFO(dtype_name(dt) << (channels_last ? " NHWC" : " NCHW"));
      const Tensor x0 = randn_input({2, 8, 5, 6}, false, ++seed, DType::f32).to(dt);
      const Tensor w0 = randn_input({8, 4, 3, 3}, false, ++seed, DType::f32).to(dt);
      const Tensor b0 = randn_input({4}, false, ++seed, DType::f32).to(dt);
      const Tensor g0 = randn_input({2, 4, 10, 12}, false, ++seed, DType::f32).to(dt);
      const std::vector<Tensor> gpu = run_transpose(x0, w0, b0, g0, kGpu, channels_last);
      const std::vector<Tensor> ref = run_transpose(x0.to(DType::f64), w0.to(DType::f64), b0.to(DType::f64),
                                                    g0.to(DType::f64), Device::cpu(), false);
      const std::vector<Tensor> scale =
          run_transpose(abs64(x0), abs64(w0), abs64(b0), abs64(g0), Device::cpu(), false);
      const char* names[] = {"out", "grad input", "grad weight", "grad bias"};
      for (size_t k = 0; k < gpu.size(); ++k) require_within_scale(gpu[k], ref[k], scale[k], dt, names[k]);
    }
  }
}

TEST_CASE("cuDNN conv2d is bit-identical from run to run (deterministic algorithms)", "[cuda]") {
  PRECIS_REQUIRE_CUDA();
  REQUIRE(kernels::conv_deterministic());
  const ConvCase c{{8, 32, 16, 16}, {64, 32, 3, 3}, {1}, {1}, {1}, 1, true};
  for (DType dt : {DType::f16, DType::f32}) {
    const Tensor x0 = randn_input(c.x, false, 1, DType::f32).to(dt);
    const Tensor w0 = randn_input(c.w, false, 2, DType::f32).to(dt);
    const Tensor b0 = randn_input({64}, false, 3, DType::f32).to(dt);
    const Tensor g0 = randn_input({8, 64, 16, 16}, false, 4, DType::f32).to(dt);
    for (bool channels_last : {false, true}) {
      const ConvRun a = run_conv(c, x0, w0, b0, g0, kGpu, channels_last);
      const ConvRun b = run_conv(c, x0, w0, b0, g0, kGpu, channels_last);
      for (auto [p, q] : {std::pair{a.out, b.out}, std::pair{a.gx, b.gx}, std::pair{a.gw, b.gw}, std::pair{a.gb, b.gb}})
        CHECK(p.to(Device::cpu()).to(DType::f64).contiguous().to_vector<double>() ==
              q.to(Device::cpu()).to(DType::f64).contiguous().to_vector<double>());
    }
  }
}

TEST_CASE("cuDNN conv2d handles empty batches and empty channel sums", "[cuda]") {
  PRECIS_REQUIRE_CUDA();
  // No input channels per group: every output is the bias.
  Tensor x = zeros({2, 0, 5, 5}, {.device = kGpu});
  Tensor w = zeros({3, 0, 3, 3}, {.device = kGpu});
  const Tensor b = from_vector<float>({1.5f, -2.0f, 0.25f}, {3}).to(kGpu);
  const Tensor out = conv2d(x, w, b, {1}, {1});
  REQUIRE(out.sizes() == Shape({2, 3, 5, 5}));
  const std::vector<float> v = out.to(Device::cpu()).to_vector<float>();
  for (size_t i = 0; i < v.size(); ++i) CHECK(v[i] == std::vector<float>{1.5f, -2.0f, 0.25f}[(i / 25) % 3]);
  // An empty batch: an empty output and zero weight gradient.
  Tensor xe = zeros({0, 4, 5, 5}, {.device = kGpu});
  Tensor we = randn_input({6, 4, 3, 3}, false, 9, DType::f32).to(kGpu);
  we.requires_grad_(true);
  const Tensor oe = conv2d(xe, we);
  REQUIRE(oe.sizes() == Shape({0, 6, 3, 3}));
  sum(oe).backward();
  CHECK(sum(abs(we.grad())).to(Device::cpu()).to_vector<float>()[0] == 0.0f);
}

TEST_CASE("conv2d and linear on CUDA reject operands on other devices or of other dtypes", "[cuda]") {
  PRECIS_REQUIRE_CUDA();
  const Tensor x = zeros({1, 2, 4, 4}, {.device = kGpu});
  const Tensor w_cpu = zeros({3, 2, 3, 3});
  PRECIS_REQUIRE_THROWS_WITH_ALL(conv2d(x, w_cpu), DeviceError, "conv2d", "cuda:0", "cpu");
  const Tensor w_f16 = zeros({3, 2, 3, 3}, {.dtype = DType::f16, .device = kGpu});
  PRECIS_REQUIRE_THROWS_WITH_ALL(conv2d(x, w_f16), DTypeError, "conv2d", "f16", "f32");
  const Tensor a = zeros({4, 5}, {.device = kGpu});
  PRECIS_REQUIRE_THROWS_WITH_ALL(linear(a, zeros({3, 5})), DeviceError, "linear", "cuda:0");
  PRECIS_REQUIRE_THROWS_WITH_ALL(linear(a, zeros({3, 4}, {.device = kGpu})), ShapeError, "linear", "[4, 5]");
}

namespace {

struct LinearRun {
  Tensor out, gx, gw, gb;
};

LinearRun run_linear(const Tensor& x0, const Tensor& w0, const Tensor& b0, const Tensor& g0, Device device) {
  Tensor x = new_leaf(x0, device), w = new_leaf(w0, device), b;
  if (b0.defined()) b = new_leaf(b0, device);
  const Tensor out = linear(x, w, b);
  out.backward(g0.to(device));
  return {out, x.grad(), w.grad(), b.defined() ? b.grad() : Tensor()};
}

}  // namespace

TEST_CASE("cuBLASLt linear (bias epilogue) and its gradients match the CPU op", "[cuda]") {
  PRECIS_REQUIRE_CUDA();
  const Float32PrecisionGuard ieee(Float32Precision::ieee);  // the IEEE path (TF32: float32_precision_cuda_test)
  struct Case {
    Shape x, w;
    bool bias;
  };
  const Case cases[] = {{{5, 7}, {3, 7}, true},        {{2, 4, 64}, {32, 64}, true}, {{16, 48}, {24, 48}, false},
                        {{3, 1}, {5, 1}, true},        {{33, 17}, {9, 17}, true},    {{128, 256}, {64, 256}, true}};
  uint64_t seed = 500;
  for (const Case& c : cases) {
    for (DType dt : {DType::f32, DType::f16, DType::bf16, DType::f64}) {
      INFO("x " << shape_str(c.x) << " w " << shape_str(c.w) << (c.bias ? " bias" : ""));
      const Tensor x0 = randn_input(c.x, false, ++seed, DType::f32).to(dt);
      const Tensor w0 = randn_input(c.w, false, ++seed, DType::f32).to(dt);
      const Tensor b0 = c.bias ? randn_input({c.w[0]}, false, ++seed, DType::f32).to(dt) : Tensor();
      Shape out_sizes = c.x;
      out_sizes.back() = c.w[0];
      const Tensor g0 = randn_input(out_sizes, false, ++seed, DType::f32).to(dt);
      const LinearRun gpu = run_linear(x0, w0, b0, g0, kGpu);
      const LinearRun ref = run_linear(x0.to(DType::f64), w0.to(DType::f64), c.bias ? b0.to(DType::f64) : Tensor(),
                                       g0.to(DType::f64), Device::cpu());
      const LinearRun scale = run_linear(abs64(x0), abs64(w0), c.bias ? abs64(b0) : Tensor(), abs64(g0), Device::cpu());
      require_within_scale(gpu.out, ref.out, scale.out, dt, "out");
      require_within_scale(gpu.gx, ref.gx, scale.gx, dt, "grad input");
      require_within_scale(gpu.gw, ref.gw, scale.gw, dt, "grad weight");
      if (c.bias) require_within_scale(gpu.gb, ref.gb, scale.gb, dt, "grad bias");
      // The same problem again: the cached algorithm gives the same bits.
      const LinearRun again = run_linear(x0, w0, b0, g0, kGpu);
      CHECK(again.out.to(Device::cpu()).to(DType::f64).to_vector<double>() ==
            gpu.out.to(Device::cpu()).to(DType::f64).to_vector<double>());
    }
  }
}

TEST_CASE("cuBLASLt linear with no input features gives the bias", "[cuda]") {
  PRECIS_REQUIRE_CUDA();
  const Tensor x = zeros({3, 0}, {.device = kGpu});
  const Tensor w = zeros({2, 0}, {.device = kGpu});
  const Tensor b = from_vector<float>({4.0f, -1.0f}, {2}).to(kGpu);
  CHECK(linear(x, w, b).to(Device::cpu()).to_vector<float>() == std::vector<float>{4, -1, 4, -1, 4, -1});
  CHECK(linear(x, w).to(Device::cpu()).to_vector<float>() == std::vector<float>(6, 0.0f));
}
