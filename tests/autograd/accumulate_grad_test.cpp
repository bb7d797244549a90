// AccumulateGrad keeps .grad's identity: a second backward adds into the same tensor in place
// (what gradient buckets rely on), and falls back to a new tensor exactly where an in-place
// write would be wrong or visible where it must not be.
#include <catch2/catch.hpp>

#include "autograd/autograd_meta.h"
#include "autograd/engine.h"
#include "autograd/grad_mode.h"
#include "autograd/node.h"
#include "ops/functional.h"
#include "tensor/factory.h"
#include "tests/support/tensor_testing.h"

namespace precis {
namespace {

using Vec = std::vector<double>;

Tensor leaf(Vec v, DType dtype = DType::f64) { return from_vector<double>(v).to(dtype).requires_grad_(); }

// sum(x * c): the gradient of x is c.
void backward_with(const Tensor& x, Vec c) { sum(mul(x, from_vector<double>(c).to(x.dtype()))).backward(); }

const TensorImpl* grad_impl(const Tensor& x) { return x.grad().impl_ptr().get(); }

TEST_CASE("AccumulateGrad: .grad keeps its TensorImpl and memory across backwards", "[autograd]") {
  for (DType dtype : {DType::f64, DType::f32, DType::bf16}) {
    INFO(dtype_name(dtype));
    Tensor x = leaf({1, 2, 3}, dtype);
    backward_with(x, {1, 2, 4});  // sums exact in bf16 too
    const TensorImpl* first = grad_impl(x);
    const void* data = x.grad().data_ptr();
    const uint32_t version = x.grad().version();
    backward_with(x, {8, 16, 32});
    CHECK(grad_impl(x) == first);
    CHECK(x.grad().data_ptr() == data);
    CHECK(x.grad().version() == version + 1);  // an in-place write, visible to saved-tensor checks
    backward_with(x, {64, 128, 256});
    CHECK(grad_impl(x) == first);
    CHECK(x.grad().to(DType::f64).to_vector<double>() == Vec{73, 146, 292});
  }
}

TEST_CASE("AccumulateGrad: a held .grad and a zeroed .grad see later accumulations (PyTorch)", "[autograd]") {
  Tensor x = leaf({1, 2});
  backward_with(x, {1, 1});
  Tensor held = x.grad();
  x.grad().zero_();  // Optimizer::zero_grad(set_to_none = false)
  backward_with(x, {3, 4});
  CHECK(held.impl_ptr() == x.grad().impl_ptr());
  CHECK(held.to_vector<double>() == Vec{3, 4});
}

TEST_CASE("AccumulateGrad: gradients that are views into one flat buffer accumulate there", "[autograd]") {
  // The data-parallel layout: each parameter's .grad a view into one bucket, all-reduced at once.
  Tensor a = leaf({1, 2}), b = leaf({1, 2, 3});
  Tensor bucket = zeros({5}, {.dtype = DType::f64});
  a.set_grad(bucket.narrow(0, 0, 2));
  b.set_grad(bucket.narrow(0, 2, 3));
  sum(mul(a, from_vector<double>({1, 2}))).backward();
  sum(mul(b, from_vector<double>({3, 4, 5}))).backward();
  CHECK(bucket.to_vector<double>() == Vec{1, 2, 3, 4, 5});
  CHECK(a.grad().storage() == bucket.storage());
  CHECK(b.grad().storage() == bucket.storage());
}

TEST_CASE("AccumulateGrad: a first gradient whose memory another gradient shares is copied", "[autograd]") {
  // add's backward hands the same gradient G to both operands; each reshape's backward returns a
  // view of G. Stealing both views would make a.grad and b.grad share memory, and the next
  // in-place accumulation into one would change the other.
  Tensor a = leaf({1, 2, 3, 4}).view({2, 2}).detach().requires_grad_();
  Tensor b = leaf({5, 6, 7, 8}).view({2, 2}).detach().requires_grad_();
  auto run = [&] {
    Tensor y = add(a.reshape({4}), b.reshape({4}));
    sum(mul(y, from_vector<double>({1, 2, 3, 4}))).backward();
  };
  run();
  CHECK(a.grad().storage() != b.grad().storage());
  run();
  CHECK(a.grad().to_vector<double>() == Vec{2, 4, 6, 8});
  CHECK(b.grad().to_vector<double>() == Vec{2, 4, 6, 8});
}

TEST_CASE("AccumulateGrad: a first gradient someone else still holds is copied", "[autograd]") {
  Tensor x = leaf({1, 2});
  Tensor kept;
  x.register_hook([&](const Tensor& g) {
    kept = g;
    return Tensor();
  });
  backward_with(x, {3, 4});
  CHECK(x.grad().storage() != kept.storage());
  backward_with(x, {1, 1});
  CHECK(kept.to_vector<double>() == Vec{1, 1});  // the hook's own copy of the second gradient
  CHECK(x.grad().to_vector<double>() == Vec{4, 5});
}

TEST_CASE("AccumulateGrad: no in-place write where it would be wrong", "[autograd]") {
  // x's .grad is set to user_grad = (10, 20); a backward of (1, 1) must leave it untouched and
  // give x a new .grad (11, 21).
  auto check_not_written = [](Tensor x, Tensor user_grad) {
    x.set_grad(user_grad);
    backward_with(x, {1, 1});
    CHECK(grad_impl(x) != user_grad.impl_ptr().get());
    CHECK(user_grad.to_vector<double>() == Vec{10, 20});
    CHECK(x.grad().to_vector<double>() == Vec{11, 21});
  };
  SECTION("a .grad that requires grad is replaced, not written") {
    check_not_written(leaf({1, 2}), from_vector<double>({10, 20}).requires_grad_());
  }
  SECTION("a .grad of another dtype gets the promoted out-of-place sum") {
    check_not_written(leaf({1, 2}, DType::f32), from_vector<double>({10, 20}));
  }
  SECTION("an expanded .grad (one element seen twice) is not written through") {
    Tensor x = leaf({1, 2});
    Tensor one = from_vector<double>({5});
    x.set_grad(one.expand({2}));
    backward_with(x, {1, 2});
    CHECK(one.to_vector<double>() == Vec{5});
    CHECK(x.grad().to_vector<double>() == Vec{6, 7});
    CHECK(x.grad().is_contiguous());
  }
  SECTION("a transposed .grad is not written through") {
    Tensor x = leaf({1, 2, 3, 4}).view({2, 2}).detach().requires_grad_();
    Tensor base = from_vector<double>({0, 0, 0, 0}).view({2, 2});
    x.set_grad(base.t());
    sum(mul(x, from_vector<double>({1, 2, 3, 4}).view({2, 2}))).backward();
    CHECK(base.to_vector<double>() == Vec{0, 0, 0, 0});
    CHECK(x.grad().to_vector<double>() == Vec{1, 2, 3, 4});
  }
  SECTION("with grad mode on (create_graph) the sum is out of place") {
    // The engine runs AccumulateGrad with grad mode off; a pass that records the backward graph
    // would run it with grad mode on, where an in-place write could not be differentiated.
    Tensor x = leaf({1, 2});
    backward_with(x, {1, 1});
    const TensorImpl* before = grad_impl(x);
    autograd::AccumulateGrad sink(x);
    GradModeGuard on(true);
    sink.apply({from_vector<double>({2, 3})});
    CHECK(grad_impl(x) != before);
    CHECK(x.grad().to_vector<double>() == Vec{3, 4});
  }
}

}  // namespace
}  // namespace precis
