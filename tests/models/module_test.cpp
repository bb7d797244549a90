// nn::Module services: names, state_dict strictness, clone, to(dtype), train/eval, optimizers.
#include <sstream>
#include <catch2/catch.hpp>

#include "autograd/grad_mode.h"
#include "models/nn/nn.h"
#include "ops/functional.h"
#include "optim/sgd.h"
#include "tensor/factory.h"
#include "tests/support/names.h"
#include "tests/support/tensor_testing.h"

using namespace precis;
using testing::names_of;

namespace {

// A small residual block in the documented style (Child members, optional child).
class Block : public nn::Module {
 public:
  Block(int64_t in, int64_t out, int64_t stride)
      : conv1_(add("conv1", nn::Conv2d(in, out, 3, {.stride = stride, .padding = 1, .bias = false}))),
        bn1_(add("bn1", nn::BatchNorm2d(out))) {
    if (stride != 1 || in != out)
      down_ = add("downsample", nn::Sequential{nn::Conv2d(in, out, 1, {.stride = stride, .bias = false}),
                                               nn::BatchNorm2d(out)});
  }
  Tensor forward(const Tensor& x) override { return relu(bn1_(conv1_(x)) + (down_ ? down_(x) : x)); }

  nn::Child<nn::Conv2d> conv1_;
  nn::Child<nn::BatchNorm2d> bn1_;
  nn::Child<nn::Sequential> down_;
};

class Net : public nn::Module {
 public:
  Net() : block_(add("layer1", Block(2, 4, 2))), fc_(add("fc", nn::Linear(4, 3))) {
    scale = ones({1});
    register_parameter("scale", scale);
  }
  Tensor forward(const Tensor& x) override {
    Tensor y = adaptive_avg_pool2d(block_(x), {1, 1}).flatten(1);
    return fc_(y) * scale;
  }
  Tensor scale;
  nn::Child<Block> block_;
  nn::Child<nn::Linear> fc_;
};

// Keeps a child in a std::shared_ptr member: works, but cannot be cloned.
class SharedPtrHolder : public nn::Module {
 public:
  SharedPtrHolder() : fc_(add("fc", nn::Linear(2, 2))) {}
  Tensor forward(const Tensor& x) override { return (*fc_)(x); }
  std::shared_ptr<nn::Linear> fc_;
};

}  // namespace

TEST_CASE("module: dotted PyTorch names for parameters, buffers and modules", "[models]") {
  Net net;
  CHECK(names_of(net.named_parameters()) ==
        std::vector<std::string>{"scale", "layer1.conv1.weight", "layer1.bn1.weight", "layer1.bn1.bias",
                                 "layer1.downsample.0.weight", "layer1.downsample.1.weight",
                                 "layer1.downsample.1.bias", "fc.weight", "fc.bias"});
  CHECK(names_of(net.named_buffers()) ==
        std::vector<std::string>{"layer1.bn1.running_mean", "layer1.bn1.running_var", "layer1.bn1.num_batches_tracked",
                                 "layer1.downsample.1.running_mean", "layer1.downsample.1.running_var",
                                 "layer1.downsample.1.num_batches_tracked"});
  std::vector<std::string> modules;
  for (auto& [n, m] : net.named_modules()) modules.push_back(n + ":" + m->type_name());
  CHECK(modules == std::vector<std::string>{":Net", "layer1:Block", "layer1.conv1:Conv2d", "layer1.bn1:BatchNorm2d",
                                            "layer1.downsample:Sequential", "layer1.downsample.0:Conv2d",
                                            "layer1.downsample.1:BatchNorm2d", "fc:Linear"});
  CHECK(net.named_children().size() == 2);
  CHECK(net.state_dict().size() == 9 + 6);
  CHECK(net.num_parameters() == 1 + 2 * 4 * 9 + 8 + 2 * 4 + 8 + 12 + 3);
  // Parameters require grad, buffers do not; members are the registered tensors.
  for (auto& p : net.parameters()) CHECK(p.requires_grad());
  for (auto& b : net.buffers()) CHECK_FALSE(b.requires_grad());
  CHECK(net.named_parameters()[7].second.is_same(net.fc_->weight));
  CHECK(net.str().find("(downsample): Sequential(") != std::string::npos);
  // Forward runs and has the right shape.
  CHECK(net(randn({2, 2, 6, 6})).sizes() == Shape{2, 3});
}

TEST_CASE("module: registration errors name the module and the problem", "[models]") {
  struct Dup : nn::Module {
    Dup() {
      w = zeros({2});
      register_parameter("w", w);
      register_buffer("w", zeros({2}));
    }
    Tensor w;
  };
  PRECIS_REQUIRE_THROWS_WITH_ALL(Dup(), ValueError, "cannot register buffer 'w'", "already taken");
  struct Dotted : nn::Module {
    Dotted() { register_parameter("a.b", zeros({1})); }
  };
  PRECIS_REQUIRE_THROWS_WITH_ALL(Dotted(), ValueError, "'a.b'", "no '.'");
  struct NotMember : nn::Module {
    NotMember() {
      Tensor local = zeros({1});
      register_parameter("local", local);
    }
  };
  PRECIS_REQUIRE_THROWS_WITH_ALL(NotMember(), ValueError, "needs a data member", "rvalue");
  nn::Linear fc(2, 2);
  PRECIS_REQUIRE_THROWS_WITH_ALL(fc(zeros({3, 5})), ShapeError, "nn::Linear(2, 2)", "[3, 5] f32 cpu");
  struct NoForward : nn::Module {};
  NoForward nf;
  PRECIS_REQUIRE_THROWS_WITH_ALL(nf(zeros({1})), NotImplementedError, "NoForward", "single-tensor forward");
}

TEST_CASE("module: strict load_state_dict lists every problem in one message", "[models]") {
  Net a, b;
  StateDict sd = a.state_dict();
  SECTION("round trip copies in place") {
    Tensor fc_weight = b.fc_->weight;  // a handle an optimizer might hold
    auto r = b.load_state_dict(sd);
    CHECK(r.ok());
    CHECK(b.fc_->weight.is_same(fc_weight));
    CHECK(b.fc_->weight.requires_grad());
    PRECIS_REQUIRE_CLOSE(b.fc_->weight, a.fc_->weight, DType::f32);
    CHECK(b(ones({1, 2, 4, 4})).to_vector<float>() == a(ones({1, 2, 4, 4})).to_vector<float>());
  }
  SECTION("missing, unexpected and shape errors together, with suggestions") {
    sd["layer1.conv_1.weight"] = sd["layer1.conv1.weight"];
    sd.erase("layer1.conv1.weight");
    sd.erase("scale");
    sd["extra.thing"] = zeros({1});
    sd["fc.weight"] = zeros({5, 4});
    PRECIS_REQUIRE_THROWS_WITH_ALL(
        b.load_state_dict(sd), ValueError, "Net.load_state_dict (strict)", "2 missing keys", "2 unexpected keys",
        "1 shape mismatch", "missing in the checkpoint: layer1.conv1.weight (did you mean 'layer1.conv_1.weight'?)",
        "missing in the checkpoint: scale", "unexpected (not in the model): extra.thing",
        "shape mismatch: fc.weight: checkpoint [5, 4], model [3, 4]", "strict=*/false");
  }
  SECTION("shape mismatches fail even when not strict; otherwise non-strict loads report") {
    StateDict partial;
    partial["fc.bias"] = full({3}, 7.0);
    partial["nope"] = zeros({1});
    auto r = b.load_state_dict(partial, /*strict=*/false);
    CHECK(r.unexpected_keys == std::vector<std::string>{"nope"});
    CHECK(r.missing_keys.size() == sd.size() - 1 - 2);  // nor the 2 BatchNorms' num_batches_tracked (optional)
    CHECK(b.fc_->bias.to_vector<float>() == std::vector<float>{7, 7, 7});
    partial["fc.bias"] = zeros({4});
    // Non-strict, the missing and unexpected keys do not count: shapes are the only problem, and the
    // error says so by its type, as module.h promises (it was a ValueError).
    PRECIS_REQUIRE_THROWS_WITH_ALL(b.load_state_dict(partial, false), ShapeError, "fc.bias: checkpoint [4], model [3]");
    StateDict only_shape = a.state_dict();
    only_shape["fc.bias"] = zeros({4});
    PRECIS_REQUIRE_THROWS_WITH_ALL(b.load_state_dict(only_shape), ShapeError, "1 shape mismatch");
  }
  SECTION("a wrapper prefix is recognised") {
    StateDict wrapped;
    for (auto& [k, t] : sd) wrapped["module." + k] = t;
    PRECIS_REQUIRE_THROWS_WITH_ALL(b.load_state_dict(wrapped), ValueError, "prefix 'module.'");
  }
}

TEST_CASE("module: PyTorch's old checkpoints load, without num_batches_tracked or with 0-d values saved 1-D",
          "[models]") {
  // PyTorch's BatchNorm loads a checkpoint without num_batches_tracked (before 0.4.1) strictly, and
  // any load takes a one-element 1-D value for a 0-d tensor; precis refused both.
  nn::BatchNorm2d bn(3);
  bn.num_batches_tracked.fill_(5);
  StateDict sd;
  sd["weight"] = full({3}, 2.0);
  sd["bias"] = zeros({3});
  sd["running_mean"] = zeros({3});
  sd["running_var"] = ones({3});
  const nn::LoadResult r = bn.load_state_dict(sd);
  CHECK(r.ok());
  CHECK(bn.num_batches_tracked.item<int64_t>() == 5);  // kept
  CHECK(bn.weight.to_vector<float>() == std::vector<float>(3, 2.0f));
  sd["num_batches_tracked"] = from_vector<int64_t>({9});
  CHECK(bn.load_state_dict(sd).ok());
  CHECK(bn.num_batches_tracked.item<int64_t>() == 9);
  sd["num_batches_tracked"] = from_vector<int64_t>({9, 9});
  CHECK_THROWS_AS(bn.load_state_dict(sd), ShapeError);
  sd.erase("running_var");
  CHECK_THROWS_AS(bn.load_state_dict(sd), ValueError);  // other buffers are not optional
}

TEST_CASE("module: clone is deep and keeps names, values and modes", "[models]") {
  Net net;
  net.eval();
  auto copy = net.clone<Net>();
  CHECK(names_of(copy->named_parameters()) == names_of(net.named_parameters()));
  CHECK(names_of(copy->named_buffers()) == names_of(net.named_buffers()));
  CHECK_FALSE(copy->is_training());
  CHECK_FALSE(copy->block_->bn1_->is_training());
  // New children and tensors, reachable through the typed members.
  CHECK(copy->block_.get() != net.block_.get());
  CHECK(copy->block_->conv1_.get() != net.block_->conv1_.get());
  CHECK(&copy->block_->down_->operator[](0) != &net.block_->down_->operator[](0));
  CHECK(copy->named_children()[0].second.get() == copy->block_.get());
  CHECK_FALSE(copy->fc_->weight.is_same(net.fc_->weight));
  CHECK(copy->fc_->weight.requires_grad());
  CHECK(copy->fc_->weight.is_leaf());
  const Tensor x = randn({2, 2, 5, 5});
  CHECK(copy->forward(x).to_vector<float>() == net.forward(x).to_vector<float>());
  // Changing the copy leaves the original alone.
  {
    NoGradGuard ng;
    copy->fc_->weight.fill_(0.5);
    copy->scale.fill_(2.0);
  }
  CHECK(net.fc_->weight.to_vector<float>() != copy->fc_->weight.to_vector<float>());
  CHECK(net.scale.item<float>() == 1.0f);
  CHECK(copy->named_parameters()[0].second.item<float>() == 2.0f);
  // A std::shared_ptr member cannot be relinked: clone says so instead of sharing silently.
  SharedPtrHolder holder;
  PRECIS_REQUIRE_THROWS_WITH_ALL(holder.clone<SharedPtrHolder>(), StateError, "'fc'", "nn::Child");
  // Sequential and layers clone on their own too.
  nn::Sequential seq{nn::Linear(3, 4), nn::ReLU(), nn::Linear(4, 2)};
  auto seq2 = seq.clone<nn::Sequential>();
  CHECK(&(*seq2)[0] != &seq[0]);
  CHECK(seq2->at<nn::Linear>(2).weight.to_vector<float>() == seq.at<nn::Linear>(2).weight.to_vector<float>());
  CHECK_FALSE(seq2->at<nn::Linear>(2).weight.is_same(seq.at<nn::Linear>(2).weight));
}

namespace {
// For Note [Module tensor slots]: a base layer, a derived one adding a member, and a module whose
// nn::Module base is not the first base (its members still follow every base).
class Base : public nn::Module {
 public:
  Base() : w(ones({2})) { register_parameter("w", w); }
  Tensor w;
};
class Derived : public Base {
 public:
  Derived() : v(full({3}, 2.0)) { register_parameter("v", v); }
  Tensor v;
};
struct Padding {
  virtual ~Padding() = default;
  double pad[5] = {};
};
class SecondBase : public Padding, public nn::Module {
 public:
  SecondBase() : w(full({2}, 3.0)) { register_buffer("w", w); }
  Tensor w;
};
class Holder : public nn::Module {
 public:
  // Adds a Derived as a Base: the copy into the shared_ptr would drop Derived's part.
  void add_sliced(Derived&& d) { add("child", std::move(static_cast<Base&>(d))); }
  void add_whole(SecondBase&& m) { child = add("child", std::move(m)); }
  nn::Child<SecondBase> child;
};
}  // namespace

TEST_CASE("module: copies and moves re-point member slots at the copy's own members", "[models]") {
  Derived d;
  auto copy = d.clone<Derived>();
  REQUIRE(copy->named_parameters().size() == 2);
  CHECK(copy->named_parameters()[0].second.is_same(copy->w));
  CHECK(copy->named_parameters()[1].second.is_same(copy->v));
  CHECK_FALSE(copy->v.is_same(d.v));
  Derived moved = std::move(d);
  CHECK(moved.named_parameters()[1].second.is_same(moved.v));
  CHECK(moved.v.to_vector<float>() == std::vector<float>{2, 2, 2});
  // nn::Module as the second base: clone, add (a move) and to() all reach the member.
  SecondBase sb;
  auto sb2 = sb.clone<SecondBase>();
  CHECK(sb2->named_buffers()[0].second.is_same(sb2->w));
  CHECK_FALSE(sb2->w.is_same(sb.w));
  Holder h;
  h.add_whole(SecondBase());
  h.to(DType::f64);
  CHECK(h.child->w.dtype() == DType::f64);
  CHECK(h.named_buffers()[0].second.is_same(h.child->w));
}

TEST_CASE("module: a sliced copy is a StateError, not a write through a stray member pointer", "[models]") {
  Derived d;
  // clone<Base>() of a Derived would copy only the Base part, whose slot 'v' lies past it.
  PRECIS_REQUIRE_THROWS_WITH_ALL(d.clone<Base>(), StateError, "clone<T>", "Derived", "copied as a", "Base");
  Holder h;
  PRECIS_REQUIRE_THROWS_WITH_ALL(h.add_sliced(Derived()), StateError, "Module::add", "Derived", "Base");
  CHECK(h.named_children().empty());
  // A plain C++ copy cannot be stopped, but its tensors cannot be reached either.
  const Base& as_base = d;
  Base sliced = as_base;
  PRECIS_REQUIRE_THROWS_WITH_ALL(sliced.named_parameters(), StateError, "copied or moved from a", "Derived");
  PRECIS_REQUIRE_THROWS_WITH_ALL(sliced.to(DType::f64), StateError, "sliced copy");
  // Nor through a copy of the sliced copy.
  CHECK_THROWS_AS(Base(sliced), StateError);
  // The original is untouched by all of this.
  CHECK(d.named_parameters().size() == 2);
  CHECK(d.v.to_vector<float>() == std::vector<float>{2, 2, 2});
}

TEST_CASE("module: to(dtype) keeps BatchNorm fp32 and updates the members", "[models]") {
  Net net;
  net.to(DType::bf16);
  CHECK(net.fc_->weight.dtype() == DType::bf16);
  CHECK(net.scale.dtype() == DType::bf16);
  CHECK(net.block_->conv1_->weight.dtype() == DType::bf16);
  CHECK(net.block_->bn1_->weight.dtype() == DType::f32);
  CHECK(net.block_->bn1_->running_var.dtype() == DType::f32);
  CHECK(net.block_->bn1_->num_batches_tracked.dtype() == DType::i64);
  CHECK(net.block_->down_->at<nn::BatchNorm2d>(1).running_mean.dtype() == DType::f32);
  for (auto& [name, p] : net.named_parameters()) {
    INFO(name);
    CHECK(p.requires_grad());
    CHECK(p.is_leaf());
  }
  // The state dict sees the converted tensors; a forward in bf16 runs and backward reaches them.
  CHECK(net.state_dict().at("fc.weight").dtype() == DType::bf16);
  Tensor y = net(randn({2, 2, 6, 6}).to(DType::bf16));
  CHECK(y.dtype() == DType::bf16);
  sum(y.to(DType::f32)).backward();
  CHECK(net.fc_->weight.grad().defined());
  CHECK(net.block_->bn1_->weight.grad().dtype() == DType::f32);
  // Gradients are converted along; f64 converts everything, BatchNorm included.
  net.to(DType::f64);
  CHECK(net.fc_->weight.grad().dtype() == DType::f64);
  CHECK(net.block_->bn1_->weight.dtype() == DType::f64);
  net.zero_grad();
  CHECK_FALSE(net.fc_->weight.grad().defined());
  PRECIS_REQUIRE_THROWS_WITH_ALL(net.to(DType::i64), DTypeError, "Net.to(i64)");
}

TEST_CASE("module: tied tensors stay tied through to() and clone()", "[models]") {
  struct Tied : nn::Module {
    Tied() : emb_(add("emb", nn::Embedding(5, 3))), dec_(add("dec", nn::Linear(3, 5))) {
      dec_->weight = emb_->weight;  // the decoder's "weight" slot reads the member: tied
    }
    nn::Child<nn::Embedding> emb_;
    nn::Child<nn::Linear> dec_;
  };
  Tied t;
  CHECK(names_of(t.named_parameters()) == std::vector<std::string>{"emb.weight", "dec.bias"});
  CHECK(t.state_dict().count("dec.weight") == 1);  // every name, as PyTorch
  t.to(DType::f16);
  CHECK(t.dec_->weight.is_same(t.emb_->weight));
  CHECK(t.emb_->weight.dtype() == DType::f16);
  auto c = t.clone<Tied>();
  CHECK(c->dec_->weight.is_same(c->emb_->weight));
  CHECK_FALSE(c->emb_->weight.is_same(t.emb_->weight));
  // A checkpoint that stores the tied tensor once (Hugging Face style) loads strictly.
  StateDict sd = t.state_dict();
  sd.erase("dec.weight");
  CHECK(c->load_state_dict(sd).ok());
  // Names of a tied tensor holding different values: the last name in module order wins, as
  // PyTorch copies module by module (name order made emb.weight win over dec.weight here).
  StateDict both = t.state_dict();
  both["emb.weight"] = full({5, 3}, 1.0, {.dtype = DType::f16});
  both["dec.weight"] = full({5, 3}, 2.0, {.dtype = DType::f16});
  CHECK(c->load_state_dict(both).ok());
  CHECK(c->emb_->weight.to(DType::f32).to_vector<float>() == std::vector<float>(15, 2.0f));
}

TEST_CASE("module: train/eval switches BatchNorm and Dropout", "[models]") {
  nn::BatchNorm2d bn(3);
  const Tensor x = randn({4, 3, 2, 2}) * 3.0 + 1.0;
  Tensor y_train = bn(x);
  CHECK(bn.num_batches_tracked.item<int64_t>() == 1);
  const auto mean_after = bn.running_mean.to_vector<float>();
  CHECK(mean_after != std::vector<float>{0, 0, 0});
  // Training output is normalised by batch statistics: per-channel mean ~ 0.
  CHECK(std::abs(mean(y_train).item<float>()) < 1e-5);
  bn.eval();
  Tensor y_eval = bn(x);
  CHECK(bn.num_batches_tracked.item<int64_t>() == 1);
  CHECK(bn.running_mean.to_vector<float>() == mean_after);
  CHECK(std::abs(mean(y_eval).item<float>()) > 0.1);

  nn::Sequential seq{nn::Linear(8, 8), nn::Dropout(0.5)};
  const Tensor in = ones({16, 8});
  seq.eval();
  CHECK(seq(in).to_vector<float>() == seq(in).to_vector<float>());
  seq.train();
  CHECK(seq[1].is_training());
  const auto a = seq(in).to_vector<float>();
  CHECK(std::count(a.begin(), a.end(), 0.0f) > 16);  // about half of 128 are dropped
  CHECK(a != seq(in).to_vector<float>());
}

TEST_CASE("module: parameters() feed an optimizer that learns", "[models]") {
  manual_seed(3);
  nn::Sequential model{nn::Linear(4, 16), nn::ReLU(), nn::Linear(16, 1)};
  optim::SGD opt(model.parameters(), {.lr = 0.05, .momentum = 0.9});
  const Tensor x = randn({32, 4});
  const Tensor y = sum(x, {1}, true);
  double first = 0, last = 0;
  for (int step = 0; step < 60; ++step) {
    opt.zero_grad();
    Tensor loss = mse_loss(model(x), y);
    loss.backward();
    opt.step();
    (step == 0 ? first : last) = loss.item<double>();
  }
  CHECK(last < first * 0.05);
}

TEST_CASE("nn::init: distributions and fans as PyTorch", "[models]") {
  Tensor w = empty({64, 32, 3, 3});
  auto fans = nn::init::calculate_fans(w);
  CHECK(fans.fan_in == 32 * 9);
  CHECK(fans.fan_out == 64 * 9);
  Generator g(7);
  nn::init::kaiming_uniform_(w, 0.0, nn::init::FanMode::fan_in, "relu", &g);
  const double bound = std::sqrt(2.0) * std::sqrt(3.0 / (32 * 9));
  CHECK(max(abs(w)).item<double>() <= bound);
  CHECK(max(abs(w)).item<double>() > 0.95 * bound);
  nn::init::kaiming_normal_(w, 0.0, nn::init::FanMode::fan_out, "relu", &g);
  CHECK(std::sqrt(var(w).item<double>()) == Approx(std::sqrt(2.0 / (64 * 9))).epsilon(0.03));
  nn::init::trunc_normal_(w, 0.0, 1.0, -0.5, 0.5, &g);
  CHECK(max(abs(w)).item<double>() <= 0.5);
  CHECK(std::sqrt(var(w).item<double>()) == Approx(0.2869).epsilon(0.03));  // truncated N(0,1) on [-0.5, 0.5]
  nn::init::xavier_normal_(w, 1.0, &g);
  CHECK(std::sqrt(var(w).item<double>()) == Approx(std::sqrt(2.0 / (96 * 9))).epsilon(0.03));
  // Seeded: the same generator state gives the same layer.
  Generator g1(11), g2(11);
  nn::Linear a(5, 7, {.generator = &g1}), b(5, 7, {.generator = &g2});
  CHECK(a.weight.to_vector<float>() == b.weight.to_vector<float>());
  CHECK(max(abs(a.weight)).item<double>() <= 1.0 / std::sqrt(5.0));
  nn::Embedding e(10, 4, {.padding_idx = -1});
  CHECK(e.padding_idx() == 9);
  CHECK(e.weight.select(0, 9).to_vector<float>() == std::vector<float>{0, 0, 0, 0});
  // The padding row gets no gradient; without padding_idx every row (the last included) does.
  nn::Embedding plain(10, 4);
  const Tensor idx = from_vector<int64_t>({9, 1, 9});
  sum(e(idx)).backward();
  sum(plain(idx)).backward();
  CHECK(sum(abs(e.weight.grad().select(0, 9))).item<float>() == 0.0f);
  CHECK(sum(abs(e.weight.grad().select(0, 1))).item<float>() == 4.0f);
  CHECK(sum(abs(plain.weight.grad().select(0, 9))).item<float>() == 8.0f);
  PRECIS_REQUIRE_THROWS_WITH_ALL(nn::init::calculate_gain("swish"), ValueError, "unknown nonlinearity 'swish'");
}

TEST_CASE("nn::MultiheadAttention: PyTorch names and masking", "[models]") {
  nn::MultiheadAttention mha(8, 2, {.batch_first = true});
  CHECK(names_of(mha.named_parameters()) ==
        std::vector<std::string>{"in_proj_weight", "in_proj_bias", "out_proj.weight", "out_proj.bias"});
  const Tensor x = randn({2, 5, 8});
  CHECK(mha(x).sizes() == Shape{2, 5, 8});
  // A padded key does not influence the output: changing it leaves the result unchanged.
  Tensor pad = from_vector<bool>({false, false, false, false, true, false, false, false, false, false}, {2, 5});
  Tensor x2 = x.clone();
  {
    NoGradGuard ng;
    x2.select(0, 0).select(0, 4).fill_(9.0);
  }
  Tensor a = std::get<0>(mha.forward(x, x2, x2, {.key_padding_mask = pad}));
  Tensor b = std::get<0>(mha.forward(x, x, x, {.key_padding_mask = pad}));
  PRECIS_REQUIRE_CLOSE(a, b, DType::f32);
}

TEST_CASE("module: apply visits children before their parent, each once, and operator<< prints str()",
          "[models]") {
  auto shared = std::make_shared<nn::Linear>(4, 4);
  nn::Sequential net{nn::Linear(3, 4), nn::ReLU()};
  net.push_back(shared);
  net.push_back(shared);  // one module in two places
  std::vector<std::string> order;
  net.apply([&](nn::Module& m) {
    order.push_back(m.type_name());
    if (auto* linear = dynamic_cast<nn::Linear*>(&m)) {
      NoGradGuard no_grad;
      linear->weight.fill_(0.5);  // the everyday use: initialise every layer of a kind
    }
  });
  CHECK(order == std::vector<std::string>{"Linear", "ReLU", "Linear", "Sequential"});
  CHECK(shared->weight.to_vector<float>() == std::vector<float>(16, 0.5f));
  std::ostringstream printed;
  printed << net;
  CHECK(printed.str() == net.str());
}
