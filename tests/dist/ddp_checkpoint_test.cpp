// Activation checkpointing inside DistributedDataParallel, under any world size (1 without
// mpirun): the recomputed region's parameters reach DDP's gradient-ready hooks once per backward,
// in the engine's usual accumulation, so the reduced gradients, the steps and the BatchNorm
// statistics are those of the run without checkpointing, bit for bit, on every rank.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>

#include "autograd/checkpoint.h"
#include "core/rng.h"
#include "dist/ddp.h"
#include "ops/functional.h"
#include "optim/sgd.h"
#include "tensor/factory.h"
#include "tests/dist/wave.h"

using namespace precis;
using autograd::CheckpointMode;
using dist::DistributedDataParallel;

namespace {

using dist_testing::wave;

// A checkpointed block (linear, batch norm, relu, dropout) between two plain linears.
struct Net {
  Tensor w0 = wave({6, 6}, 0.5), w1 = wave({8, 6}, 1.0), gamma = full({8}, 1.0), beta = zeros({8}),
         w2 = wave({3, 8}, 2.0);
  Tensor rm = zeros({8}), rv = full({8}, 1.0);
  Net() {
    for (Tensor* p : {&w0, &w1, &gamma, &beta, &w2}) p->requires_grad_(true);
  }
  DistributedDataParallel::NamedTensors params() const {
    return {{"fc0.weight", w0}, {"fc1.weight", w1}, {"bn.weight", gamma}, {"bn.bias", beta}, {"fc2.weight", w2}};
  }
  Tensor loss(int rank, CheckpointMode mode) const {
    const Tensor x = wave({4, 6}, 3.0 + rank);
    auto block = [this](const Tensor& h) {
      return dropout(relu(batch_norm(linear(h, w1), rm, rv, gamma, beta, /*training=*/true)), 0.25);
    };
    Tensor h = autograd::checkpoint(autograd::CheckpointOptions{.mode = mode}, block, linear(x, w0));
    return cross_entropy(linear(h, w2), from_vector<int64_t>({0, 1, 2, 1}));
  }
};

struct Outcome {
  std::vector<std::vector<float>> grads, after;
  std::vector<int> hook_calls;
};

Outcome two_steps(CheckpointMode mode) {
  auto pg = dist::init_process_group();
  Net net;
  DistributedDataParallel ddp(pg, net.params(), {{"bn.running_mean", net.rm}, {"bn.running_var", net.rv}});
  Outcome o;
  o.hook_calls.assign(net.params().size(), 0);
  for (size_t i = 0; i < net.params().size(); ++i)
    net.params()[i].second.register_post_accumulate_grad_hook([&o, i](const Tensor&) { ++o.hook_calls[i]; });
  optim::SGD opt({net.w0, net.w1, net.gamma, net.beta, net.w2}, {.lr = 0.1});
  manual_seed(11 + static_cast<uint64_t>(pg->rank()));
  for (int step = 0; step < 2; ++step) {
    ddp.pre_forward();
    net.loss(pg->rank(), mode).backward();
    for (auto& [name, p] : net.params()) o.grads.push_back(p.grad().to_vector<float>());
    opt.step();
    opt.zero_grad();
  }
  for (const Tensor& t : {net.w0, net.w1, net.gamma, net.beta, net.w2, net.rm, net.rv})
    o.after.push_back(t.detach().to_vector<float>());
  return o;
}

bool same_bits(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].size() != b[i].size() || std::memcmp(a[i].data(), b[i].data(), a[i].size() * sizeof(float)) != 0)
      return false;
  return true;
}

}  // namespace

TEST_CASE("ddp: a checkpointed region's parameters reach the gradient-ready hooks once, with the plain run's bits",
          "[dist][ddp][checkpoint]") {
  const Outcome plain = two_steps(CheckpointMode::none);
  for (CheckpointMode mode : {CheckpointMode::full, CheckpointMode::selective}) {
    INFO(autograd::checkpoint_mode_name(mode));
    const Outcome ck = two_steps(mode);
    REQUIRE(ck.hook_calls == std::vector<int>(plain.hook_calls.size(), 2));  // once per backward
    REQUIRE(ck.hook_calls == plain.hook_calls);
    REQUIRE(same_bits(ck.grads, plain.grads));
    REQUIRE(same_bits(ck.after, plain.after));
  }
}
