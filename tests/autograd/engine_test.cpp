#include <catch2/catch.hpp>

#include "autograd/engine.h"
#include "autograd/grad_mode.h"
#include "ops/functional.h"
#include "tests/support/tensor_testing.h"

namespace precis {
namespace {

using autograd::TensorList;

Tensor vec(std::vector<double> v) { return from_vector<double>(v).requires_grad_(); }

TEST_CASE("backward of a small expression gives the analytic gradient", "[autograd]") {
  Tensor x = vec({1.0, -2.0, 3.0});
  Tensor y = sum(x * x + x * 3.0);  // dy/dx = 2x + 3
  y.backward();
  CHECK(x.grad().to_vector<double>() == std::vector<double>{5.0, -1.0, 9.0});
}

TEST_CASE("gradients from several paths are summed (diamond)", "[autograd]") {
  Tensor x = vec({2.0});
  Tensor a = x * 3.0, b = x * x;
  Tensor y = sum(a * b);  // 3x^3 → 9x^2
  y.backward();
  CHECK(x.grad().item<double>() == Approx(36.0));
}

TEST_CASE("grad accumulates across backward calls until reset", "[autograd]") {
  Tensor x = vec({1.0, 2.0});
  sum(x * 2.0).backward();
  sum(x * 2.0).backward();
  CHECK(x.grad().to_vector<double>() == std::vector<double>{4.0, 4.0});
  x.set_grad(Tensor());
  CHECK_FALSE(x.grad().defined());
}

TEST_CASE("a second backward needs retain_graph", "[autograd]") {
  Tensor x = vec({1.0, 2.0});
  Tensor y = sum(x * x);
  y.backward(Tensor(), /*retain_graph=*/true);
  y.backward();
  CHECK(x.grad().to_vector<double>() == std::vector<double>{4.0, 8.0});
  CHECK_THROWS_AS(y.backward(), StateError);
}

TEST_CASE("no_grad records nothing and requires_grad propagates", "[autograd]") {
  Tensor x = vec({1.0});
  Tensor c = from_vector<double>({2.0});
  CHECK((x * c).requires_grad());
  CHECK_FALSE((c * c).requires_grad());
  {
    NoGradGuard guard;
    CHECK_FALSE(is_grad_enabled());
    Tensor y = x * c;
    CHECK_FALSE(y.requires_grad());
    CHECK(y.grad_fn() == nullptr);
  }
  CHECK(is_grad_enabled());
  CHECK(x.is_leaf());
  CHECK_FALSE((x * c).is_leaf());
}

TEST_CASE("backward from a non-scalar needs an explicit gradient", "[autograd]") {
  Tensor x = vec({1.0, 2.0});
  Tensor y = x * 2.0;
  CHECK_THROWS_AS(y.backward(), StateError);
  y.backward(from_vector<double>({1.0, 10.0}));
  CHECK(x.grad().to_vector<double>() == std::vector<double>{2.0, 20.0});
  Tensor c = from_vector<double>({1.0});
  CHECK_THROWS_AS(c.backward(), StateError);  // does not require grad
}

TEST_CASE("requires_grad_ is for floating leaves only", "[autograd]") {
  Tensor x = vec({1.0});
  Tensor y = x * 2.0;
  CHECK_THROWS_AS(y.requires_grad_(), StateError);
  CHECK_THROWS_AS(from_vector<int64_t>({1}).requires_grad_(), DTypeError);
  CHECK_FALSE(x.detach().requires_grad());
  CHECK(x.detach().requires_grad_().is_leaf());
}

TEST_CASE("modifying a saved tensor in place is detected at backward", "[autograd]") {
  Tensor x = vec({1.0, 2.0});
  Tensor a = x * 1.0;
  Tensor y = sum(a * a);  // saves a
  {
    NoGradGuard guard;
    a.fill_(5.0);
  }
  PRECIS_REQUIRE_THROWS_WITH_ALL(y.backward(), StateError, "modified by an in-place operation", "version");
}

TEST_CASE("in-place ops on tensors that require grad are refused under grad mode", "[autograd]") {
  Tensor x = vec({1.0});
  CHECK_THROWS_AS(x.fill_(2.0), StateError);
  NoGradGuard guard;
  x.fill_(2.0);
  CHECK(x.item<double>() == 2.0);
}

TEST_CASE("tensor hooks see and may replace gradients", "[autograd]") {
  Tensor x = vec({1.0, 2.0});
  int leaf_calls = 0;
  const int h = x.register_hook([&](const Tensor& g) {
    ++leaf_calls;
    return g * 2.0;
  });
  Tensor mid = x * 3.0;
  Tensor seen;
  mid.register_hook([&](const Tensor& g) {
    seen = g;
    return Tensor();  // keep it
  });
  sum(mid).backward();
  CHECK(leaf_calls == 1);
  CHECK(seen.to_vector<double>() == std::vector<double>{1.0, 1.0});
  CHECK(x.grad().to_vector<double>() == std::vector<double>{6.0, 6.0});
  x.remove_hook(h);
  x.set_grad(Tensor());
  sum(x * 3.0).backward();
  CHECK(x.grad().to_vector<double>() == std::vector<double>{3.0, 3.0});
}

TEST_CASE("post-accumulate hooks run after .grad is set", "[autograd]") {
  Tensor x = vec({1.0});
  double grad_in_hook = 0;
  x.register_post_accumulate_grad_hook([&](const Tensor& t) { grad_in_hook = t.grad().item<double>(); });
  sum(x * 4.0).backward();
  CHECK(grad_in_hook == 4.0);
  Tensor y = x * 1.0;
  CHECK_THROWS_AS(y.register_post_accumulate_grad_hook([](const Tensor&) {}), StateError);
}

TEST_CASE("retain_grad keeps the gradient of an intermediate", "[autograd]") {
  Tensor x = vec({1.0, 2.0});
  Tensor mid = x * x;
  mid.retain_grad();
  sum(mid * 5.0).backward();
  CHECK(mid.grad().to_vector<double>() == std::vector<double>{5.0, 5.0});
}

TEST_CASE("autograd::grad returns gradients without touching .grad", "[autograd]") {
  Tensor x = vec({1.0, 2.0});
  Tensor z = vec({3.0});
  Tensor y = sum(x * x);
  TensorList g = autograd::grad({y}, {x}, {}, /*retain_graph=*/true);
  CHECK(g[0].to_vector<double>() == std::vector<double>{2.0, 4.0});
  CHECK_FALSE(x.grad().defined());
  CHECK_THROWS_AS(autograd::grad({y}, {z}, {}, true), StateError);
  TensorList u = autograd::grad({y}, {z}, {}, true, /*allow_unused=*/true);
  CHECK_FALSE(u[0].defined());
}

TEST_CASE("gradients reaching an f32 leaf through an f64 computation arrive as f32", "[autograd]") {
  Tensor x = from_vector<float>({1.0f, 2.0f}).requires_grad_();
  Tensor y = sum(x.to(DType::f64) * 2.0);
  y.backward();
  CHECK(x.grad().dtype() == DType::f32);
  CHECK(x.grad().to_vector<float>() == std::vector<float>{2.0f, 2.0f});
}

TEST_CASE("a root gradient of another dtype is cast to the root's, as every gradient the engine passes on",
          "[autograd]") {
  // PyTorch casts it; before, an f64 gradient for an f32 root left f64 in .grad (and an f32 one
  // for an f16 root left unrounded f32 values there).
  Tensor w = from_vector<float>({1.0f, 2.0f, 3.0f}).requires_grad_();
  w.backward(from_vector<double>({0.1, 0.1, 0.1}));
  CHECK(w.grad().dtype() == DType::f32);
  CHECK(w.grad().to_vector<float>() == std::vector<float>(3, 0.1f));
  Tensor h = from_vector<float>({1.0f, 2.0f}).to(DType::f16).requires_grad_();
  h.backward(from_vector<float>({0.1f, 0.2f}));
  CHECK(h.grad().dtype() == DType::f16);
  CHECK(h.grad().to(DType::f32).to_vector<float>() ==
        from_vector<float>({0.1f, 0.2f}).to(DType::f16).to(DType::f32).to_vector<float>());
}

TEST_CASE("a gradient hook that changes the shape, dtype or device is an error naming the hook", "[autograd]") {
  // PyTorch: "hook ... has changed the size of value". Before, a leaf's .grad became whatever
  // the hook returned (a 0-d sum, an f64 tensor) and the optimizer failed later, far from the cause.
  Tensor x = vec({1.0, 2.0, 3.0});
  const int h1 = x.register_hook([](const Tensor& g) { return sum(g); });
  PRECIS_REQUIRE_THROWS_WITH_ALL(sum(x * x).backward(), ShapeError, "gradient hook", "leaf");
  x.remove_hook(h1);
  x.register_hook([](const Tensor& g) { return g.to(DType::f32); });
  CHECK_THROWS_AS(sum(x * x).backward(), DTypeError);
  Tensor y = vec({1.0, 2.0});
  Tensor mid = y * 2.0;
  mid.register_hook([](const Tensor& g) { return sum(g); });
  PRECIS_REQUIRE_THROWS_WITH_ALL(sum(mid * mid).backward(), ShapeError, "gradient hook", "output 0 of");
}

TEST_CASE("autograd::grad applies a leaf input's hooks and runs only the graph that leads to its inputs",
          "[autograd]") {
  // PyTorch's exec_info: before, grad() ignored a leaf input's hooks (2x instead of 4x), ran every
  // node below the outputs (hooks and retain_grad of unrelated tensors fired, their saved tensors
  // were freed, and an unrelated in-place change was an error).
  Tensor x = vec({1.0, 2.0, 3.0});
  x.register_hook([](const Tensor& g) { return g * 2.0; });
  CHECK(autograd::grad({sum(x * x)}, {x})[0].to_vector<double>() == std::vector<double>{4.0, 8.0, 12.0});

  Tensor a = vec({1.0, 2.0, 3.0});
  Tensor h1 = a * a;
  h1.retain_grad();
  int calls = 0;
  h1.register_hook([&](const Tensor& g) {
    ++calls;
    return g;
  });
  Tensor h2 = h1 * 3.0;
  CHECK(autograd::grad({sum(h2)}, {h2})[0].to_vector<double>() == std::vector<double>(3, 1.0));
  CHECK(calls == 0);
  CHECK_FALSE(h1.grad().defined());
  sum(h1 * 1.0).backward();  // h1's graph was not run, so its saved tensors are still there
  CHECK(a.grad().to_vector<double>() == std::vector<double>{2.0, 4.0, 6.0});

  Tensor b = vec({1.0, 2.0});
  Tensor c = vec({3.0, 4.0});
  Tensor saved = c * 1.0;
  Tensor unrelated = saved * saved;  // saves `saved`
  Tensor out = sum(b * 3.0) + sum(unrelated);
  {
    NoGradGuard no_grad;
    saved += 1.0;  // only the branch to c would read it
  }
  CHECK(autograd::grad({out}, {b})[0].to_vector<double>() == std::vector<double>{3.0, 3.0});
}

TEST_CASE("casting a tensor that requires grad to an integer dtype gives one that does not", "[autograd]") {
  // PyTorch's x.long(): bookkeeping beside the graph (it was a DTypeError asking for detach()).
  Tensor x = vec({1.5, -2.5});
  Tensor i = (x * 2.0).to(DType::i64);
  CHECK(i.dtype() == DType::i64);
  CHECK_FALSE(i.requires_grad());
  CHECK(i.to_vector<int64_t>() == std::vector<int64_t>{3, -5});
  sum(x * 3.0).backward();
  CHECK(x.grad().to_vector<double>() == std::vector<double>{3.0, 3.0});
}

TEST_CASE("a very long chain runs backward and is destroyed without deep recursion", "[autograd]") {
  Tensor x = vec({1.0});
  Tensor y = x;
  for (int i = 0; i < 200000; ++i) y = y.clone();
  y.backward();
  CHECK(x.grad().item<double>() == 1.0);
  y = Tensor();  // frees the 200k-node chain
  SUCCEED();
}

}  // namespace
}  // namespace precis
