// The CUDA kernels that combine values across a block through shared memory (row_blocks.cuh's
// block_reduce and norm.cu's batch/layer norm partial sums, reduce.cu's block reduction), on shapes that
// give every one of them several warps per block. The other CUDA tests mostly use small rows,
// which get one warp (row_threads: 32 threads up to 256 elements per row), and then the warps'
// hand-over through shared memory, which compute-sanitizer racecheck exists to check
// (tests/gpu/racecheck_tests.txt), never runs. Compared with the CPU, f32 and f64 (the two types
// the shared buffers hold).
#include <functional>
#include <string>
#include <tuple>
#include <vector>

#include "core/device.h"
#include "ops/functional.h"
#include "ops/op_table.h"
#include "tensor/factory.h"
#include "tests/cuda/compare_with_cpu.h"
#include "tests/support/tensor_testing.h"

using namespace precis;
using precis::testing::Compared;
using precis::testing::compare_with_cpu;
using precis::testing::leaf;
using precis::testing::require_close;

namespace {

const Device kGpu = Device::cuda(0);

}  // namespace

// No comma in the name: a Catch2 v2 test spec splits at commas (tests/gpu/racecheck_tests.txt).
TEST_CASE("CUDA shared-memory block reductions with several warps per block match the CPU", "[cuda]") {
  PRECIS_REQUIRE_CUDA();
  uint64_t seed = 400;
  for (DType dt : {DType::f32, DType::f64}) {
    INFO(dtype_name(dt));
    {  // layer_norm: rows of 1001 (128 threads) and 2048 vectorised (64 threads), with parameters
      for (const Shape& shape : {Shape{3, 1001}, Shape{2, 2048}}) {
        INFO("shape " << shape_str(shape));
        const int64_t D = shape.back();
        const Tensor x = leaf(shape, -3, 5, ++seed, dt);
        const Tensor w = leaf({D}, 0.5, 1.5, ++seed, dt), b = leaf({D}, -1, 1, ++seed, dt);
        compare_with_cpu(OpId::layer_norm, dt, {x, w, b},
                         [&](const std::vector<Tensor>& in) { return layer_norm(in[0], {D}, in[1], in[2]); });
      }
    }
    {  // group_norm: groups of 646 elements (128 threads), channels of 323 (64 threads in backward)
      compare_with_cpu(OpId::group_norm, dt,
                       {leaf({2, 4, 17, 19}, -2, 4, ++seed, dt), leaf({4}, 0.5, 1.5, ++seed, dt),
                        leaf({4}, -1, 1, ++seed, dt)},
                       [&](const std::vector<Tensor>& in) { return group_norm(in[0], 2, in[1], in[2]); });
    }
    {  // batch_norm in training: per-channel sums, forward and backward (256 threads)
      compare_with_cpu(OpId::batch_norm, dt,
                       {leaf({4, 3, 20, 20}, 50, 60, ++seed, dt), leaf({3}, 0.5, 1.5, ++seed, dt),
                        leaf({3}, -1, 1, ++seed, dt)},
                       [&](const std::vector<Tensor>& in) {
                         return batch_norm(in[0], Tensor(), Tensor(), in[1], in[2], /*training=*/true);
                       });
    }
    {  // softmax and log_softmax: rows of 3001 (256 threads), forward and backward
      for (bool log : {false, true}) {
        INFO("log " << log);
        compare_with_cpu(log ? OpId::log_softmax : OpId::softmax, dt, {leaf({3, 3001}, -8, 8, ++seed, dt)},
                         [&](const std::vector<Tensor>& in) {
                           return log ? log_softmax(in[0], 1) : softmax(in[0], 1);
                         });
      }
    }
    {  // cross_entropy with class weights: the weight total and rows of 3001 classes (256 threads)
      const Tensor tgt = from_vector<int64_t>({0, 3000, -100, 1234, 77}, {5});
      const Tensor w = leaf({3001}, 0.2, 2, ++seed, dt, false);
      compare_with_cpu(OpId::cross_entropy, dt, {leaf({5, 3001}, -6, 6, ++seed, dt)},
                       [&](const std::vector<Tensor>& in) {
                         const Device dev = in[0].device();
                         return cross_entropy(in[0], tgt.to(dev), w.to(dev), -100, Reduction::mean, 0.1);
                       });
    }
    {  // sum, max and var over rows of 5000: a block per row in two chunks (256 threads)
      const Tensor x = leaf({3, 5000}, -1, 1, ++seed, dt, false);
      const Tensor xg = x.to(kGpu);
      require_close(sum(xg, {1}), sum(x, {1}), dt, OpId::sum, Compared::output);
      require_close(var(xg, {1}), var(x, {1}), dt, OpId::var, Compared::output);
      const auto [v, i] = max(x, 1);
      const auto [vg, ig] = max(xg, 1);
      CHECK(vg.to(Device::cpu()).to(DType::f64).to_vector<double>() == v.to(DType::f64).to_vector<double>());
      CHECK(ig.to(Device::cpu()).to_vector<int64_t>() == i.to_vector<int64_t>());
    }
  }
}
