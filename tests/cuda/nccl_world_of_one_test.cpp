// [cuda] The NCCL backend in a world of one: dist::init_process_group(Backend::nccl) without a
// launcher makes its communicator in this process, and every CUDA collective goes through it on
// cuda:0. tests/gpu/run.sh runs precis_cuda_tests whole, so these run on the GPU machine (which has
// no MPI); without a GPU they skip loudly, and the first case checks the refusal instead.
//
// With one rank NCCL has nothing to move for an in-place all_reduce, so equal values alone prove
// little: the cases also check the stream ordering around it (the finishing kernels of f16/bf16
// and a write right after wait()), and use all_gather, which copies into another buffer on the
// communication stream, to catch a collective that does not wait for its producer or a reader that
// does not wait for the collective.
#include <catch2/catch.hpp>

#include <chrono>

#include "core/grad_mode.h"
#include "dist/process_group.h"
#include "ops/functional.h"
#include "tensor/factory.h"
#include "tests/support/tensor_testing.h"

using namespace precis;

namespace {

const Device kGpu = Device::cuda(0);

// The world-of-one NCCL group; on a GPU machine a build without NCCL fails here.
std::shared_ptr<dist::ProcessGroup> nccl_group() {
  INFO("a GPU is present but precis was built without NCCL (PRECIS_NCCL; nccl.h next to the CUDA toolkit)");
  REQUIRE(dist::nccl_available());
  auto pg = dist::init_process_group(dist::Backend::nccl);
  REQUIRE(pg->size() == 1);
  REQUIRE(pg->backend() == "local+nccl");
  return pg;
}

// Multiples of 0.25 below 15: exact in f16 and bf16, so every dtype can be compared exactly.
Tensor ramp(int64_t n, double scale, DType dtype) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t k = 0; k < n; ++k) v[static_cast<size_t>(k)] = static_cast<float>(scale * static_cast<double>(k % 97 - 40));
  return from_vector<float>(v, {n}).to(dtype);
}

// max |a - b| over the elements, computed on the compute stream (so ordered after a waited Work).
double max_abs_diff(const Tensor& a, const Tensor& b) {
  return max(abs(sub(a.to(DType::f32), b.to(DType::f32)))).item<double>();
}

// 64 MiB written by a chain of kernels on the compute stream (about a millisecond on a GPU): a
// collective that started without waiting for it would read a half-written buffer, and the last
// result reuses a block that held an earlier, different value of the chain.
Tensor slow_product() {
  NoGradGuard no_grad;
  Tensor x = full({int64_t{1} << 24}, 0.5, {.device = kGpu});
  for (int i = 0; i < 12; ++i) x = add(mul(x, 1.5), 0.25);
  return x;
}

}  // namespace

TEST_CASE("nccl world of one: Backend::nccl refuses a build without NCCL or a machine without a GPU, naming the fix",
          "[dist][cuda]") {
  const bool existed = dist::is_initialized();
  if (dist::nccl_available() && cuda_is_available()) {
    CHECK(dist::init_process_group(dist::Backend::nccl)->backend() == "local+nccl");
    return;
  }
  if (!dist::nccl_available()) {
    PRECIS_REQUIRE_THROWS_WITH_ALL(dist::init_process_group(dist::Backend::nccl), dist::DistributedError,
                                   "Backend::nccl", "no NCCL", "PRECIS_NCCL=ON");
  } else {
    PRECIS_REQUIRE_THROWS_WITH_ALL(dist::init_process_group(dist::Backend::nccl), DeviceError, "Backend::nccl",
                                   "no CUDA device", "CUDA_VISIBLE_DEVICES", "Backend::automatic");
  }
  CHECK(dist::is_initialized() == existed);  // a refusal leaves no half-made group behind
  CHECK(dist::init_process_group()->size() == 1);  // and the CPU world of one is still there
}

TEST_CASE("nccl world of one: all_reduce of f32, f16, bf16 and f64 on cuda:0, ordered between producer and reader",
          "[dist][cuda]") {
  PRECIS_REQUIRE_CUDA();
  auto pg = nccl_group();
  for (DType dt : {DType::f32, DType::f16, DType::bf16, DType::f64}) {
    for (dist::ReduceOp op : {dist::ReduceOp::sum, dist::ReduceOp::avg, dist::ReduceOp::max}) {
      INFO(dtype_name(dt) << " " << dist::reduce_op_name(op));
      const Tensor host = ramp(1000, 0.25, dt);
      Tensor t = mul(host.to(kGpu), 2.0);  // produced on the compute stream just before
      auto work = pg->all_reduce(t, op);
      // done() alone must reach completion (it polls the communication stream's event).
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
      while (!work->done() && std::chrono::steady_clock::now() < deadline) {
      }
      REQUIRE(work->done());
      work->wait();
      CHECK(work->done());
      {
        // Written right after wait(): f16/bf16 round their f32 copy back into t at wait(), on the
        // compute stream; a rounding queued anywhere else could land after this write.
        NoGradGuard no_grad;
        t.copy_(add(t, 1.0));
      }
      CHECK(t.dtype() == dt);
      CHECK(max_abs_diff(t.to(Device::cpu()), add(mul(host, 2.0), 1.0)) == 0.0);
    }
  }
  Tensor ints = ramp(77, 1.0, DType::i64).to(kGpu);
  pg->all_reduce(ints, dist::ReduceOp::sum)->wait();
  CHECK(ints.to(Device::cpu()).to_vector<int64_t>() == ramp(77, 1.0, DType::i64).to_vector<int64_t>());
}

TEST_CASE("nccl world of one: a collective waits for its producer, and its reader waits for it, waited or dropped",
          "[dist][cuda]") {
  PRECIS_REQUIRE_CUDA();
  auto pg = nccl_group();
  const int64_t n = int64_t{1} << 24;
  {
    Tensor in = slow_product();
    Tensor out = zeros({1, n}, {.device = kGpu});
    pg->all_gather(in, out)->wait();
    CHECK(max_abs_diff(out.select(0, 0), in) == 0.0);
  }
  {
    // Dropped unwaited: the Work's destructor still orders the compute stream after the copy, so
    // the fill below is not overwritten by a copy still running on the communication stream.
    Tensor in = slow_product();
    Tensor out = zeros({1, n}, {.device = kGpu});
    pg->all_gather(in, out).reset();  // the only handle, destroyed unwaited
    NoGradGuard no_grad;
    out.fill_(3.0);
    CHECK(max_abs_diff(out, full({1, n}, 3.0, {.device = kGpu})) == 0.0);
  }
  Tensor b = ramp(333, 0.5, DType::f32).to(kGpu);
  pg->broadcast(b, 0)->wait();
  CHECK(b.to(Device::cpu()).to_vector<float>() == ramp(333, 0.5, DType::f32).to_vector<float>());
  pg->barrier()->wait();
  Tensor c = ramp(5, 1.0, DType::f32);  // CPU tensors still go to the CPU world of one
  pg->all_reduce(c, dist::ReduceOp::avg)->wait();
  CHECK(c.to_vector<float>() == ramp(5, 1.0, DType::f32).to_vector<float>());
}

TEST_CASE("nccl world of one: bad CUDA inputs are typed errors before NCCL is called", "[dist][cuda]") {
  PRECIS_REQUIRE_CUDA();
  auto pg = nccl_group();
  Tensor strided = zeros({4, 6}, {.device = kGpu}).transpose(0, 1);
  CHECK_THROWS_AS(pg->all_reduce(strided, dist::ReduceOp::sum), ValueError);
  CHECK_THROWS_AS(pg->all_reduce(zeros({4}, {.dtype = DType::i64, .device = kGpu}), dist::ReduceOp::avg), DTypeError);
  CHECK_THROWS_AS(pg->all_gather(zeros({4}, {.device = kGpu}), zeros({1, 4})), DeviceError);
  CHECK_THROWS_AS(pg->all_gather(zeros({4}, {.device = kGpu}), zeros({2, 4}, {.device = kGpu})), ShapeError);
  CHECK_THROWS_AS(pg->broadcast(zeros({4}, {.device = kGpu}), 1), IndexError);
}
