// A tiny model's training step under the FLOP counter and the op profiler (ops/profiler.h): the
// counted FLOPs equal the hand count of its Conv2d and Linear layers, forward and backward, and
// its profile names the layers' ops in both directions with times that fit in the step's wall time.
#include <catch2/catch.hpp>

#include <chrono>
#include <string>
#include <vector>

#include "models/nn/nn.h"
#include "ops/functional.h"
#include "ops/profiler.h"
#include "optim/sgd.h"
#include "tensor/factory.h"
#include "tests/support/profiler_testing.h"

using namespace precis;
using precis::testing::find_entry;
using profiler::Direction;

namespace {

// conv 3→4 (3×3, padding 1) on (2, 3, 5, 5), ReLU, flatten, linear 100→10, cross-entropy.
struct TinyStep {
  nn::Sequential model{nn::Conv2d(3, 4, 3, {.padding = 1}), nn::ReLU(), nn::Flatten(), nn::Linear(100, 10)};
  optim::SGD opt{model.parameters(), optim::SGDOptions{.lr = 0.1, .momentum = 0.9}};
  Tensor x = randn({2, 3, 5, 5});
  Tensor y = randint(0, 10, {2});

  void run() {
    opt.zero_grad();
    cross_entropy(model.forward(x), y).backward();
    opt.step();
  }
};

// Forward: conv 2·(2·4·5·5 outputs)·(3·3·3) = 10800, linear 2·2·100·10 = 4000. Backward: the
// input needs no gradient, so the conv computes only its weight gradient (10800); the linear both
// its input's and its weight's (2·4000).
constexpr double kTinyStepFlops = 10800 + 4000 + 10800 + 2 * 4000;

}  // namespace

TEST_CASE("FlopCounter: a Conv2d + Linear model's training step counts the hand-computed FLOPs", "[models][profiler]") {
  TinyStep step;
  for (int i = 0; i < 2; ++i) {  // the same count every step (the optimizer's state appears after the first)
    profiler::FlopCounter counter;
    step.run();
    CHECK(counter.flops() == kTinyStepFlops);
  }
}

TEST_CASE("profiler: a tiny model's step names its ops forward and backward, within the wall time",
          "[models][profiler]") {
  TinyStep step;
  step.run();  // warm-up: the optimizer's state
  profiler::reset();
  profiler::set_enabled(true);
  const auto start = std::chrono::steady_clock::now();
  step.run();
  const double wall = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  profiler::set_enabled(false);
  const std::vector<profiler::Entry> all = profiler::entries();
  const std::string text = profiler::report(1);
  INFO(text);
  for (const char* op : {"conv2d", "relu", "linear", "cross_entropy"}) {
    INFO(op);
    const profiler::Entry* f = find_entry(all, op, Direction::forward);
    const profiler::Entry* b = find_entry(all, op, Direction::backward);
    REQUIRE(f != nullptr);
    REQUIRE(b != nullptr);
    CHECK(f->calls == 1);
    CHECK(b->calls == 1);
  }
  CHECK(find_entry(all, "conv2d", Direction::forward)->flops == 10800);
  CHECK(find_entry(all, "conv2d", Direction::backward)->flops == 10800);
  CHECK(find_entry(all, "linear", Direction::backward)->flops == 8000);
  // The optimizer's fused step runs outside backward; the leaves' gradients are accumulated in it.
  CHECK(find_entry(all, "sgd_step", Direction::forward) != nullptr);
  CHECK(find_entry(all, "AccumulateGrad", Direction::backward) != nullptr);
  double sum = 0, flops = 0;
  for (const profiler::Entry& e : all) {
    CHECK(e.total_ms >= 0);
    sum += e.total_ms;
    flops += e.flops;
  }
  CHECK(flops == kTinyStepFlops);
  CHECK(sum <= wall);
  CHECK(sum <= profiler::wall_ms());
  CHECK(profiler::wall_ms() <= wall * 1.5 + 5);  // on only around the step
  CHECK(text.find("| conv2d | backward | 1 |") != std::string::npos);
}
