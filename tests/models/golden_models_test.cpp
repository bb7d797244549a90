// The bundled models against PyTorch (fixtures from tests/golden/gen_model_fixtures.py): a
// BasicBlock, a Bottleneck and a BERT encoder layer (outputs, input and parameter gradients,
// running statistics), and a whole reduced-width resnet18 whose PyTorch-saved weights load strictly
// and give PyTorch's logits.
#include <functional>

#include <catch2/catch.hpp>

#include "models/bert.h"
#include "models/resnet.h"
#include "ops/functional.h"
#include "tensor/safetensors.h"
#include "tests/support/golden.h"

using namespace precis;

namespace {

StateDict load_dict(const std::string& name) { return testing::load_golden_dict(testing::golden_dir() + "/models/" + name); }

// f32 runs of a whole block accumulate more rounding than one op: allow 5x the f32 table (the
// golden-test helper measured the same factor for its block fixtures).
void require_close(const Tensor& actual, const Tensor& expected, DType dtype, const std::string& what) {
  testing::require_golden_close(actual, expected, dtype, what, 5.0);
}

// Loads the fixture's state into `m` (strict), runs forward, backward with grad_out, and compares
// the output, every gradient and the buffers after the pass. `call` runs the forward on the input.
void check_block(nn::Module& m, const StateDict& fx, DType dtype, const std::function<Tensor(const Tensor&)>& call) {
  m.to(dtype);
  REQUIRE(m.load_state_dict(state_subset(fx, "state.")).ok());
  Tensor x = fx.at("input").to(dtype).clone().requires_grad_();  // a new leaf: the fixture stays untouched
  Tensor out = call(x);
  CHECK(out.dtype() == dtype);
  require_close(out, fx.at("out"), dtype, "out");
  sum(out * fx.at("grad_out").to(dtype)).backward();
  require_close(x.grad(), fx.at("grad.input"), dtype, "grad.input");
  for (auto& [name, p] : m.named_parameters()) {
    INFO(name);
    REQUIRE(p.grad().defined());
    require_close(p.grad(), fx.at("grad." + name), dtype, "grad." + name);
  }
  for (auto& [name, b] : m.named_buffers()) {
    if (b.is_floating_point()) require_close(b, fx.at("after." + name), dtype, "after." + name);
    else CHECK(b.item<int64_t>() == fx.at("after." + name).item<int64_t>());
  }
}

}  // namespace

TEST_CASE("golden: ResNet BasicBlock (train mode) matches PyTorch", "[models][golden]") {
  const StateDict fx = load_dict("basic_block.safetensors");
  for (DType dtype : {DType::f64, DType::f32}) {
    models::BasicBlock block(4, 8, 2);
    check_block(block, fx, dtype, [&](const Tensor& x) { return block(x); });
  }
}

TEST_CASE("golden: ResNet Bottleneck (train mode) matches PyTorch", "[models][golden]") {
  const StateDict fx = load_dict("bottleneck.safetensors");
  for (DType dtype : {DType::f64, DType::f32}) {
    models::Bottleneck block(8, 4, 2);
    check_block(block, fx, dtype, [&](const Tensor& x) { return block(x); });
  }
}

TEST_CASE("golden: BERT encoder layer (post-LN, GELU, padding mask) matches PyTorch", "[models][golden]") {
  const StateDict fx = load_dict("bert_layer.safetensors");
  models::BertConfig config;
  config.hidden_size = 32;
  config.num_attention_heads = 4;
  config.intermediate_size = 64;
  config.hidden_dropout_prob = 0.0;
  config.attention_probs_dropout_prob = 0.0;
  for (DType dtype : {DType::f64, DType::f32}) {
    models::BertLayer layer(config);
    layer.eval();
    const Tensor mask = ne(fx.at("attention_mask"), 0).view({2, 1, 1, 8});
    check_block(layer, fx, dtype, [&](const Tensor& x) { return layer.forward(x, mask); });
  }
}

TEST_CASE("golden: a PyTorch-saved resnet18 (width 4) loads strictly and gives PyTorch's logits", "[models][golden]") {
  auto model = models::resnet18({.num_classes = 10, .width = 4});
  const SafetensorsFile weights = load_safetensors(testing::golden_dir() + "/models/resnet18_w4.safetensors");
  StateDict sd(weights.tensors.begin(), weights.tensors.end());
  // Every key of torchvision's resnet18 state_dict maps 1:1.
  CHECK(sd.size() == model->state_dict().size());
  REQUIRE(model->load_state_dict(sd).ok());
  model->eval();
  const StateDict io = load_dict("resnet18_w4_io.safetensors");
  Tensor logits = (*model)(io.at("input"));
  CHECK(logits.sizes() == Shape{4, 10});
  require_close(logits, io.at("logits"), DType::f32, "logits");
  // And in f64 from the same weights, to the f64 reference itself.
  model->to(DType::f64);
  require_close((*model)(io.at("input").to(DType::f64)), io.at("logits"), DType::f64, "logits f64");
}
