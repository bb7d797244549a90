// The op profiler and the FLOP counter (ops/profiler.h): FLOP counts of matmul, linear and conv2d
// against hand-computed ones, forward and backward; profiles that name the ops with both
// directions, count nested kernel calls once and sum to at most the wall time; nothing recorded
// when off.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "autograd/engine.h"
#include "ops/functional.h"
#include "ops/profiler.h"
#include "tensor/factory.h"
#include "tests/support/profiler_testing.h"

using namespace precis;
using precis::testing::find_entry;
using profiler::Direction;

namespace {

Tensor leaf(const Shape& sizes) { return randn(sizes).requires_grad_(true); }

// Runs `fn` with the profiler on from a reset, and turns it off again.
std::vector<profiler::Entry> profile(const std::function<void()>& fn) {
  profiler::reset();
  profiler::set_enabled(true);
  fn();
  profiler::set_enabled(false);
  return profiler::entries();
}

}  // namespace

TEST_CASE("FlopCounter: matmul counts 2·M·N·K forward and both operand gradients backward", "[ops][profiler]") {
  const Tensor a = leaf({2, 3}), b = leaf({3, 4});
  profiler::FlopCounter counter;
  const Tensor y = matmul(a, b);
  CHECK(counter.flops() == 2.0 * 2 * 4 * 3);
  y.backward(ones({2, 4}));
  // grad_a = g·bᵀ (2×4·4×3) and grad_b = aᵀ·g (3×2·2×4): each the forward's size.
  CHECK(counter.flops() == 3 * 48.0);
}

TEST_CASE("FlopCounter: batched matmul, linear and a gradient for one operand only", "[ops][profiler]") {
  profiler::FlopCounter counter;
  (void)matmul(randn({5, 2, 3}), randn({5, 3, 4}));
  CHECK(counter.flops() == 5 * 48.0);

  profiler::FlopCounter linear_counter;
  const Tensor x = randn({4, 7, 5});  // no gradient for the input: only the weight's is computed
  const Tensor w = leaf({3, 5}), bias = leaf({3});
  const Tensor y = linear(x, w, bias);
  const double forward = 2.0 * 28 * 5 * 3;
  CHECK(linear_counter.flops() == forward);
  sum(y).backward();
  CHECK(linear_counter.flops() == 2 * forward);
  // Counters nest: the outer one saw everything.
  CHECK(counter.flops() == 5 * 48.0 + 2 * forward);
}

TEST_CASE("FlopCounter: conv2d forward, input and weight gradients, groups and stride", "[ops][profiler]") {
  // (2, 3, 5, 5) * (4, 3, 3, 3), padding 1: out (2, 4, 5, 5), 27 multiply-adds per output element.
  const Tensor x = leaf({2, 3, 5, 5}), w = leaf({4, 3, 3, 3});
  profiler::FlopCounter counter;
  const Tensor y = conv2d(x, w, Tensor(), {1, 1}, {1, 1});
  const double forward = 2.0 * (2 * 4 * 5 * 5) * 27;
  CHECK(counter.flops() == forward);
  sum(y).backward();
  CHECK(counter.flops() == 3 * forward);

  // Groups 2, stride 2, input needing no gradient: out (1, 4, 3, 3), weight (4, 2, 3, 3).
  profiler::FlopCounter grouped;
  const Tensor x2 = randn({1, 4, 6, 6}), w2 = leaf({4, 2, 3, 3});
  sum(conv2d(x2, w2, Tensor(), {2, 2}, {1, 1}, {1, 1}, 2)).backward();
  CHECK(grouped.flops() == 2 * (2.0 * 36 * 18));
}

TEST_CASE("FlopCounter: ops other than matmul, linear and conv2d count nothing, and none count without a counter",
          "[ops][profiler]") {
  const Tensor x = leaf({8, 8});
  {
    profiler::FlopCounter counter;
    sum(relu(mul(softmax(x, -1), x))).backward();
    CHECK(counter.flops() == 0);
  }
  if (!profiler::enabled()) CHECK_FALSE(profiler::counting_flops());
}

TEST_CASE("profiler: forward and backward entries per op, summing to at most the wall time", "[ops][profiler]") {
  const Tensor x = leaf({16, 32}), w = leaf({8, 32}), b = leaf({8});
  const auto all = profile([&] {
    const Tensor loss = sum(relu(linear(x, w, b)));
    loss.backward();
  });
  for (const char* op : {"linear", "relu", "sum"}) {
    INFO(op);
    const profiler::Entry* f = find_entry(all, op, Direction::forward);
    const profiler::Entry* g = find_entry(all, op, Direction::backward);
    REQUIRE(f != nullptr);
    REQUIRE(g != nullptr);
    CHECK(f->calls == 1);
    CHECK(g->calls == 1);
  }
  // The leaves' gradients are accumulated by AccumulateGrad nodes (one per leaf), in backward.
  const profiler::Entry* acc = find_entry(all, "AccumulateGrad", Direction::backward);
  REQUIRE(acc != nullptr);
  CHECK(acc->calls == 3);
  // The matmuls of linear's backward run inside its node: counted there, not as matmul entries.
  CHECK(find_entry(all, "matmul", Direction::backward) == nullptr);
  CHECK(find_entry(all, "linear", Direction::forward)->flops == 2.0 * 16 * 32 * 8);
  CHECK(find_entry(all, "linear", Direction::backward)->flops == 2 * 2.0 * 16 * 32 * 8);
  double sum_ms = 0;
  for (const profiler::Entry& e : all) {
    CHECK(e.total_ms >= 0);
    CHECK(e.calls > 0);
    sum_ms += e.total_ms;
  }
  CHECK(sum_ms <= profiler::wall_ms());
  // Longest first.
  for (size_t i = 1; i < all.size(); ++i) CHECK(all[i - 1].total_ms >= all[i].total_ms);
  const std::string text = profiler::report(1);
  CHECK(text.find("| linear | backward | 1 |") != std::string::npos);
  CHECK(text.find("ms wall") != std::string::npos);
}

TEST_CASE("profiler: a kernel that calls another through the op table is one entry", "[ops][profiler]") {
  const Tensor a = randn({3, 4}), b = randn({5, 4});
  const auto all = profile([&] { (void)cat({a, b}, 0); });  // the cat kernel copies through the copy kernel
  REQUIRE(all.size() == 1);
  CHECK(all[0].name == "cat");
  CHECK(all[0].direction == Direction::forward);
  CHECK(all[0].calls == 1);
}

TEST_CASE("profiler: ops that run the linear kernel as their GEMM are timed in their own rows, with their FLOPs",
          "[ops][profiler]") {
  // linear_gelu and the chunked linear_cross_entropy count their GEMMs' FLOPs in their own rows;
  // the GEMM time must land there too, not in a linear row without FLOPs (GFLOP/s would be wrong
  // in both rows). linear_cross_entropy in f64: its generic path, which runs the linear kernel
  // (the CPU's own kernel, f32 and bf16, makes its GEMMs inside).
  const Tensor x = randn({16, 32}), w = randn({8, 32}), b = randn({8});
  const Tensor x64 = x.to(DType::f64), w64 = w.to(DType::f64), b64 = b.to(DType::f64);
  const Tensor target = from_vector<int64_t>(std::vector<int64_t>(16, 3), {16});
  const auto all = profile([&] {
    (void)linear_gelu(x, w, b);
    (void)linear_cross_entropy(x64, w64, b64, target, {.chunk_rows = 4});
  });
  CHECK(find_entry(all, "linear", Direction::forward) == nullptr);
  for (const char* op : {"linear_gelu", "linear_cross_entropy"}) {
    INFO(op);
    const profiler::Entry* f = find_entry(all, op, Direction::forward);
    REQUIRE(f != nullptr);
    CHECK(f->flops == 2.0 * 16 * 32 * 8);
    CHECK(f->calls >= 1);
    CHECK(f->total_ms > 0);
  }
}

TEST_CASE("profiler: off records nothing, reset drops entries, the wall clock stops when off", "[ops][profiler]") {
  profiler::set_enabled(false);
  profiler::reset();
  (void)exp(randn({4}));
  CHECK(profiler::entries().empty());
  const auto all = profile([] { (void)exp(randn({4})); });
  CHECK(find_entry(all, "exp", Direction::forward) != nullptr);
  const double wall = profiler::wall_ms();
  CHECK(wall >= 0);
  (void)exp(randn({1000}));
  CHECK(profiler::wall_ms() == wall);  // stopped
  profiler::reset();
  CHECK(profiler::entries().empty());
  CHECK(profiler::wall_ms() == 0);
}

// Hidden from discovery; tests/CMakeLists.txt runs it with PRECIS_PROFILE=1 and checks that the
// profile is printed when the process exits.
TEST_CASE("PRECIS_PROFILE=1 turns the profiler on at start-up", "[.profile_env]") {
  REQUIRE(std::getenv("PRECIS_PROFILE") != nullptr);
  CHECK(profiler::enabled());
  const Tensor x = leaf({4, 6});
  sum(tanh(x)).backward();
  const auto all = profiler::entries();
  CHECK(find_entry(all, "tanh", Direction::forward) != nullptr);
  CHECK(find_entry(all, "tanh", Direction::backward) != nullptr);
}
