// In-place writes under grad mode (x += y, x *= w, copy_, fill_ on tensors in a graph): the
// written tensor takes a new history, as PyTorch's rebase_history. Expected values are PyTorch
// 2.15's for the same programs (float64, CPU).
#include <catch2/catch.hpp>

#include "autograd/engine.h"
#include "autograd/grad_mode.h"
#include "autograd/node.h"
#include "ops/functional.h"
#include "tensor/factory.h"
#include "tests/support/tensor_testing.h"

namespace precis {
namespace {

using Values = std::vector<double>;

Tensor vec(Values v) { return from_vector<double>(v).requires_grad_(); }
Values values(const Tensor& t) { return t.to_vector<double>(); }

TEST_CASE("x += y on a tensor in the graph: the residual add of a ResNet block", "[autograd][inplace]") {
  Tensor x = vec({1.0, -2.0, 3.0}), w = vec({0.5, 4.0, -1.0});
  Tensor out = x * w;
  out += x;  // identity
  CHECK(out.grad_fn()->name() == "add_backward");
  sum(out * out).backward();  // d/dx 2(xw + x)(w + 1), d/dw 2(xw + x)x
  CHECK(values(x.grad()) == Values{4.5, -100.0, 0.0});
  CHECK(values(w.grad()) == Values{3.0, 40.0, 0.0});
  CHECK(values(out) == Values{1.5, -10.0, 0.0});
}

TEST_CASE("a plain tensor accumulating values that require grad takes their history", "[autograd][inplace]") {
  Tensor x = vec({1.0, -2.0, 3.0});
  Tensor acc = zeros({3}, {.dtype = DType::f64});
  for (int i = 1; i <= 3; ++i) acc += x * static_cast<double>(i);
  REQUIRE(acc.requires_grad());
  REQUIRE_FALSE(acc.is_leaf());
  sum(acc).backward();
  CHECK(values(x.grad()) == Values{6.0, 6.0, 6.0});
}

TEST_CASE("x *= w and x /= w keep x's old values for w's gradient", "[autograd][inplace]") {
  Tensor x = vec({1.0, -2.0, 3.0}), w = vec({0.5, 4.0, -1.0});
  Tensor y = x * 2.0;
  std::vector<Values> seen;  // a hook registered before the write sees the old version's gradient
  y.register_hook([&](const Tensor& g) {
    seen.push_back(values(g));
    return Tensor();
  });
  y *= w;
  CHECK(y.grad_fn()->name() == "mul_backward");
  sum(y * y).backward();
  CHECK(seen == std::vector<Values>{{1.0, -128.0, 12.0}});
  CHECK(values(x.grad()) == Values{2.0, -256.0, 24.0});
  CHECK(values(w.grad()) == Values{4.0, 128.0, -72.0});

  x.set_grad(Tensor());
  w.set_grad(Tensor());
  Tensor z = x * 2.0;
  z /= w;
  sum(z * z).backward();
  CHECK(values(x.grad()) == Values{32.0, -1.0, 24.0});
  CHECK(values(w.grad()) == Values{-64.0, -0.5, 72.0});
}

TEST_CASE("x *= x and x /= x read a copy of x (PyTorch refuses the first at backward)", "[autograd][inplace]") {
  Tensor x = vec({1.0, -2.0, 3.0});
  Tensor y = x * 2.0;
  y *= y;  // 4x²
  sum(y).backward();
  CHECK(values(x.grad()) == Values{8.0, -16.0, 24.0});
  CHECK(values(y) == Values{4.0, 16.0, 36.0});
  Tensor z = x * 2.0;
  z /= z;
  CHECK(values(z) == Values{1.0, 1.0, 1.0});
  x.set_grad(Tensor());
  sum(z).backward();
  CHECK(values(x.grad()) == Values{0.0, 0.0, 0.0});
}

TEST_CASE("x *= o where o is a view of x's memory or a detached alias: o's own values and graph",
          "[autograd][inplace]") {
  // A user study: o was replaced by a copy of x, so x *= x.t() squared x and x *= x.detach()
  // differentiated through the detached operand. PyTorch refuses both; precis computes them.
  Tensor x = from_vector<double>({1, 2, 3, 4}, {2, 2}).requires_grad_();
  Tensor y = x * 1.0;
  y *= y.t();  // x ⊙ xᵀ: d/dx sum = 2·xᵀ
  CHECK(values(y) == Values{1, 6, 6, 16});
  sum(y).backward();
  CHECK(values(x.grad()) == Values{2, 6, 4, 8});
  Tensor v = vec({2.0, 3.0, 4.0});
  Tensor a = v * 1.0;
  a *= a.narrow(0, 0, 1);
  CHECK(values(a) == Values{4, 6, 8});
  Tensor p = v * 1.0;
  p *= p.detach();  // p·c with c constant: the gradient is c
  sum(p).backward();
  CHECK(values(v.grad()) == Values{2, 3, 4});
  v.set_grad(Tensor());
  Tensor q = v * 1.0;
  q /= q.detach();
  sum(q).backward();
  CHECK(values(v.grad()) == Values{0.5, 1.0 / 3.0, 0.25});
}

TEST_CASE("copy_ from a tensor in the graph: the destination gets a node of its own", "[autograd][inplace]") {
  // It shared the source's node (a user study): a gradient reaching one reached the other too.
  Tensor x = vec({1.0, 2.0, 3.0});
  Tensor y = x * 2.0;
  Tensor buf = zeros({3}, {.dtype = DType::f64});
  buf.copy_(y);
  CHECK(buf.grad_fn()->name() == "copy_backward");
  const Tensor loss = sum(buf * 2.0) + sum(y * 3.0);
  const autograd::TensorList g = autograd::grad({loss}, {buf, y});
  CHECK(values(g[0]) == Values{2, 2, 2});
  CHECK(values(g[1]) == Values{5, 5, 5});
}

TEST_CASE("copy_ from a source overlapping the destination reads the source first", "[autograd][inplace]") {
  Tensor a = from_vector<double>({1, 2, 3, 4}, {2, 2});
  a.copy_(a.t());
  CHECK(values(a) == Values{1, 3, 2, 4});
  Tensor b = from_vector<double>({1, 2, 3, 4});
  b.narrow(0, 1, 3).copy_(b.narrow(0, 0, 3));
  CHECK(values(b) == Values{1, 1, 2, 3});
}

TEST_CASE("copy_ into a tensor: the source gets the gradient, summed over broadcast dims and cast back",
          "[autograd][inplace]") {
  Tensor b = from_vector<float>({1.0f, 2.0f, 3.0f}).requires_grad_();
  Tensor buf = zeros({2, 3}, {.dtype = DType::f64});
  buf.copy_(b);
  CHECK(buf.grad_fn()->name() == "copy_backward");
  sum(buf * arange(6, {.dtype = DType::f64}).view({2, 3})).backward();
  REQUIRE(b.grad().dtype() == DType::f32);
  CHECK(b.grad().to_vector<float>() == std::vector<float>{3.0f, 5.0f, 7.0f});
}

TEST_CASE("copy_ and fill_ over a tensor in the graph: its old history gets zeros (PyTorch's CopyBackwards)",
          "[autograd][inplace]") {
  Tensor x = vec({1.0, -2.0, 3.0}), z = vec({5.0, 6.0, 7.0});
  Tensor y = x * 2.0;
  y.copy_(z);
  sum(y).backward();
  CHECK(values(x.grad()) == Values{0.0, 0.0, 0.0});
  CHECK(values(z.grad()) == Values{1.0, 1.0, 1.0});
  x.set_grad(Tensor());
  Tensor f = x * 2.0;
  f.fill_(3.0);
  REQUIRE(f.requires_grad());
  sum(f).backward();
  CHECK(values(x.grad()) == Values{0.0, 0.0, 0.0});
}

TEST_CASE("retain_grad follows the tensor to its new history", "[autograd][inplace]") {
  Tensor x = vec({1.0, -2.0, 3.0});
  Tensor y = x * 2.0;
  y.retain_grad();
  y += 1.0;
  sum(y * y).backward();
  CHECK(values(y.grad()) == Values{6.0, -6.0, 14.0});
  CHECK(values(x.grad()) == Values{12.0, -12.0, 28.0});
}

TEST_CASE("an f16 tensor += an f32 one that requires grad: the gradient reaches it in f32", "[autograd][inplace]") {
  Tensor h = ones({3}, {.dtype = DType::f16});
  Tensor w = from_vector<float>({0.1f, 0.2f, 0.3f}).requires_grad_();
  h += w;
  REQUIRE(h.dtype() == DType::f16);
  sum(h.to(DType::f32) * 3.0).backward();
  REQUIRE(w.grad().dtype() == DType::f32);
  CHECK(w.grad().to_vector<float>() == std::vector<float>{3.0f, 3.0f, 3.0f});
}

TEST_CASE("in-place writes that stay refused under grad mode", "[autograd][inplace]") {
  Tensor x = vec({1.0, -2.0, 3.0});
  // A leaf that requires grad: its .grad would not be the gradient of what it then holds.
  PRECIS_REQUIRE_THROWS_WITH_ALL(x += 1.0, StateError, "operator+=", "leaf that requires grad", "NoGradGuard");
  // A view: the tensor it views would need a new history too (PyTorch's CopySlices).
  Tensor y = x * 2.0;
  PRECIS_REQUIRE_THROWS_WITH_ALL(y.narrow(0, 0, 2).fill_(0.0), StateError, "fill_", "view", "clone()");
  Tensor plain = zeros({4}, {.dtype = DType::f64});
  PRECIS_REQUIRE_THROWS_WITH_ALL(plain.narrow(0, 1, 3).copy_(x), StateError, "copy_", "view",
                                 "a value that requires grad");
  // An expanded tensor: several elements share memory (PyTorch refuses it too); the message names
  // the operator written, not the copy inside it.
  Tensor expanded = zeros({1, 3}, {.dtype = DType::f64}).expand({4, 3});
  PRECIS_REQUIRE_THROWS_WITH_ALL(expanded += ones({4, 3}, {.dtype = DType::f64}), ValueError, "operator+=",
                                 "expanded", "clone()");
  // Nothing was written by the refused calls.
  CHECK(values(y) == Values{2.0, -4.0, 6.0});
  CHECK(values(plain) == Values{0.0, 0.0, 0.0, 0.0});
}

TEST_CASE("a view taken before an in-place write under grad mode is refused when used", "[autograd][inplace]") {
  Tensor x = vec({1.0, -2.0, 3.0});
  Tensor y = x * 2.0;
  Tensor v = y.narrow(0, 0, 2);
  y += x;
  // v shows the new values but its grad_fn is the replaced history: PyTorch regenerates it.
  PRECIS_REQUIRE_THROWS_WITH_ALL(v * 2.0, StateError, "view", "modified in place", "again");
  PRECIS_REQUIRE_THROWS_WITH_ALL(v.backward(ones({2}, {.dtype = DType::f64})), StateError, "view");
  Tensor again = y.narrow(0, 0, 2);
  sum(again).backward();
  CHECK(values(x.grad()) == Values{3.0, 3.0, 0.0});
  // A view that required no grad is refused too: it would pass the new values on as constants.
  Tensor base = zeros({3}, {.dtype = DType::f64});
  Tensor w = base.narrow(0, 0, 2);
  base += x;
  PRECIS_REQUIRE_THROWS_WITH_ALL(sum(w), StateError, "view");
  {
    NoGradGuard no_grad;  // without grad mode a view is data only
    CHECK(values(sum(w)) == Values{-1.0});
  }
}

TEST_CASE("a tensor an op saved and then modified in place fails at backward, as in PyTorch",
          "[autograd][inplace]") {
  Tensor x = vec({1.0, -2.0, 3.0});
  Tensor y = relu(x * 1.0);  // relu keeps its output for backward
  y += 1.0;
  PRECIS_REQUIRE_THROWS_WITH_ALL(sum(y).backward(), StateError, "modified by an in-place operation");
}

TEST_CASE("in-place writes without grad mode or without tensors requiring grad record nothing",
          "[autograd][inplace]") {
  Tensor x = vec({1.0, -2.0, 3.0});
  {
    NoGradGuard no_grad;
    x += 1.0;  // what optimizers do
  }
  CHECK(values(x) == Values{2.0, -1.0, 4.0});
  CHECK(x.is_leaf());
  Tensor p = zeros({3}, {.dtype = DType::f64});
  p += ones({3}, {.dtype = DType::f64});
  p.narrow(0, 0, 1).fill_(5.0);  // a view without any gradient involved
  CHECK_FALSE(p.requires_grad());
  CHECK(values(p) == Values{5.0, 1.0, 1.0});
  Tensor v = p.narrow(0, 1, 2);
  p += 1.0;  // no history given: v stays usable
  CHECK(values(v * 1.0) == Values{2.0, 2.0});
}

}  // namespace
}  // namespace precis
