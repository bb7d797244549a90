// The CUDA normalisation, softmax, class-index loss and var kernels (ops/cuda/norm.cu, softmax.cu,
// loss.cu, reduce.cu) checked against the CPU kernels through the public ops, forward and backward, in f32, f64, f16
// and bf16, on shapes that take every path (vectorised and scalar rows, chunked channels, softmax
// over a middle dim), and for determinism. Tests tagged [cuda] return early, with a warning, on a
// machine without a GPU; the [cuda_api] test checks the registrations in any CUDA build. The
// kernels' math is tested on the host by tests/ops/norm_math_test.cpp.
#include <algorithm>
#include <cmath>
#include <functional>
#include <vector>

#include "core/device.h"
#include "ops/cuda/norm_launch.h"
#include "ops/device_asserts.h"
#include "ops/functional.h"
#include "ops/contracts/kernels_loss.h"
#include "ops/contracts/kernels_norm.h"
#include "ops/memory_format.h"
#include "ops/op_table.h"
#include "tensor/factory.h"
#include "tests/cuda/compare_with_cpu.h"
#include "tests/support/tensor_testing.h"

using namespace precis;
using precis::testing::Compared;
using precis::testing::compare_with_cpu;
using precis::testing::leaf;
using precis::testing::require_close;
using precis::testing::uniform_input;

namespace {

constexpr DType kFloating[] = {DType::f32, DType::f64, DType::f16, DType::bf16};
const Device kGpu = Device::cuda(0);

DType acc_of(DType dt) { return dt == DType::f64 ? DType::f64 : DType::f32; }

std::vector<double> values(const Tensor& t) { return t.to(Device::cpu()).to(DType::f64).to_vector<double>(); }

}  // namespace

TEST_CASE("the CUDA backend registers the norm, softmax, loss and var kernels without a GPU", "[cuda_api]") {
#ifdef PRECIS_HAS_CUDA
  const OpId ops[] = {OpId::batch_norm,  OpId::batch_norm_backward,  OpId::layer_norm,    OpId::layer_norm_backward,
                      OpId::group_norm,  OpId::group_norm_backward,  OpId::softmax,       OpId::softmax_backward,
                      OpId::log_softmax, OpId::log_softmax_backward, OpId::cross_entropy, OpId::cross_entropy_backward,
                      OpId::nll_loss,    OpId::var};
  for (OpId op : ops)
    for (DType dt : kFloating) {
      INFO(op_name(op) << " " << dtype_name(dt));
      CHECK(find_kernel(op, DeviceType::cuda, dt) != nullptr);
    }
#else
  WARN("built without CUDA; the CUDA registrations are not checked");
#endif
}

TEST_CASE("the CUDA norm and loss kernels reject operands off the device or in the wrong dtype", "[cuda_api]") {
#ifdef PRECIS_HAS_CUDA
  // The checks run before any device work, so they are exercised without a GPU: host tensors
  // handed to the CUDA kernels directly, and statistics in the data's dtype instead of fp32.
  const Tensor x = zeros({2, 8}), out = zeros({2, 8}), mean = zeros({2}), rstd = zeros({2});
  PRECIS_REQUIRE_THROWS_WITH_ALL(
      kernel<kernels::LayerNormKernel>(OpId::layer_norm, DeviceType::cuda, DType::f32)(out, mean, rstd, x, Tensor(),
                                                                                       Tensor(), 1e-5),
      DeviceError, "layer_norm", "CUDA device", "x ");
  const Tensor xh = zeros({2, 8}, {.dtype = DType::f16}), mean_h = zeros({2}, {.dtype = DType::f16});
  PRECIS_REQUIRE_THROWS_WITH_ALL(kernel<kernels::CrossEntropyKernel>(OpId::cross_entropy, DeviceType::cuda, DType::f16)(
                                     mean_h, mean_h, zeros({2, 2}, {.dtype = DType::f16}), xh,
                                     zeros({2}, {.dtype = DType::i64}), Tensor(), -100, 0.0),
                                 DeviceError, "cross_entropy", "statistics, parameters and per-row values in f32");
#else
  WARN("built without CUDA; the CUDA kernels' operand checks are not exercised");
#endif
}

TEST_CASE("CUDA norm launch geometry: chunks cover the reduction, bounded and fixed by the shape", "[cuda_api]") {
  for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{255}, int64_t{8192}, int64_t{8193}, int64_t{3211264},
                    int64_t{1} << 33}) {
    INFO("n " << n);
    const cuda::NormChunks c = cuda::norm_chunks(n);
    CHECK(c.chunks >= 1);
    CHECK(c.chunks <= 1024);
    CHECK(c.chunk % 256 == 0);
    CHECK(c.chunk * c.chunks >= n);
    CHECK((c.chunks - 1) * c.chunk < std::max<int64_t>(n, 1));  // no empty chunk
    const cuda::NormChunks r = cuda::layer_norm_row_chunks(n);
    CHECK(r.chunks >= 1);
    CHECK(r.chunks <= 512);
    CHECK(r.chunk * r.chunks >= n);
  }
}

TEST_CASE("CUDA layer_norm matches the CPU forward and backward, vectorised and scalar rows", "[cuda]") {
  PRECIS_REQUIRE_CUDA();
  uint64_t seed = 10;
  for (DType dt : kFloating)
    for (const Shape& shape : {Shape{6, 20, 64}, Shape{5, 37}, Shape{3, 1000}})
      for (bool params : {true, false}) {
        INFO(dtype_name(dt) << " shape " << shape_str(shape) << " params " << params);
        const int64_t D = shape.back();
        const Tensor x = leaf(shape, -3, 5, ++seed, dt);
        const Tensor w = params ? leaf({D}, 0.5, 1.5, ++seed, acc_of(dt)) : Tensor();
        const Tensor b = params ? leaf({D}, -1, 1, ++seed, acc_of(dt)) : Tensor();
        compare_with_cpu(OpId::layer_norm, dt, {x, w, b}, [&](const std::vector<Tensor>& in) {
          return layer_norm(in[0], {D}, in[1], in[2], 1e-5);
        });
      }
}

TEST_CASE("CUDA batch_norm matches the CPU: training statistics, running update, eval, backward", "[cuda]") {
  PRECIS_REQUIRE_CUDA();
  uint64_t seed = 30;
  // (N, C, S): S % 4 == 0 (vectorised), S = 9, S = 1 (a (N, C) input), channels of 16384 elements
  // (two chunks per channel), C past one 32-channel tile; the 4-D ones also channels-last, which
  // stays channels-last (C % 4 == 0 vectorises its normalise pass).
  for (DType dt : kFloating)
    for (const Shape& shape :
         {Shape{4, 8, 6, 6}, Shape{3, 5, 3, 3}, Shape{16, 7}, Shape{16, 2, 32, 32}, Shape{2, 70, 5, 7}})
      for (MemoryFormat format : {MemoryFormat::Contiguous, MemoryFormat::ChannelsLast})
        for (bool training : {true, false}) {
          if (format == MemoryFormat::ChannelsLast && shape.size() != 4) continue;
          INFO(dtype_name(dt) << " shape " << shape_str(shape) << " " << to_string(format) << " training "
                              << training);
          const int64_t C = shape[1];
          const Tensor x = leaf(shape, 50, 60, ++seed, dt);  // a large mean: the shifted sums matter
          const Tensor w = leaf({C}, 0.5, 1.5, ++seed, acc_of(dt));
          const Tensor b = leaf({C}, -1, 1, ++seed, acc_of(dt));
          const Tensor rm_cpu = leaf({C}, 40, 60, ++seed, acc_of(dt), false);
          const Tensor rv_cpu = leaf({C}, 1, 9, ++seed, acc_of(dt), false);
          const Tensor rm_gpu = rm_cpu.to(kGpu), rv_gpu = rv_cpu.to(kGpu);
          compare_with_cpu(OpId::batch_norm, dt, {x, w, b}, [&](const std::vector<Tensor>& in) {
            const bool gpu = in[0].device().is_cuda();
            const Tensor y = batch_norm(contiguous(in[0], format), gpu ? rm_gpu : rm_cpu, gpu ? rv_gpu : rv_cpu,
                                        in[1], in[2], training, 0.1, 1e-5);
            if (shape.size() == 4) CHECK(suggest_memory_format(y) == format);  // no transpose back
            return y;
          });
          require_close(rm_gpu, rm_cpu, dt, OpId::batch_norm, Compared::output);
          require_close(rv_gpu, rv_cpu, dt, OpId::batch_norm, Compared::output);
        }
}

// The smallest case that runs bn_cl_sums_kernel with two channel tiles (one partial) and two chunks
// per channel, forward and backward: the racecheck line (tests/gpu/racecheck_tests.txt).
TEST_CASE("CUDA channels-last batch_norm with two channel tiles and two chunks matches the CPU", "[cuda]") {
  PRECIS_REQUIRE_CUDA();
  const Tensor x = leaf({2, 40, 64, 65}, -2, 3, 71, DType::f32);
  const Tensor w = leaf({40}, 0.5, 1.5, 72, DType::f32);
  compare_with_cpu(OpId::batch_norm, DType::f32, {x, w}, [](const std::vector<Tensor>& in) {
    return batch_norm(contiguous(in[0], MemoryFormat::ChannelsLast), Tensor(), Tensor(), in[1], Tensor(), true, 0.1,
                      1e-5);
  });
}

TEST_CASE("CUDA group_norm matches the CPU forward and backward", "[cuda]") {
  PRECIS_REQUIRE_CUDA();
  uint64_t seed = 50;
  for (DType dt : kFloating)
    for (const Shape& shape : {Shape{3, 6, 5, 4}, Shape{2, 8, 3}, Shape{2, 4}}) {
      INFO(dtype_name(dt) << " shape " << shape_str(shape));
      const int64_t C = shape[1];
      const Tensor x = leaf(shape, -2, 4, ++seed, dt);
      const Tensor w = leaf({C}, 0.5, 1.5, ++seed, acc_of(dt)), b = leaf({C}, -1, 1, ++seed, acc_of(dt));
      compare_with_cpu(OpId::group_norm, dt, {x, w, b}, [&](const std::vector<Tensor>& in) {
        return group_norm(in[0], 2, in[1], in[2], 1e-5);
      });
    }
}

TEST_CASE("CUDA softmax and log_softmax match the CPU over the last and a middle dim", "[cuda]") {
  PRECIS_REQUIRE_CUDA();
  uint64_t seed = 70;
  for (DType dt : kFloating)
    for (bool log : {false, true})
      for (const auto& [shape, dim] : {std::pair{Shape{64, 128}, int64_t{1}}, std::pair{Shape{7, 33}, int64_t{-1}},
                                       std::pair{Shape{2, 3000}, int64_t{1}}, std::pair{Shape{4, 9, 6}, int64_t{1}}}) {
        INFO(dtype_name(dt) << " log " << log << " shape " << shape_str(shape) << " dim " << dim);
        const int64_t d = dim;
        const Tensor x = leaf(shape, -8, 8, ++seed, dt);
        compare_with_cpu(log ? OpId::log_softmax : OpId::softmax, dt, {x}, [&](const std::vector<Tensor>& in) {
          return log ? log_softmax(in[0], d) : softmax(in[0], d);
        });
      }
}

TEST_CASE("CUDA cross_entropy matches the CPU: ignore_index, class weights, label smoothing, reductions", "[cuda]") {
  PRECIS_REQUIRE_CUDA();
  uint64_t seed = 90;
  for (DType dt : kFloating)
    for (int64_t C : {int64_t{10}, int64_t{50}, int64_t{3001}})
      for (Reduction red : {Reduction::mean, Reduction::sum, Reduction::none})
        for (double smoothing : {0.0, 0.1})
          for (bool weighted : {false, true}) {
            INFO(dtype_name(dt) << " C " << C << " reduction " << static_cast<int>(red) << " smoothing " << smoothing
                                << " weighted " << weighted);
            const int64_t M = 12;
            const Tensor x = leaf({M, C}, -6, 6, ++seed, dt);
            std::vector<int64_t> t(M);
            for (int64_t i = 0; i < M; ++i) t[i] = i % 4 == 1 ? -100 : (i * 7919) % C;
            const Tensor tgt = from_vector<int64_t>(t, {M});
            const Tensor w = weighted ? leaf({C}, 0.2, 2, ++seed, acc_of(dt), false) : Tensor();
            compare_with_cpu(OpId::cross_entropy, dt, {x}, [&](const std::vector<Tensor>& in) {
              const Device dev = in[0].device();
              return cross_entropy(in[0], tgt.to(dev), w.defined() ? w.to(dev) : w, -100, red, smoothing);
            });
          }
}

TEST_CASE("CUDA cross_entropy over a (N, C, L) input matches the CPU", "[cuda]") {
  PRECIS_REQUIRE_CUDA();
  for (DType dt : kFloating) {
    INFO(dtype_name(dt));
    const Tensor x = leaf({3, 7, 5}, -4, 4, 120, dt);
    const Tensor tgt = uniform_input({3, 5}, 0, 7, false, 121).to(DType::i64);
    compare_with_cpu(OpId::cross_entropy, dt, {x}, [&](const std::vector<Tensor>& in) {
      return cross_entropy(in[0], tgt.to(in[0].device()));
    });
  }
}

TEST_CASE("CUDA nll_loss forward matches the CPU", "[cuda]") {
  PRECIS_REQUIRE_CUDA();
  // Forward only: nll_loss's backward is scatter_add, checked with the indexing kernels.
  for (DType dt : kFloating)
    for (Reduction red : {Reduction::mean, Reduction::sum, Reduction::none}) {
      INFO(dtype_name(dt) << " reduction " << static_cast<int>(red));
      const Tensor x = leaf({9, 6}, -5, 0, 130, dt, false);
      const Tensor tgt = from_vector<int64_t>({0, 5, -100, 3, 2, 1, -100, 4, 0}, {9});
      const Tensor w = leaf({6}, 0.5, 2, 131, acc_of(dt), false);
      compare_with_cpu(OpId::nll_loss, dt, {x}, [&](const std::vector<Tensor>& in) {
        const Device dev = in[0].device();
        return nll_loss(in[0], tgt.to(dev), w.to(dev), -100, red);
      });
    }
}

TEST_CASE("CUDA nll_loss reads a strided input, and a target out of range never reads past x", "[cuda]") {
  PRECIS_REQUIRE_CUDA();
  // The op hands the kernel x with its own strides (a narrowed or transposed (M, C), a strided
  // 1-D row): the CUDA entry used to refuse anything but contiguous x.
  const Tensor wide = leaf({8, 10}, -5, 0, 132, DType::f32, false);
  const Tensor tall = leaf({6, 8}, -5, 0, 133, DType::f32, false);
  const Tensor tgt = from_vector<int64_t>({0, 5, -100, 3, 2, 1, 4, 0}, {8});
  for (Reduction red : {Reduction::mean, Reduction::none}) {
    INFO("reduction " << static_cast<int>(red));
    require_close(nll_loss(wide.to(kGpu).narrow(1, 0, 6), tgt.to(kGpu), Tensor(), -100, red),
                  nll_loss(wide.narrow(1, 0, 6), tgt, Tensor(), -100, red), DType::f32, OpId::nll_loss,
                  Compared::output);
    require_close(nll_loss(tall.to(kGpu).t(), tgt.to(kGpu), Tensor(), -100, red),
                  nll_loss(tall.t(), tgt, Tensor(), -100, red), DType::f32, OpId::nll_loss, Compared::output);
  }
  const Tensor row = leaf({12}, -5, 0, 134, DType::f32, false);
  const Tensor one = from_vector<int64_t>({4}, {});
  require_close(nll_loss(row.to(kGpu).slice(0, 0, 12, 2), one.to(kGpu)), nll_loss(row.slice(0, 0, 12, 2), one),
                DType::f32, OpId::nll_loss, Compared::output);
  // Out of range: the op reports it at the next host read; the kernel itself (called directly,
  // as the op does before the report) gives those rows NaN and reads nothing outside x.
  const Tensor x = leaf({4, 5}, -5, 0, 135, DType::f32, false).to(kGpu);
  const Tensor bad = from_vector<int64_t>({0, 5, 2, int64_t{1} << 40}, {4}).to(kGpu);
  (void)nll_loss(x, bad, Tensor(), -100, Reduction::none);
  PRECIS_REQUIRE_THROWS_WITH_ALL(check_device_asserts(kGpu), IndexError, "nll_loss");
  const Tensor loss_rows = empty({4}, {.device = kGpu}), weight_rows = empty({4}, {.device = kGpu});
  kernel<kernels::NllLossKernel>(OpId::nll_loss, DeviceType::cuda, DType::f32)(loss_rows, weight_rows, x, bad,
                                                                              Tensor(), -100);
  const std::vector<double> loss = values(loss_rows), xs = values(x);
  CHECK(loss[0] == -xs[0]);
  CHECK(std::isnan(loss[1]));
  CHECK(loss[2] == -xs[2 * 5 + 2]);
  CHECK(std::isnan(loss[3]));
  CHECK(std::isnan(values(weight_rows)[3]));
}

TEST_CASE("CUDA var matches the CPU over any dims and corrections, with its gradient", "[cuda]") {
  PRECIS_REQUIRE_CUDA();
  uint64_t seed = 140;
  for (DType dt : kFloating)
    for (const std::vector<int64_t>& dims : {std::vector<int64_t>{1}, std::vector<int64_t>{0, 2},
                                             std::vector<int64_t>{}})
      for (int64_t correction : {int64_t{0}, int64_t{1}}) {
        INFO(dtype_name(dt) << " dims " << dims.size() << " correction " << correction);
        const Tensor x = leaf({6, 50, 7}, 100, 104, ++seed, dt);
        compare_with_cpu(OpId::var, dt, {x}, [&](const std::vector<Tensor>& in) {
          return var(in[0], dims, correction, false);
        });
      }
  // Long reductions take the chunked geometry (two kernels); a permuted input the strided one.
  const Tensor big = leaf({3, 70000}, -1, 1, 150, DType::f32, false);
  require_close(var(big.to(kGpu), {1}), var(big, {1}), DType::f32, OpId::var, Compared::output);
  const Tensor p = leaf({40, 30}, -1, 1, 151, DType::f32, false);
  require_close(var(p.to(kGpu).t(), {1}), var(p.t(), {1}), DType::f32, OpId::var, Compared::output);
}

TEST_CASE("CUDA norm, softmax and loss kernels are deterministic: two runs agree bit for bit", "[cuda]") {
  PRECIS_REQUIRE_CUDA();
  const Tensor x = leaf({16, 2, 32, 32}, -3, 3, 160, DType::f32, false).to(kGpu);
  const Tensor logits = leaf({64, 3001}, -5, 5, 161, DType::f32, false).to(kGpu);
  const Tensor tgt = uniform_input({64}, 0, 3001, false, 162).to(DType::i64).to(kGpu);
  const auto run = [&] {
    std::vector<double> all;
    for (const Tensor& t : {batch_norm(x, Tensor(), Tensor(), Tensor(), Tensor(), true),
                            layer_norm(x.view({32, 1024}), {1024}), softmax(logits, 1),
                            cross_entropy(logits, tgt), var(x, {0, 2, 3})}) {
      const std::vector<double> v = values(t);
      all.insert(all.end(), v.begin(), v.end());
    }
    return all;
  };
  REQUIRE(run() == run());
}
