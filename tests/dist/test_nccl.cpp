// [cuda] The NCCL backend at world size 1 (tests/gpu/run.sh runs these without mpirun): every
// collective on CUDA tensors, ordering against the compute stream, and DDP on CUDA parameters
// equal to no DDP bit for bit. On a machine with a GPU, a build without NCCL fails here instead of
// skipping. Without a GPU they skip loudly; under mpirun with more than one rank they skip too
// (ranks would share one GPU, which NCCL refuses; a multi-GPU run is left to docs/distributed.md).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>

#include "core/grad_mode.h"
#include "dist/ddp.h"
#include "ops/functional.h"
#include "tensor/factory.h"
#include "tests/support/tensor_testing.h"

using namespace precis;

namespace {

// A world of one on a GPU, with NCCL built; false (after a warning) when the test cannot apply.
bool nccl_world_of_one(dist::ProcessGroup& pg) {
  if (!cuda_is_available()) {
    WARN("no CUDA device; [cuda] NCCL test skipped");
    return false;
  }
  if (pg.size() != 1) {
    WARN("world size " << pg.size() << " on one machine: ranks would share cuda:0, which NCCL refuses; skipped");
    return false;
  }
  INFO("a GPU is present but precis was built without NCCL (PRECIS_NCCL; nccl.h next to the CUDA toolkit)");
  REQUIRE(dist::nccl_available());
  REQUIRE(pg.backend() == "local+nccl");
  return true;
}

Tensor ramp(int64_t n, double scale, DType dtype) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t k = 0; k < n; ++k) v[static_cast<size_t>(k)] = static_cast<float>(scale * static_cast<double>(k % 97 - 40));
  return from_vector<float>(v, {n}).to(dtype);
}

}  // namespace

TEST_CASE("nccl: every collective on CUDA tensors at world size 1", "[dist][cuda]") {
  auto pg = dist::init_process_group();
  if (!nccl_world_of_one(*pg)) return;
  const Device gpu = Device::cuda(0);
  for (DType dt : {DType::f32, DType::f64, DType::f16, DType::bf16}) {
    for (dist::ReduceOp op : {dist::ReduceOp::sum, dist::ReduceOp::avg, dist::ReduceOp::max}) {
      INFO(dtype_name(dt) << " " << dist::reduce_op_name(op));
      Tensor host = ramp(1000, 0.25, dt);
      // Produced by a kernel on the compute stream just before: the collective must wait for it.
      Tensor t = mul(host.to(gpu), 2.0);
      pg->all_reduce(t, op)->wait();
      Tensor back = t.to(Device::cpu()).to(DType::f64);
      CHECK(back.to_vector<double>() == mul(host, 2.0).to(DType::f64).to_vector<double>());
    }
  }
  Tensor ints = ramp(77, 1.0, DType::i64).to(gpu);
  pg->all_reduce(ints, dist::ReduceOp::sum)->wait();
  CHECK(ints.to(Device::cpu()).to_vector<int64_t>() == ramp(77, 1.0, DType::i64).to_vector<int64_t>());

  Tensor b = ramp(333, 0.5, DType::f32).to(gpu);
  auto w = pg->broadcast(b, 0);
  w->wait();
  CHECK(w->done());
  CHECK(b.to(Device::cpu()).to_vector<float>() == ramp(333, 0.5, DType::f32).to_vector<float>());

  Tensor in = ramp(12, 1.5, DType::f32).reshape({3, 4}).to(gpu);
  Tensor out = zeros({1, 3, 4}, {.device = gpu});
  pg->all_gather(in, out)->wait();
  CHECK(out.to(Device::cpu()).reshape({12}).to_vector<float>() == ramp(12, 1.5, DType::f32).to_vector<float>());

  pg->barrier()->wait();
  // CPU tensors still go to the CPU backend through the same group.
  Tensor c = ramp(5, 1.0, DType::f32);
  pg->all_reduce(c, dist::ReduceOp::avg)->wait();
  CHECK(c.to_vector<float>() == ramp(5, 1.0, DType::f32).to_vector<float>());
}

TEST_CASE("nccl: bad CUDA inputs fail before any rank enters the collective", "[dist][cuda]") {
  auto pg = dist::init_process_group();
  if (!nccl_world_of_one(*pg)) return;
  const Device gpu = Device::cuda(0);
  Tensor strided = zeros({4, 6}, {.device = gpu}).transpose(0, 1);
  CHECK_THROWS_AS(pg->all_reduce(strided, dist::ReduceOp::sum), ValueError);
  CHECK_THROWS_AS(pg->all_reduce(zeros({4}, {.dtype = DType::i64, .device = gpu}), dist::ReduceOp::avg), DTypeError);
  CHECK_THROWS_AS(pg->all_gather(zeros({4}, {.device = gpu}), zeros({1, 4})), DeviceError);
  CHECK_THROWS_AS(pg->all_gather(zeros({4}, {.device = gpu}), zeros({2, 4}, {.device = gpu})), ShapeError);
  CHECK_THROWS_AS(pg->broadcast(zeros({4}, {.device = gpu}), 1), IndexError);
}

TEST_CASE("nccl: DDP on CUDA parameters equals no DDP bit for bit at world size 1", "[dist][cuda][ddp]") {
  auto pg = dist::init_process_group();
  if (!nccl_world_of_one(*pg)) return;
  const Device gpu = Device::cuda(0);
  auto make = [&] {
    std::vector<Tensor> p{ramp(300, 0.01, DType::f32).to(gpu), ramp(300, 0.003, DType::f32).to(gpu),
                          ramp(50, 0.02, DType::f64).to(gpu)};
    for (Tensor& t : p) t.requires_grad_(true);
    return p;
  };
  auto loss = [&](const std::vector<Tensor>& p) {
    Tensor x = ramp(300, 0.1, DType::f32).to(gpu);
    Tensor h = add(mul(p[0], x), p[1]);
    Tensor z = mul(p[2], p[2]);
    return add(sum(mul(h, h)), sum(z).to(DType::f32));
  };
  auto plain = make();
  auto wrapped = make();
  // Tiny caps: one bucket per parameter, so several collectives overlap the backward pass.
  dist::DistributedDataParallel ddp(pg, {{"a", wrapped[0]}, {"b", wrapped[1]}, {"c", wrapped[2]}}, {},
                                    {.bucket_cap_mb = 1e-9, .first_bucket_cap_mb = 1e-9});
  CHECK(ddp.bucket_parameter_names().size() == 3);
  for (int step = 0; step < 2; ++step) {
    loss(plain).backward();
    loss(wrapped).backward();
    for (size_t i = 0; i < plain.size(); ++i) {
      INFO("parameter " << i << " step " << step);
      REQUIRE(wrapped[i].grad().device() == gpu);
      CHECK(wrapped[i].grad().to(Device::cpu()).to(DType::f64).to_vector<double>() ==
            plain[i].grad().to(Device::cpu()).to(DType::f64).to_vector<double>());
    }
  }
}
