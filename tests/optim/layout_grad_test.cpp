// Gradients produced by element-wise ops on permuted (transposed, channels-last) operands reach
// the code that reads gradients as flat memory: the optimizers' fused updates, GradScaler,
// clip_grad_norm_ and checkpoints (safetensors). Each must see the right values, whatever the
// layout of the gradient the backward pass produced or a user set.
#include <catch2/catch.hpp>

#include "amp/grad_scaler.h"
#include "ops/functional.h"
#include "optim/adam.h"
#include "optim/clip_grad.h"
#include "optim/sgd.h"
#include "tensor/factory.h"
#include "tensor/safetensors.h"
#include "tests/support/scratch_dir.h"
#include "tests/support/tensor_testing.h"

using namespace precis;
using namespace precis::optim;
using precis::testing::randn_input;

namespace {

// (2, 5, 3, 4) f32 values stored channels-last.
Tensor channels_last_input(uint64_t seed) {
  return randn_input({2, 3, 4, 5}, false, seed, DType::f64).to(DType::f32).permute({0, 3, 1, 2});
}

// A (2, 5, 3, 4) f32 parameter whose gradient from sum(p * x) is x.
Tensor param(uint64_t seed) { return randn_input({2, 5, 3, 4}, false, seed, DType::f64).to(DType::f32).requires_grad_(true); }

}  // namespace

TEST_CASE("SGD and Adam step on gradients made from channels-last operands", "[optim][layout]") {
  const Tensor x = channels_last_input(1);
  REQUIRE(!mul(x, x).is_contiguous());  // the element-wise result keeps the layout
  Tensor p = param(2), q = param(2);
  const std::vector<float> p0 = p.to_vector<float>();
  SGD sgd({p}, {.lr = 0.5});
  sum(mul(p, x)).backward();
  sgd.step();
  const std::vector<float> xv = x.to_vector<float>(), p1 = p.to_vector<float>();
  for (size_t i = 0; i < p0.size(); ++i) CHECK(p1[i] == p0[i] - 0.5f * xv[i]);
  // Adam on the same gradient, once from backward and once set by hand in the transposed layout
  // (Optimizer::grad_of makes a contiguous copy): identical updates.
  Tensor r = param(2);
  Adam adam_a({q}, {.lr = 0.1}), adam_b({r}, {.lr = 0.1});
  sum(mul(q, x)).backward();
  r.set_grad(mul(x, 1.0));
  REQUIRE(!r.grad().is_contiguous());
  adam_a.step();
  adam_b.step();
  CHECK(q.to_vector<float>() == r.to_vector<float>());
  CHECK(q.to_vector<float>() != p0);
}

TEST_CASE("GradScaler and clip_grad_norm_ on gradients made from channels-last operands", "[optim][layout]") {
  const Tensor x = channels_last_input(3);
  Tensor p = param(4), q = param(4);
  SGD opt_p({p}, {.lr = 1.0}), opt_q({q}, {.lr = 1.0});
  amp::GradScaler scaler({.init_scale = 8.0});
  scaler.scale(sum(mul(p, x))).backward();
  scaler.unscale_(opt_p);
  CHECK(p.grad().to_vector<float>() == x.to_vector<float>());  // 8·x / 8 is exact
  scaler.step(opt_p);
  scaler.update();
  q.set_grad(mul(x, 1.0));  // a user-set channels-last gradient
  opt_q.step();
  CHECK(p.to_vector<float>() == q.to_vector<float>());
  // The clipped norm of a channels-last gradient equals that of its contiguous copy.
  Tensor a = param(5), b = param(5);
  a.set_grad(mul(x, 3.0));
  b.set_grad(mul(x.contiguous(), 3.0));
  const double na = clip_grad_norm_({a}, 1.0).item<double>(), nb = clip_grad_norm_({b}, 1.0).item<double>();
  CHECK(na == nb);
  CHECK(a.grad().to_vector<float>() == b.grad().to_vector<float>());
}

TEST_CASE("a checkpoint of transposed element-wise results loads back the same values", "[optim][layout]") {
  const Tensor a = randn_input({40, 30}, false, 6, DType::f32).t(), b = randn_input({40, 30}, false, 7, DType::f32).t();
  const Tensor sum_t = add(a, b);
  REQUIRE(!sum_t.is_contiguous());
  const Tensor x = channels_last_input(8);
  Tensor p = param(9);
  sum(mul(p, x)).backward();
  p.grad().copy_(mul(p.grad(), 1.0));  // same values, written through a layout-following result
  precis::testing::ScratchDir dir("layout_ckpt");
  save_safetensors(dir.file("c.safetensors"), NamedTensors{{"sum", sum_t}, {"relu", relu(x)}, {"grad", p.grad()}});
  const SafetensorsFile f = load_safetensors(dir.file("c.safetensors"));
  CHECK(f.get("sum").sizes() == Shape{30, 40});
  CHECK(f.get("sum").to_vector<float>() == sum_t.to_vector<float>());
  CHECK(f.get("relu").to_vector<float>() == relu(x.contiguous()).to_vector<float>());
  CHECK(f.get("grad").to_vector<float>() == x.to_vector<float>());
}
