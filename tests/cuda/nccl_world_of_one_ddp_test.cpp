// [cuda] DistributedDataParallel with the loss scaler over the world-of-one NCCL group on cuda:0
// (tests/cuda/nccl_world_of_one_test.cpp has the group's own cases). The scaler's non-finite-loss
// flag rides as one extra element at the tail of the last bucket (docs/distributed.md, "The loss
// scaler"); a probe group in front of NCCL sees every bucket, and can add another rank's flag to
// the tail, which with one rank is the only way to show that the scaler acts on the reduced flag.
#include <catch2/catch.hpp>

#include <functional>
#include <limits>

#include "amp/grad_scaler.h"
#include "core/grad_mode.h"
#include "dist/ddp.h"
#include "ops/functional.h"
#include "optim/sgd.h"
#include "tensor/factory.h"
#include "tests/support/tensor_testing.h"

using namespace precis;

namespace {

const Device kGpu = Device::cuda(0);

// Records each all_reduce's tensor and lets a test change it (on the compute stream) before NCCL.
class ProbeGroup : public dist::ProcessGroup {
 public:
  explicit ProbeGroup(std::shared_ptr<dist::ProcessGroup> inner) : inner_(std::move(inner)) {}
  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  int local_rank() const override { return inner_->local_rank(); }
  std::string backend() const override { return "probe(" + inner_->backend() + ")"; }
  std::shared_ptr<dist::Work> all_reduce(const Tensor& t, dist::ReduceOp op) override {
    reduced.push_back(t);
    if (before_reduce) before_reduce(t);
    return inner_->all_reduce(t, op);
  }
  std::shared_ptr<dist::Work> broadcast(const Tensor& t, int root) override { return inner_->broadcast(t, root); }
  std::shared_ptr<dist::Work> all_gather(const Tensor& in, const Tensor& out) override {
    return inner_->all_gather(in, out);
  }
  std::shared_ptr<dist::Work> barrier() override { return inner_->barrier(); }
  std::vector<Tensor> reduced;
  std::function<void(const Tensor&)> before_reduce;

 private:
  std::shared_ptr<dist::ProcessGroup> inner_;
};

std::shared_ptr<dist::ProcessGroup> nccl_group() {
  INFO("a GPU is present but precis was built without NCCL (PRECIS_NCCL; nccl.h next to the CUDA toolkit)");
  REQUIRE(dist::nccl_available());
  auto pg = dist::init_process_group(dist::Backend::nccl);
  REQUIRE(pg->backend() == "local+nccl");
  return pg;
}

Tensor wave(int64_t n, double scale) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t k = 0; k < n; ++k) v[static_cast<size_t>(k)] = static_cast<float>(scale * static_cast<double>(k % 13 - 6));
  return from_vector<float>(v, {n}).to(kGpu);
}

// Three f32 parameters of 300, 50 and 7 elements; with tiny caps each is a bucket, reduced in
// reverse order (7, 50, then 300 and the flag).
struct Model {
  std::vector<Tensor> p{wave(300, 0.01), wave(50, 0.02), wave(7, 0.03)};
  Model() {
    for (Tensor& t : p) t.requires_grad_(true);
  }
  Tensor loss() const {
    Tensor h = mul(p[0], wave(300, 0.1));
    return add(add(sum(mul(h, h)), sum(mul(p[1], p[1]))), sum(p[2]));
  }
  std::vector<std::pair<std::string, Tensor>> named() const { return {{"w", p[0]}, {"b", p[1]}, {"v", p[2]}}; }
  std::vector<std::vector<float>> values() const {
    std::vector<std::vector<float>> out;
    for (const Tensor& t : p) out.push_back(t.detach().to(Device::cpu()).to_vector<float>());
    return out;
  }
};

constexpr double kScale = 1024.0;

// One model trained through DDP over the probe, with its scaler and optimizer.
struct Replica {
  Model model;
  std::shared_ptr<ProbeGroup> probe;
  amp::GradScaler scaler{{.init_scale = kScale}};
  dist::DistributedDataParallel ddp;
  optim::SGD opt{model.p, {.lr = 0.1}};
  explicit Replica(std::shared_ptr<dist::ProcessGroup> pg)
      : probe(std::make_shared<ProbeGroup>(std::move(pg))),
        ddp(probe, model.named(), {}, {.bucket_cap_mb = 1e-9, .first_bucket_cap_mb = 1e-9, .scaler = &scaler}) {}
  // One scaled step; `loss_factor` makes the loss non-finite.
  amp::StepResult step(double loss_factor = 1.0) {
    probe->reduced.clear();
    scaler.scale(mul(model.loss(), loss_factor)).backward();
    amp::StepResult r = scaler.step(opt);
    scaler.update();
    opt.zero_grad();
    return r;
  }
  // The flag's slot after backward (DDP has waited for every bucket, so the read is ordered).
  float reduced_flag() const {
    REQUIRE(probe->reduced.size() == 3);
    return probe->reduced.back().narrow(0, 300, 1).to(Device::cpu()).item<float>();
  }
};

}  // namespace

TEST_CASE("nccl world of one: a DDP step with the loss scaler equals a plain step, and skips as the flag says",
          "[dist][cuda][ddp][amp]") {
  PRECIS_REQUIRE_CUDA();
  auto pg = nccl_group();

  SECTION("finite: the same parameters as a single-device step, bit for bit, with the flag in the last bucket") {
    Replica ddp(pg);
    Model plain;
    amp::GradScaler scaler({.init_scale = kScale});
    optim::SGD opt(plain.p, {.lr = 0.1});
    for (int step = 0; step < 2; ++step) {
      INFO("step " << step);
      CHECK(ddp.step().applied());
      scaler.scale(plain.loss()).backward();
      CHECK(scaler.step(opt).applied());
      scaler.update();
      opt.zero_grad();
      std::vector<int64_t> numels;
      for (const Tensor& t : ddp.probe->reduced) numels.push_back(t.numel());
      CHECK(numels == std::vector<int64_t>{7, 50, 301});
      CHECK(ddp.probe->reduced.back().device() == kGpu);
      CHECK(ddp.reduced_flag() == 0.0f);
      CHECK(ddp.model.values() == plain.values());
    }
  }

  SECTION("a non-finite loss here: the flag reaches the last bucket, the step is skipped and the scale kept") {
    Replica ddp(pg);
    const auto before = ddp.model.values();
    amp::StepResult r = ddp.step(std::numeric_limits<double>::infinity());
    CHECK(ddp.reduced_flag() == 1.0f);
    CHECK_FALSE(r.applied());
    CHECK(r.reason() == amp::SkipReason::non_finite_loss);
    CHECK(ddp.scaler.get_scale() == kScale);
    CHECK(ddp.model.values() == before);
  }

  SECTION("another rank's non-finite loss, added to the tail before NCCL: this finite rank skips alike") {
    Replica ddp(pg);
    ddp.probe->before_reduce = [](const Tensor& flat) {
      if (flat.numel() != 301) return;
      NoGradGuard no_grad;
      Tensor tail = flat.narrow(0, 300, 1);
      tail.copy_(add(tail, 1.0));
    };
    const auto before = ddp.model.values();
    amp::StepResult r = ddp.step();
    CHECK(ddp.reduced_flag() == 1.0f);
    CHECK_FALSE(r.applied());
    CHECK(r.reason() == amp::SkipReason::non_finite_loss);
    CHECK(ddp.scaler.get_scale() == kScale);
    CHECK(ddp.model.values() == before);
  }

  SECTION("an inf gradient with a finite loss: the reduced gradients overflow, the step is skipped, the scale backs off") {
    Replica ddp(pg);
    ddp.model.p[1].register_hook([](const Tensor& g) { return full_like(g, std::numeric_limits<double>::infinity()); });
    const auto before = ddp.model.values();
    amp::StepResult r = ddp.step();
    CHECK(ddp.reduced_flag() == 0.0f);
    CHECK_FALSE(r.applied());
    CHECK(r.reason() == amp::SkipReason::overflow);
    CHECK(ddp.scaler.get_scale() == kScale / 2);
    CHECK(ddp.model.values() == before);
  }
}

TEST_CASE("nccl world of one: DDP over f32 and f64 parameters gives the gradients of no DDP, bit for bit",
          "[dist][cuda][ddp]") {
  PRECIS_REQUIRE_CUDA();
  auto pg = nccl_group();
  auto make = [] {
    std::vector<Tensor> p{wave(300, 0.01), wave(300, 0.003), wave(50, 0.02).to(DType::f64)};
    for (Tensor& t : p) t.requires_grad_(true);
    return p;
  };
  auto loss = [](const std::vector<Tensor>& p) {
    Tensor h = add(mul(p[0], wave(300, 0.1)), p[1]);
    return add(sum(mul(h, h)), sum(mul(p[2], p[2])).to(DType::f32));
  };
  auto plain = make();
  auto wrapped = make();
  // One bucket per parameter (an f64 one among them), so several collectives overlap backward.
  dist::DistributedDataParallel ddp(pg, {{"a", wrapped[0]}, {"b", wrapped[1]}, {"c", wrapped[2]}}, {},
                                    {.bucket_cap_mb = 1e-9, .first_bucket_cap_mb = 1e-9});
  CHECK(ddp.bucket_parameter_names().size() == 3);
  for (int step = 0; step < 2; ++step) {  // the second pass accumulates onto the first's gradients
    loss(plain).backward();
    loss(wrapped).backward();
    for (size_t i = 0; i < plain.size(); ++i) {
      INFO("parameter " << i << " step " << step);
      REQUIRE(wrapped[i].grad().device() == kGpu);
      CHECK(wrapped[i].grad().dtype() == plain[i].grad().dtype());
      CHECK(wrapped[i].grad().to(Device::cpu()).to(DType::f64).to_vector<double>() ==
            plain[i].grad().to(Device::cpu()).to(DType::f64).to_vector<double>());
    }
  }
}
