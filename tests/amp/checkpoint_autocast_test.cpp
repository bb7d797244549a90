// Checkpointing under autocast: the three shapes in which PyTorch's recomputation fails to repeat
// its forward cannot happen here (autocast state on recompute, the cast cache across recompute;
// checkpoint inside DDP is tests/dist/ddp_checkpoint_test.cpp), the audit counts each op once, and
// the loss scaler skips an overflow in the recomputed backward like any other.
#include <catch2/catch.hpp>

#include <cmath>

#include "amp/audit.h"
#include "amp/autocast.h"
#include "amp/grad_scaler.h"
#include "autograd/checkpoint.h"
#include "core/rng.h"
#include "ops/functional.h"
#include "optim/sgd.h"
#include "tests/support/tensor_testing.h"

namespace precis::amp {
namespace {

using autograd::CheckpointMode;
using autograd::CheckpointOptions;
using autograd::TensorList;
using testing::randn_input;

// A pre-norm residual block with dropout; its parameters are fp32 leaves the closures capture.
struct Block {
  Tensor w1 = randn_input({32, 16}, true, 11, DType::f32);
  Tensor b1 = randn_input({32}, true, 12, DType::f32);
  Tensor w2 = randn_input({16, 32}, true, 13, DType::f32);
  Tensor gamma = randn_input({16}, true, 14, DType::f32);
  Tensor forward(const Tensor& x) const {
    Tensor h = layer_norm(x, {16}, gamma);
    h = dropout(gelu(linear(h, w1, b1)), 0.2);
    return x + linear(h, w2);
  }
  TensorList params() const { return {w1, b1, w2, gamma}; }
};

// How a step runs the two blocks: plainly, or each as a checkpointed region of `mode`.
struct Run {
  const Block& block;
  CheckpointMode mode;
  Tensor operator()(const Tensor& x) const {
    auto f = [&b = block](const Tensor& in) { return b.forward(in); };  // kept until backward: not `this`
    Tensor h = autograd::checkpoint(CheckpointOptions{.mode = mode}, f, x);
    return autograd::checkpoint(CheckpointOptions{.mode = mode}, f, h);
  }
};

TensorList grads(const Block& b, const Tensor& x) {
  TensorList g;
  for (const Tensor& p : b.params()) g.push_back(p.grad());
  g.push_back(x.grad());
  return g;
}

void clear(const Block& b, const Tensor& x) {
  for (const Tensor& p : b.params()) p.set_grad(Tensor());
  x.set_grad(Tensor());
}

void require_same(const TensorList& a, const TensorList& b) {
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    INFO("gradient " << i);
    PRECIS_REQUIRE_SAME_BITS(a[i], b[i]);
  }
}

// The forward in an autocast region of `dtype` (none: f32), the backward outside it.
TensorList autocast_grads(const Block& b, const Tensor& x, CheckpointMode mode, std::optional<DType> dtype) {
  clear(b, x);
  manual_seed(5);
  Tensor loss;
  {
    std::optional<Autocast> ac;
    if (dtype) ac.emplace(*dtype);
    loss = sum(Run{b, mode}(x).to(DType::f32));
  }
  loss.backward();
  return grads(b, x);
}

TEST_CASE("a checkpoint made in an autocast region recomputes in it when backward runs outside",
          "[amp][checkpoint]") {
  Block b;
  Tensor x = randn_input({6, 16}, true, 15, DType::f32);
  for (DType dtype : {DType::bf16, DType::f16}) {
    INFO(dtype_name(dtype));
    const TensorList plain = autocast_grads(b, x, CheckpointMode::none, dtype);
    // The reference depends on the region: an f32 recomputation would not match it.
    REQUIRE_FALSE(testing::same_bits_report(plain[0], autocast_grads(b, x, CheckpointMode::none, std::nullopt)[0]).empty());
    require_same(autocast_grads(b, x, CheckpointMode::full, dtype), plain);
    require_same(autocast_grads(b, x, CheckpointMode::selective, dtype), plain);
  }
}

TEST_CASE("a recomputation ignores the autocast region and overrides its backward runs under",
          "[amp][checkpoint]") {
  Block b;
  Tensor x = randn_input({6, 16}, true, 15, DType::f32);
  const TensorList plain = autocast_grads(b, x, CheckpointMode::none, DType::bf16);
  clear(b, x);
  manual_seed(5);
  Tensor loss;
  {
    Autocast ac(DType::bf16);
    loss = sum(Run{b, CheckpointMode::full}(x).to(DType::f32));
  }
  {
    // Another dtype, and linear pinned to fp32, around the backward: the forward's settings win.
    Autocast other(DType::f16);
    set_category(OpId::linear, Category::FP32);
    loss.backward();
    reset_categories();
  }
  require_same(grads(b, x), plain);
}

TEST_CASE("the autocast cast cache cannot make a recomputation differ from its forward", "[amp][checkpoint]") {
  // pytorch/pytorch#193338: sibling checkpointed regions sharing a weight under autocast; the
  // second region's forward hits the cache, its recomputation may not. Here each region records
  // the parameter copies it was served, in selective mode too, with the weight also used outside.
  Block b;
  Tensor x = randn_input({6, 16}, true, 15, DType::f32);
  auto step = [&](CheckpointMode mode, bool backward_in_region) {
    clear(b, x);
    manual_seed(5);
    Autocast ac(DType::bf16);
    const Tensor before = linear(x, b.w2.t());  // casts w2 before the regions: a cache entry
    Tensor y = Run{b, mode}(x) + linear(before, b.w2);
    Tensor loss = sum(y.to(DType::f32));
    const size_t cached = cache_size();
    if (backward_in_region) {
      loss.backward();
      REQUIRE(cache_size() == cached);  // the recomputation's casts did not leak into the region's cache
    }
    return std::pair{loss, grads(b, x)};
  };
  const TensorList plain = step(CheckpointMode::none, true).second;
  for (CheckpointMode mode : {CheckpointMode::full, CheckpointMode::selective}) {
    INFO(autograd::checkpoint_mode_name(mode));
    require_same(step(mode, true).second, plain);
    auto [loss, unused] = step(mode, false);
    loss.backward();  // the region's cache is gone by now
    require_same(grads(b, x), plain);
  }
}

TEST_CASE("the precision audit records a checkpointed forward once", "[amp][checkpoint]") {
  Block b;
  Tensor x = randn_input({6, 16}, true, 15, DType::f32);
  auto calls = [&](CheckpointMode mode) {
    clear(b, x);
    Audit audit;
    {
      Autocast ac(DType::bf16);
      sum(Run{b, mode}(x).to(DType::f32)).backward();
    }
    std::map<std::string, int64_t> n;
    for (const AuditRecord& r : audit.records()) n[r.op] = r.calls;
    return n;
  };
  const auto plain = calls(CheckpointMode::none);
  REQUIRE(plain.at("linear") == 4);
  REQUIRE(calls(CheckpointMode::full) == plain);
  REQUIRE(calls(CheckpointMode::selective) == plain);
}

TEST_CASE("f16 with the loss scaler: steps match, and an overflow in the recomputed backward skips",
          "[amp][checkpoint]") {
  for (double scale : {1.0, 1e30}) {
    INFO("scale " << scale);
    std::vector<TensorList> after;
    std::vector<bool> applied;
    std::vector<double> next_scale;
    for (CheckpointMode mode : {CheckpointMode::none, CheckpointMode::full, CheckpointMode::selective}) {
      Block b;
      Tensor x = randn_input({6, 16}, true, 15, DType::f32);
      optim::SGD opt(b.params(), {.lr = 0.1});
      GradScaler scaler({.init_scale = scale, .max_scale = 3e38});
      manual_seed(5);
      Tensor loss;
      {
        Autocast ac(DType::f16);
        loss = sum(Run{b, mode}(x).to(DType::f32));
      }
      scaler.scale(loss).backward();
      StepResult r = scaler.step(opt);
      scaler.update();
      applied.push_back(r.applied());
      next_scale.push_back(scaler.get_scale());
      TensorList p;
      for (const Tensor& t : b.params()) p.push_back(t.detach().clone());
      after.push_back(p);
    }
    REQUIRE(applied[0] == (scale < 1e6));  // 1e30 overflows f16 gradients
    for (size_t i = 1; i < after.size(); ++i) {
      REQUIRE(applied[i] == applied[0]);
      REQUIRE(next_scale[i] == next_scale[0]);
      require_same(after[i], after[0]);
    }
  }
}

}  // namespace
}  // namespace precis::amp
