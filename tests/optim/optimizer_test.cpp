// Optimizer behaviour beyond the PyTorch trajectories: fp32 master weights for f16/bf16
// parameters, state_dict round trips, the loss scaler's grad_scale / found_inf, the Adam eps
// warning, zero_grad and bad inputs.
#include <catch2/catch.hpp>

#include <cstring>
#include <functional>
#include <memory>

#include "core/warning.h"
#include "optim/adam.h"
#include "optim/sgd.h"
#include "regression_problem.h"
#include "tensor/factory.h"
#include "tests/support/tensor_testing.h"

using namespace precis;
using namespace precis::optim;
using precis::testing::golden_path;
using precis::testing::Regression;

namespace {

bool bitwise_equal(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype() || a.sizes() != b.sizes()) return false;
  const Tensor ca = a.contiguous(), cb = b.contiguous();
  return std::memcmp(ca.data_ptr(), cb.data_ptr(), ca.numel() * ca.element_size()) == 0;
}

const SafetensorsFile& problem_file() {
  static const SafetensorsFile f = load_safetensors(golden_path("optim_trajectories.safetensors"));
  return f;
}

using Make = std::function<std::unique_ptr<Optimizer>(std::vector<Tensor>)>;

std::vector<Make> all_optimizers() {
  return {
      [](auto p) { return std::make_unique<SGD>(p, SGDOptions{.lr = 0.02, .momentum = 0.9, .nesterov = true}); },
      [](auto p) { return std::make_unique<Adam>(p, AdamOptions{.lr = 0.01, .weight_decay = 0.01, .amsgrad = true}); },
      [](auto p) { return std::make_unique<AdamW>(p, AdamWOptions{.lr = 0.01}); },
  };
}

}  // namespace

TEST_CASE("master weights: a sub-ulp update moves the fp32 master, and the f16 weight once it accumulates",
          "[optim][master]") {
  // 1.0 in f16 has ulp 2^-10; an update of 2^-13 (an eighth of an ulp, below half an ulp) is lost
  // when applied to the f16 weight directly.
  const float tiny = std::ldexp(1.0f, -13);
  Tensor w16 = ones({4}, {.dtype = DType::f16}).requires_grad_();
  SGD opt({w16}, {.lr = 1.0});
  // Direct f16 arithmetic loses the update: 1 - 2^-13 rounds back to 1 in f16.
  CHECK(static_cast<float>(Half(1.0f - tiny)) == 1.0f);
  w16.set_grad(full({4}, tiny, {.dtype = DType::f16}));
  opt.step();
  const Tensor master = opt.state(w16, "master");
  REQUIRE(master.defined());
  CHECK(master.dtype() == DType::f32);
  CHECK(master.to_vector<float>()[0] == 1.0f - tiny);  // the master moved
  CHECK(w16.to(DType::f32).to_vector<float>()[0] == 1.0f);  // the weight did not (yet)
  // After 4 such updates the master is 1 - 2^-11 = half an ulp below 1: f16 rounds to even (1);
  // after 5 it is past the midpoint and the weight moves to 1 - 2^-11 (the f16 below 1 is 1 - 2^-11).
  for (int i = 0; i < 4; ++i) opt.step();
  CHECK(master.to_vector<float>()[0] == 1.0f - 5 * tiny);
  CHECK(w16.to(DType::f32).to_vector<float>()[0] == 1.0f - std::ldexp(1.0f, -11));
  // The master is fp32, the weight its rounding.
  CHECK(bitwise_equal(w16, master.to(DType::f16)));
}

TEST_CASE("f16/bf16 parameters: the master follows exactly the f32 run on the same gradients", "[optim][master]") {
  const Regression problem(problem_file());
  for (DType low : {DType::f16, DType::bf16}) {
    for (const Make& make : all_optimizers()) {
      // The f32 run starts from the low-precision values so both start alike.
      Tensor W0 = problem_file().get("W0").to(low);
      Tensor b0 = problem_file().get("b0").to(low);
      Tensor W = W0.clone().requires_grad_(), b = b0.clone().requires_grad_();
      Tensor Wf = W0.to(DType::f32).requires_grad_(), bf = b0.to(DType::f32).requires_grad_();
      auto opt = make({W, b});
      auto ref = make({Wf, bf});
      for (int step = 0; step < 30; ++step) {
        // Gradients in the low dtype (as a low-precision backward produces), the same values as f32.
        problem.set_grads(W, b);
        Wf.set_grad(W.grad().to(DType::f32));
        bf.set_grad(b.grad().to(DType::f32));
        opt->step();
        ref->step();
        INFO(dtype_name(low) << " " << opt->name() << " step " << step);
        REQUIRE(bitwise_equal(opt->state(W, "master"), Wf));
        REQUIRE(bitwise_equal(opt->state(b, "master"), bf));
        REQUIRE(bitwise_equal(W, Wf.to(low)));
        if (opt->name() != "SGD") REQUIRE(opt->state(W, "exp_avg").dtype() == DType::f32);
      }
    }
  }
}

TEST_CASE("f32 gradients for f16 parameters are accepted, and other dtype mixes are refused", "[optim][master]") {
  Tensor w = ones({3}, {.dtype = DType::bf16}).requires_grad_();
  Adam opt({w}, {.lr = 0.1});
  w.set_grad(full({3}, 0.5));
  opt.step();
  CHECK(w.to(DType::f32).to_vector<float>()[0] < 1.0f);
  Tensor v = ones({3}).requires_grad_();
  SGD sgd({v}, {.lr = 0.1});
  v.set_grad(full({3}, 0.5, {.dtype = DType::f16}));
  PRECIS_REQUIRE_THROWS_WITH_ALL(sgd.step(), DTypeError, "SGD.step", "[3] f16 cpu", "[3] f32 cpu");
}

TEST_CASE("state_dict round trip through safetensors bytes resumes bit for bit", "[optim][state_dict]") {
  const Regression problem(problem_file());
  for (DType dtype : {DType::f32, DType::bf16}) {
    for (const Make& make : all_optimizers()) {
      auto run_params = [&] {
        return std::pair{problem_file().get("W0").to(dtype).clone().requires_grad_(),
                         problem_file().get("b0").to(dtype).clone().requires_grad_()};
      };
      // Uninterrupted run of 20 steps.
      auto [W, b] = run_params();
      auto opt = make({W, b});
      for (int i = 0; i < 20; ++i) {
        problem.set_grads(W, b);
        opt->step();
      }
      // Interrupted at step 8: save, rebuild everything, load, continue.
      auto [W1, b1] = run_params();
      auto opt1 = make({W1, b1});
      for (int i = 0; i < 8; ++i) {
        problem.set_grads(W1, b1);
        opt1->step();
      }
      StateDict sd = opt1->state_dict();
      sd["model.W"] = W1.detach();
      sd["model.b"] = b1.detach();
      const std::string bytes = to_safetensors_bytes(NamedTensors(sd.begin(), sd.end()));
      opt1.reset();
      const SafetensorsFile loaded = from_safetensors_bytes(bytes);
      StateDict sd2(loaded.tensors.begin(), loaded.tensors.end());
      Tensor W2 = sd2.at("model.W").clone().requires_grad_();
      Tensor b2 = sd2.at("model.b").clone().requires_grad_();
      auto opt2 = make({W2, b2});
      opt2->load_state_dict(sd2);
      for (int i = 8; i < 20; ++i) {
        problem.set_grads(W2, b2);
        opt2->step();
      }
      INFO(opt->name() << " " << dtype_name(dtype));
      CHECK(bitwise_equal(W2, W));
      CHECK(bitwise_equal(b2, b));
    }
  }
}

TEST_CASE("state_dict holds options and copies, and mismatched loads are refused", "[optim][state_dict]") {
  Tensor w = ones({2, 3}).requires_grad_(), b = ones({3}).requires_grad_();
  Adam opt(std::vector<ParamGroup<AdamOptions>>{{{w}, std::nullopt}, {{b}, AdamOptions{.lr = 0.5, .betas = {0.8, 0.9}}}},
           {.lr = 0.01});
  w.set_grad(ones({2, 3}));
  b.set_grad(ones({3}));
  opt.step();
  StateDict sd = opt.state_dict();
  CHECK(sd.at("param_groups.1.lr").item<double>() == 0.5);
  CHECK(sd.at("param_groups.1.beta1").item<double>() == 0.8);
  CHECK(sd.at("param_groups.0.params").to_vector<int64_t>() == std::vector<int64_t>{0});
  CHECK(sd.at("state.1.step").item<float>() == 1.0f);
  CHECK(sd.at("state.0.exp_avg").sizes() == Shape{2, 3});
  opt.step();
  CHECK(sd.at("state.1.step").item<float>() == 1.0f);  // a copy, not the live state

  // Loading restores the options too.
  Adam other(std::vector<ParamGroup<AdamOptions>>{{{ones({2, 3}).requires_grad_()}}, {{ones({3}).requires_grad_()}}});
  other.load_state_dict(sd);
  CHECK(other.options(1).lr == 0.5);
  CHECK(other.options(1).betas.first == 0.8);

  Adam one_group({ones({2, 3}).requires_grad_(), ones({3}).requires_grad_()});
  PRECIS_REQUIRE_THROWS_WITH_ALL(one_group.load_state_dict(sd), ValueError, "Adam.load_state_dict", "2 parameter groups",
                                 "1");
  Adam wrong_count(std::vector<ParamGroup<AdamOptions>>{{{ones({2, 3}).requires_grad_()}},
                                                        {{ones({3}).requires_grad_(), ones({1}).requires_grad_()}}});
  PRECIS_REQUIRE_THROWS_WITH_ALL(wrong_count.load_state_dict(sd), ValueError, "group 1", "1 parameters", "has 2");
  Adam wrong_shape(std::vector<ParamGroup<AdamOptions>>{{{ones({3, 2}).requires_grad_()}}, {{ones({3}).requires_grad_()}}});
  PRECIS_REQUIRE_THROWS_WITH_ALL(wrong_shape.load_state_dict(sd), ShapeError, "state.0.exp_avg", "[2, 3]", "[3, 2]");
  SGD sgd(std::vector<ParamGroup<SGDOptions>>{{{ones({2, 3}).requires_grad_()}}, {{ones({3}).requires_grad_()}}});
  PRECIS_REQUIRE_THROWS_WITH_ALL(sgd.load_state_dict(sd), ValueError, "SGD.load_state_dict");
}

TEST_CASE("a loaded state without step: SGD's momentum buffer counts as in use, Adam's moments are refused",
          "[optim][state_dict]") {
  // A PyTorch SGD state has no step. Loaded without one, the buffer was overwritten by the next
  // gradient as if it were the first step (0.3 off after two steps here); Adam restarted its bias
  // correction. PyTorch keeps an SGD buffer and raises a KeyError for Adam.
  auto run = [](Optimizer& opt, const Tensor& w, int steps) {
    for (int i = 0; i < steps; ++i) {
      w.set_grad(full({3}, 0.5 + i));
      opt.step();
    }
  };
  Tensor w = ones({3}).requires_grad_(), w2 = ones({3}).requires_grad_();
  SGD sgd({w}, {.lr = 0.1, .momentum = 0.9});
  run(sgd, w, 2);
  StateDict sd = sgd.state_dict();
  sd.erase("state.0.step");
  w2.detach().copy_(w.detach());
  SGD resumed({w2}, {.lr = 0.1, .momentum = 0.9});
  resumed.load_state_dict(sd);
  w.set_grad(full({3}, 7.0));
  w2.set_grad(full({3}, 7.0));
  sgd.step();
  resumed.step();
  CHECK(w2.to_vector<float>() == w.to_vector<float>());

  Tensor a = ones({3}).requires_grad_();
  Adam adam({a}, {.lr = 0.1});
  run(adam, a, 2);
  StateDict ad = adam.state_dict();
  ad.erase("state.0.step");
  Adam fresh({ones({3}).requires_grad_()});
  PRECIS_REQUIRE_THROWS_WITH_ALL(fresh.load_state_dict(ad), ValueError, "state.0.step", "missing", "bias correction");
}

TEST_CASE("found_inf makes the step a no-op, and grad_scale divides the gradients", "[optim][scaler]") {
  const Regression problem(problem_file());
  for (DType dtype : {DType::f32, DType::f16}) {
    for (const Make& make : all_optimizers()) {
      Tensor W = problem_file().get("W0").to(dtype).clone().requires_grad_();
      Tensor b = problem_file().get("b0").to(dtype).clone().requires_grad_();
      Tensor Ws = W.detach().clone().requires_grad_(), bs = b.detach().clone().requires_grad_();
      auto opt = make({W, b});
      auto scaled = make({Ws, bs});
      const double scale = 1024.0;  // a power of two: scaling and unscaling are exact
      for (int step = 0; step < 10; ++step) {
        problem.set_grads(W, b);
        problem.set_grads(Ws, bs, scale);
        opt->step();
        scaled->step({.grad_scale = scalar_tensor(scale)});
        INFO(opt->name() << " " << dtype_name(dtype) << " step " << step);
        REQUIRE(bitwise_equal(W, Ws));
        REQUIRE(bitwise_equal(b, bs));
      }
      // A skipped step: everything keeps its bits.
      StateDict before = scaled->state_dict();
      const Tensor W_before = Ws.detach().clone();
      problem.set_grads(Ws, bs, scale);
      scaled->step({.grad_scale = scalar_tensor(scale), .found_inf = scalar_tensor(1.0)});
      CHECK(bitwise_equal(Ws, W_before));
      StateDict after = scaled->state_dict();
      REQUIRE(after.size() == before.size());
      for (const auto& [k, v] : before) {
        INFO(k);
        CHECK(bitwise_equal(after.at(k), v));
      }
      // found_inf = 0 applies the step.
      scaled->step({.grad_scale = scalar_tensor(scale), .found_inf = scalar_tensor(0.0)});
      CHECK_FALSE(bitwise_equal(Ws, W_before));
    }
  }
}

TEST_CASE("found_inf on the first SGD step leaves the momentum buffer unused", "[optim][scaler]") {
  Tensor w = zeros({2}).requires_grad_();
  SGD opt({w}, {.lr = 1.0, .momentum = 0.9});
  w.set_grad(full({2}, 5.0));
  opt.step({.found_inf = scalar_tensor(1.0)});
  CHECK(w.to_vector<float>() == std::vector<float>{0, 0});
  w.set_grad(full({2}, 1.0));
  opt.step();
  // The first applied step fills the buffer with the gradient: w = 0 - 1·1.
  CHECK(w.to_vector<float>() == std::vector<float>{-1, -1});
  CHECK(opt.state(w, "momentum_buffer").to_vector<float>() == std::vector<float>{1, 1});
}

TEST_CASE("steps bump the parameter version, run without grad, skip parameters without grad", "[optim]") {
  Tensor w = ones({2}).requires_grad_(), u = ones({2}).requires_grad_();
  SGD opt({w, u}, {.lr = 0.5});
  w.set_grad(ones({2}));
  const auto v0 = w.version(), u0 = u.version();
  opt.step();
  CHECK(w.version() > v0);
  CHECK(u.version() == u0);
  CHECK(u.to_vector<float>() == std::vector<float>{1, 1});
  CHECK(w.to_vector<float>() == std::vector<float>{0.5f, 0.5f});
  CHECK(w.requires_grad());
  CHECK(w.is_leaf());
  opt.zero_grad(false);
  CHECK(w.grad().to_vector<float>() == std::vector<float>{0, 0});
  opt.zero_grad();
  CHECK_FALSE(w.grad().defined());
}

TEST_CASE("Adam warns when eps vanishes in its fp32 state", "[optim][warning]") {
  std::vector<std::string> warnings;
  auto previous = set_warning_handler([&](const std::string& m) { warnings.push_back(m); });
  Adam ok({ones({2}).requires_grad_()}, {.eps = 1e-8});
  CHECK(warnings.empty());
  Adam tiny({ones({2}).requires_grad_()}, {.eps = 1e-40});  // subnormal in fp32
  REQUIRE(warnings.size() == 1);
  CHECK(warnings[0].find("eps = 1e-40") != std::string::npos);
  CHECK(warnings[0].find("fp32") != std::string::npos);
  Adam again({ones({2}).requires_grad_()}, {.eps = 1e-40});  // the same message is reported once
  CHECK(warnings.size() == 1);
  AdamW zero({ones({2}, {.dtype = DType::f16}).requires_grad_()}, {.eps = 0.0});
  REQUIRE(warnings.size() == 2);
  CHECK(warnings[1].find("AdamW") != std::string::npos);
  CHECK(warnings[1].find("is zero") != std::string::npos);
  // f64 parameters keep f64 state, where 1e-40 is a normal number.
  Adam f64({ones({2}, {.dtype = DType::f64}).requires_grad_()}, {.eps = 1e-40});
  CHECK(warnings.size() == 2);
  set_warning_handler(previous);
}

TEST_CASE("optimizers reject bad parameters and options", "[optim][errors]") {
  Tensor w = ones({2}).requires_grad_();
  PRECIS_REQUIRE_THROWS_WITH_ALL(SGD(std::vector<Tensor>{}), ValueError, "SGD", "empty parameter list");
  PRECIS_REQUIRE_THROWS_WITH_ALL(SGD({w * 2.0}), ValueError, "not a leaf");
  PRECIS_REQUIRE_THROWS_WITH_ALL(SGD({ones({2}, {.dtype = DType::i64})}), DTypeError, "floating");
  PRECIS_REQUIRE_THROWS_WITH_ALL(SGD({w, w}), ValueError, "more than once");
  PRECIS_REQUIRE_THROWS_WITH_ALL(SGD({w}, {.lr = -0.1}), ValueError, "SGD", "lr -0.1");
  PRECIS_REQUIRE_THROWS_WITH_ALL(SGD({w}, {.lr = 0.1, .nesterov = true}), ValueError, "nesterov", "momentum > 0");
  PRECIS_REQUIRE_THROWS_WITH_ALL(SGD({w}, {.momentum = 0.9, .dampening = 0.1, .nesterov = true}), ValueError,
                                 "dampening == 0");
  PRECIS_REQUIRE_THROWS_WITH_ALL(
      SGD(std::vector<ParamGroup<SGDOptions>>{{{w}}, {{ones({1}).requires_grad_()}, SGDOptions{.momentum = -1}}}),
      ValueError, "group 1", "momentum -1");
  PRECIS_REQUIRE_THROWS_WITH_ALL(Adam({w}, {.betas = {1.0, 0.999}}), ValueError, "beta1 1");
  PRECIS_REQUIRE_THROWS_WITH_ALL(Adam({w}, {.eps = -1e-8}), ValueError, "eps");
  PRECIS_REQUIRE_THROWS_WITH_ALL(AdamW({w}, {.weight_decay = -0.1}), ValueError, "AdamW", "weight_decay");
  SGD opt({w}, {.lr = 0.1});
  PRECIS_REQUIRE_THROWS_WITH_ALL(opt.set_group_lr(0, -1.0), ValueError, "lr -1");
  PRECIS_REQUIRE_THROWS_WITH_ALL(opt.group_params(3), IndexError, "group 3");
  w.set_grad(ones({2}));
  PRECIS_REQUIRE_THROWS_WITH_ALL(opt.step({.grad_scale = scalar_tensor(2.0, {.dtype = DType::f64})}), DTypeError,
                                 "grad_scale", "f32");
  PRECIS_REQUIRE_THROWS_WITH_ALL(opt.step({.found_inf = zeros({2})}), ShapeError, "found_inf", "one value");
}

TEST_CASE("a frozen parameter is accepted and skipped until it is unfrozen, as in PyTorch", "[optim]") {
  // Fine-tuning passes model.parameters() with a frozen backbone: PyTorch's optimizers take them.
  Tensor frozen = ones({2}), w = ones({2}).requires_grad_();
  SGD sgd({frozen, w}, {.lr = 0.5, .momentum = 0.9});
  AdamW adamw({frozen.detach().clone(), w.detach().clone().requires_grad_()}, {.lr = 0.1});
  w.set_grad(ones({2}));
  sgd.step();
  CHECK(frozen.to_vector<float>() == std::vector<float>{1.0f, 1.0f});
  CHECK(w.to_vector<float>() == std::vector<float>{0.5f, 0.5f});
  CHECK_FALSE(sgd.state(frozen, "momentum_buffer").defined());
  frozen.requires_grad_();  // unfrozen: stepped from now on
  frozen.set_grad(ones({2}));
  sgd.step();
  CHECK(frozen.to_vector<float>() == std::vector<float>{0.5f, 0.5f});
  adamw.step();  // no gradient anywhere: nothing moves, nothing throws
  CHECK(adamw.parameters()[0].to_vector<float>() == std::vector<float>{1.0f, 1.0f});
}
