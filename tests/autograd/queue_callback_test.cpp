// autograd::queue_callback: callbacks run once the current backward pass has run every node, in
// the order queued (including ones queued by callbacks), belong to the innermost pass, are
// dropped when the pass fails, and cannot be queued outside backward.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "autograd/engine.h"
#include "autograd/grad_mode.h"
#include "ops/functional.h"
#include "tests/support/tensor_testing.h"

namespace precis {
namespace {

using Vec = std::vector<double>;

Tensor leaf(Vec v) { return from_vector<double>(v).requires_grad_(); }

TEST_CASE("queue_callback outside backward is a StateError", "[autograd]") {
  try {
    autograd::queue_callback([] {});
    FAIL("expected StateError");
  } catch (const StateError& e) {
    CHECK_THAT(e.what(), Catch::Matchers::Contains("during backward"));
  }
}

TEST_CASE("queued callbacks run after every gradient of the pass is accumulated", "[autograd]") {
  // Three leaves; the callback is queued when the first .grad is accumulated and must see all
  // three, once per backward.
  Tensor a = leaf({1}), b = leaf({2}), c = leaf({3});
  int runs = 0, queued = 0;
  std::vector<bool> seen;
  auto queue_once = [&](const Tensor&) {
    if (queued++ > 0) return;
    autograd::queue_callback([&] {
      ++runs;
      seen = {a.grad().defined(), b.grad().defined(), c.grad().defined()};
      CHECK_FALSE(is_grad_enabled());
    });
  };
  for (const Tensor* t : {&a, &b, &c}) t->register_post_accumulate_grad_hook(queue_once);
  sum(mul(mul(a, b), c)).backward();
  CHECK(runs == 1);
  CHECK(seen == std::vector<bool>{true, true, true});
  queued = 0;
  a.set_grad(Tensor()), b.set_grad(Tensor()), c.set_grad(Tensor());
  sum(mul(mul(a, b), c)).backward();
  CHECK(runs == 2);
  CHECK(seen == std::vector<bool>{true, true, true});
}

TEST_CASE("callbacks run in order, and ones queued by a callback run after those queued before", "[autograd]") {
  Tensor x = leaf({1, 2});
  std::vector<std::string> log;
  Tensor y = mul(x, 2.0);
  y.register_hook([&](const Tensor& g) {
    autograd::queue_callback([&] {
      log.push_back("first");
      autograd::queue_callback([&] {
        log.push_back("queued by first");
        autograd::queue_callback([&] { log.push_back("queued by that one"); });
      });
    });
    autograd::queue_callback([&] { log.push_back("second"); });
    return g;
  });
  sum(y).backward();
  CHECK(log == std::vector<std::string>{"first", "second", "queued by first", "queued by that one"});
  CHECK(x.grad().to_vector<double>() == Vec{2, 2});
}

TEST_CASE("a backward run inside a callback has its own callbacks", "[autograd]") {
  Tensor x = leaf({1}), z = leaf({2});
  std::vector<std::string> log;
  z.register_post_accumulate_grad_hook([&](const Tensor&) {
    autograd::queue_callback([&] { log.push_back("inner callback"); });
  });
  x.register_post_accumulate_grad_hook([&](const Tensor&) {
    autograd::queue_callback([&] {
      log.push_back("outer callback");
      GradModeGuard record(true);  // callbacks run with grad mode off
      sum(mul(z, 3.0)).backward();  // a nested pass
      log.push_back("after the inner pass");
    });
    autograd::queue_callback([&] { log.push_back("outer second"); });
  });
  sum(mul(x, 2.0)).backward();
  CHECK(log == std::vector<std::string>{"outer callback", "inner callback", "after the inner pass", "outer second"});
  CHECK(z.grad().to_vector<double>() == Vec{3});
}

TEST_CASE("autograd::grad runs the callbacks of its pass too", "[autograd]") {
  Tensor x = leaf({1, 2});
  Tensor y = mul(x, 3.0);
  int runs = 0;
  y.register_hook([&](const Tensor& g) {
    autograd::queue_callback([&] { ++runs; });
    return g;
  });
  autograd::TensorList g = autograd::grad({sum(y)}, {x});
  CHECK(runs == 1);
  CHECK(g[0].to_vector<double>() == Vec{3, 3});
}

TEST_CASE("a failing pass drops its callbacks, and a failing callback stops the rest", "[autograd]") {
  SECTION("a node that throws") {
    Tensor x = leaf({1, 2});
    Tensor y = mul(x, x);  // saves x
    int runs = 0;
    y.register_hook([&](const Tensor& g) {
      autograd::queue_callback([&] { ++runs; });
      return g;
    });
    {
      NoGradGuard no_grad;
      x.detach().fill_(5.0);  // bumps the version mul saved: its backward refuses to run
    }
    CHECK_THROWS_AS(sum(y).backward(), StateError);
    CHECK(runs == 0);
    // The failed pass left nothing behind: queueing outside backward is refused again, and a
    // new pass runs only its own callbacks.
    CHECK_THROWS_AS(autograd::queue_callback([] {}), StateError);
    Tensor w = leaf({1});
    int later = 0;
    w.register_post_accumulate_grad_hook([&](const Tensor&) { autograd::queue_callback([&] { ++later; }); });
    sum(w).backward();
    CHECK(later == 1);
    CHECK(runs == 0);
  }
  SECTION("a callback that throws") {
    Tensor x = leaf({1});
    bool after = false;
    x.register_post_accumulate_grad_hook([&](const Tensor&) {
      autograd::queue_callback([] { throw ValueError("callback failed"); });
      autograd::queue_callback([&] { after = true; });
    });
    CHECK_THROWS_WITH(sum(x).backward(), Catch::Matchers::Contains("callback failed"));
    CHECK_FALSE(after);
    CHECK(x.grad().to_vector<double>() == Vec{1});
    CHECK_THROWS_AS(autograd::queue_callback([] {}), StateError);
  }
}

}  // namespace
}  // namespace precis
