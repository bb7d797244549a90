// The CPU's Winograd convolutions (ops/cpu/conv_onednn.cpp, "Winograd"): with the CPU's conv
// precision set to tf32, f32 3x3 stride-1 conv2d runs oneDNN's Winograd kernels for its forward,
// input and weight gradients, within a bound of the f64 convolution; with the default (ieee) and
// for other shapes and dtypes it does not, and its results are the direct kernels' bit for bit.
#ifdef PRECIS_HAS_ONEDNN

#include <string>
#include <tuple>
#include <vector>

#include "core/thread_pool.h"
#include "ops/cpu/conv_impl.h"
#include "ops/float32_precision.h"
#include "ops/functional.h"
#include "ops/memory_format.h"
#include "tensor/factory.h"
#include "tests/ops/conv_close.h"
#include "tests/support/tensor_testing.h"

namespace precis {
namespace {

// oneDNN's Winograd kernels are AVX-512 ones (avx512_core: F, BW, VL, DQ).
bool has_avx512_core() {
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
}

struct Grads {
  Tensor out, gx, gw, gb;
};

// conv2d forward and backward of sum(out · go) in `dtype`, from the same f64 draws.
Grads run(DType dtype, int64_t c, int64_t o, int64_t hw, int64_t k, int64_t stride, bool channels_last) {
  Tensor x = testing::randn_input({2, c, hw, hw}, false, 1).to(dtype);
  if (channels_last) x = contiguous(x, MemoryFormat::ChannelsLast);
  x.requires_grad_(true);
  Tensor w = testing::randn_input({o, c, k, k}, false, 2).to(dtype).requires_grad_(true);
  Tensor b = testing::randn_input({o}, false, 3).to(dtype).requires_grad_(true);
  const Tensor out = conv2d(x, w, b, {stride, stride}, {k / 2, k / 2});
  const Tensor go = testing::randn_input(out.sizes(), false, 4).to(dtype);
  sum(out * go).backward();
  return {out.detach(), x.grad(), w.grad(), b.grad()};
}

TEST_CASE("f32 3x3 stride-1 conv2d runs Winograd only where the CPU's conv precision is tf32", "[ops][conv]") {
  REQUIRE(float32_precision(Float32OpFamily::conv, DeviceType::cpu) == Float32Precision::ieee);  // the default
  for (bool channels_last : {false, true}) {
    INFO((channels_last ? "channels-last" : "NCHW") << ", 32 -> 48 channels, 9x9");
    const int64_t before_default = cpu::onednn_winograd_passes_run();
    const Grads direct = run(DType::f32, 32, 48, 9, 3, 1, channels_last);
    CHECK(cpu::onednn_winograd_passes_run() == before_default);

    const Grads ref = run(DType::f64, 32, 48, 9, 3, 1, channels_last);
    Float32PrecisionGuard fast(Float32OpFamily::conv, Float32Precision::tf32, DeviceType::cpu);
    const int64_t before = cpu::onednn_winograd_passes_run();
    const Grads wino = run(DType::f32, 32, 48, 9, 3, 1, channels_last);
    if (has_avx512_core()) {
      CHECK(cpu::onednn_winograd_passes_run() == before + 3);  // forward, input and weight gradient
    } else {
      WARN("no AVX-512 on this CPU: oneDNN has no Winograd kernel, the direct one ran");
      CHECK(cpu::onednn_winograd_passes_run() == before);
    }
    // Against f64: the error of a sum of 288 products with Winograd's transforms is a few times
    // direct's, so the bound is f32's tolerance on the terms' magnitude, times 4.
    // Against f64, as the direct kernels' error: the largest error over the largest magnitude,
    // within 4x f32's relative tolerance for Winograd (measured: 1.5-3x direct's here).
    const std::tuple<Tensor, Tensor, Tensor, const char*> results[] = {
        {wino.out, direct.out, ref.out, "output"},
        {wino.gx, direct.gx, ref.gx, "input gradient"},
        {wino.gw, direct.gw, ref.gw, "weight gradient"},
        {wino.gb, direct.gb, ref.gb, "bias gradient"}};
    for (const auto& [fast, plain, want, what] : results) {
      INFO(what);
      const double scale = max(abs(want)).item<double>();
      const double err_fast = max(abs(fast.to(DType::f64) - want)).item<double>() / scale;
      const double err_plain = max(abs(plain.to(DType::f64) - want)).item<double>() / scale;
      INFO("largest error over the largest |value|: Winograd " << err_fast << ", direct " << err_plain);
      CHECK(err_fast <= 4 * testing::tolerance(DType::f32).rtol);
      CHECK(err_plain <= testing::tolerance(DType::f32).rtol);
    }
  }
}

TEST_CASE("conv2d under the CPU's tf32 conv setting matches f64 at odd 3x3 stride-1 shapes", "[ops][conv]") {
  // Shapes oneDNN's Winograd kernels may or may not take (3 or 17 channels, no padding, a 2x2 map,
  // one image, 1 and 2 threads): whichever kernel runs, the result is the convolution's.
  struct Shape3x3 {
    int64_t n, c, o, hw, pad;
  };
  Float32PrecisionGuard fast(Float32OpFamily::conv, Float32Precision::tf32, DeviceType::cpu);
  const int threads = get_num_threads();
  for (int t : {1, 2})
    for (const Shape3x3& sh : {Shape3x3{2, 3, 16, 8, 1}, Shape3x3{2, 17, 33, 7, 1}, Shape3x3{1, 32, 32, 6, 0},
                               Shape3x3{2, 64, 16, 2, 1}, Shape3x3{1, 16, 16, 13, 1}}) {
      set_num_threads(t);
      INFO(t << " threads, x (" << sh.n << ", " << sh.c << ", " << sh.hw << ", " << sh.hw << "), " << sh.o
             << " outputs, padding " << sh.pad);
      auto conv = [&](DType dtype) {
        Tensor x = testing::randn_input({sh.n, sh.c, sh.hw, sh.hw}, false, 5).to(dtype).requires_grad_(true);
        Tensor w = testing::randn_input({sh.o, sh.c, 3, 3}, false, 6).to(dtype).requires_grad_(true);
        const Tensor out = conv2d(x, w, Tensor(), {1, 1}, {sh.pad, sh.pad});
        sum(out * testing::randn_input(out.sizes(), false, 7).to(dtype)).backward();
        return std::vector<Tensor>{out.detach(), x.grad(), w.grad()};
      };
      const std::vector<Tensor> got = conv(DType::f32), want = conv(DType::f64);
      for (size_t i = 0; i < got.size(); ++i) {
        const double scale = max(abs(want[i])).item<double>();
        const double err = max(abs(got[i].to(DType::f64) - want[i])).item<double>();
        CHECK(err <= 4 * testing::tolerance(DType::f32).rtol * scale);
      }
    }
  set_num_threads(threads);
}

TEST_CASE("Winograd leaves other convolutions on the direct kernels", "[ops][conv]") {
  Float32PrecisionGuard fast(Float32OpFamily::conv, Float32Precision::tf32, DeviceType::cpu);
  const int64_t before = cpu::onednn_winograd_passes_run();
  run(DType::f32, 32, 48, 9, 3, 2, false);   // stride 2
  run(DType::f32, 32, 48, 9, 1, 1, false);   // 1x1
  run(DType::bf16, 32, 48, 9, 3, 1, false);  // bf16
  CHECK(cpu::onednn_winograd_passes_run() == before);
  // The CUDA settings do not reach the CPU, nor the CPU's CUDA.
  CHECK(float32_precision(Float32OpFamily::conv) == Float32Precision::tf32);
  {
    Float32PrecisionGuard cuda_only(Float32OpFamily::conv, Float32Precision::ieee);
    CHECK(float32_precision(Float32OpFamily::conv, DeviceType::cpu) == Float32Precision::tf32);
  }
}

}  // namespace
}  // namespace precis

#endif  // PRECIS_HAS_ONEDNN
