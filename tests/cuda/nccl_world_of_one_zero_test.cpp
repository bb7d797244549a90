// [cuda] ZeRO-1 (dist::ZeroOptimizer) over the world-of-one NCCL group on cuda:0: reduce_scatter
// and all_gather of CUDA tensors go through ncclReduceScatter / ncclAllGather, and Adam with the
// loss scaler steps the shard pieces to the bits plain DDP gives (the update kernel is elementwise,
// so cutting a parameter into pieces changes nothing). Clipping is compared within a tolerance:
// the CUDA squared-norm kernels sum in their own blocks, not the CPU's 16384 the pieces follow.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>

#include "amp/grad_scaler.h"
#include "core/grad_mode.h"
#include "dist/ddp.h"
#include "dist/zero.h"
#include "ops/functional.h"
#include "optim/adam.h"
#include "tensor/factory.h"
#include "tests/support/tensor_testing.h"

using namespace precis;

namespace {

const Device kGpu = Device::cuda(0);

std::shared_ptr<dist::ProcessGroup> nccl_group() {
  INFO("a GPU is present but precis was built without NCCL (PRECIS_NCCL; nccl.h next to the CUDA toolkit)");
  REQUIRE(dist::nccl_available());
  auto pg = dist::init_process_group(dist::Backend::nccl);
  REQUIRE(pg->backend() == "local+nccl");
  return pg;
}

Tensor wave(int64_t n, double seed, double scale) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t k = 0; k < n; ++k) v[static_cast<size_t>(k)] = static_cast<float>(scale * std::sin(seed + 0.37 * k));
  return from_vector<float>(v, {n}).to(kGpu);
}

// A parameter of 40000 elements (three pieces), one of 300 and one of 7, on cuda:0.
struct Model {
  std::vector<Tensor> p{wave(40000, 1.0, 0.02), wave(300, 2.0, 0.1), wave(7, 3.0, 0.3)};
  Model() {
    for (Tensor& t : p) t.requires_grad_(true);
  }
  Tensor loss(int step) const {
    Tensor h = mul(p[0], wave(40000, 10.0 + step, 1.0));
    return add(add(sum(mul(h, h)), sum(mul(p[1], wave(300, 20.0 + step, 1.0)))), sum(mul(p[2], p[2])));
  }
  std::vector<std::pair<std::string, Tensor>> named() const { return {{"w", p[0]}, {"b", p[1]}, {"v", p[2]}}; }
};

std::unique_ptr<optim::Optimizer> make_adam(std::vector<std::vector<Tensor>> shards) {
  return std::make_unique<optim::Adam>(shards[0], optim::AdamOptions{.lr = 1e-2});
}

// Runs `steps` steps of `opt` with the scaler; an inf gradient at step 1; clips when max_norm > 0.
void train(Model& m, optim::Optimizer& opt, amp::GradScaler& scaler, int steps, double max_norm) {
  for (int s = 0; s < steps; ++s) {
    // At step 1 a gradient overflows while the loss stays finite.
    const int hook = s == 1 ? m.p[1].register_hook([](const Tensor& g) {
      return full_like(g, std::numeric_limits<double>::infinity());
    }) : -1;
    scaler.scale(m.loss(s)).backward();
    if (hook >= 0) m.p[1].remove_hook(hook);
    if (max_norm > 0) scaler.clip_grad_norm_(opt, max_norm);
    scaler.step(opt);
    scaler.update();
    opt.zero_grad();
  }
}

}  // namespace

TEST_CASE("nccl world of one: reduce_scatter of CUDA tensors, f32 and f16", "[dist][cuda][zero]") {
  PRECIS_REQUIRE_CUDA();
  auto pg = nccl_group();
  for (DType dtype : {DType::f32, DType::f16}) {
    INFO(dtype_name(dtype));
    Tensor in = wave(1000, 0.5, 2.0).to(dtype);
    Tensor out = zeros({1000}, {.dtype = dtype, .device = kGpu});
    pg->reduce_scatter(in, out, dist::ReduceOp::sum)->wait();
    CHECK(out.to(Device::cpu()).to_vector<float>() == in.to(Device::cpu()).to_vector<float>());
  }
  Tensor bad = zeros({3}, {.device = kGpu});
  CHECK_THROWS_AS(pg->reduce_scatter(zeros({4}, {.device = kGpu}), bad, dist::ReduceOp::sum), ShapeError);
}

TEST_CASE("nccl world of one: ZeroOptimizer with Adam and the loss scaler equals plain DDP bit for bit",
          "[dist][cuda][zero][amp]") {
  PRECIS_REQUIRE_CUDA();
  auto pg = nccl_group();
  for (double max_norm : {0.0, 0.5}) {
    INFO("max_norm " << max_norm);
    Model plain, sharded;
    amp::GradScaler plain_scaler({.init_scale = 1024.0}), scaler({.init_scale = 1024.0});
    dist::DistributedDataParallel plain_ddp(pg, plain.named(), {}, {.scaler = &plain_scaler});
    auto plain_opt = make_adam({plain.p});
    dist::DistributedDataParallel ddp(pg, sharded.named(), {}, {.scaler = &scaler});
    dist::ZeroOptimizer opt(ddp, sharded.p, make_adam);
    train(plain, *plain_opt, plain_scaler, 4, max_norm);
    train(sharded, opt, scaler, 4, max_norm);
    CHECK(scaler.get_scale() == plain_scaler.get_scale());
    CHECK(scaler.get_scale() == 512.0);  // the overflow backed off once
    const StateDict a = opt.state_dict(), b = plain_opt->state_dict();
    CHECK(a.size() == b.size());
    for (size_t i = 0; i < plain.p.size(); ++i) {
      INFO("parameter " << i);
      const auto x = sharded.p[i].detach().to(Device::cpu()).to_vector<float>();
      const auto y = plain.p[i].detach().to(Device::cpu()).to_vector<float>();
      if (max_norm == 0.0) {
        CHECK(x == y);
      } else {
        REQUIRE(x.size() == y.size());
        double worst = 0;
        for (size_t k = 0; k < x.size(); ++k) worst = std::max(worst, std::abs(static_cast<double>(x[k]) - y[k]));
        CHECK(worst < 1e-5);
      }
    }
  }
}
