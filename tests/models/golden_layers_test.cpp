// The torch.nn-style layers against PyTorch (fixtures from tests/golden/gen_layer_fixtures.py):
// TransformerEncoderLayer post-norm and pre-norm with masks, MultiheadAttention's weights, and two
// small networks a PyTorch user would write - a transformer classifier and a GroupNorm CNN - whose
// f32 and f64 forward and backward match PyTorch's; then both train a few steps in f32, bf16
// autocast, f16 autocast with the loss scaler, and the bf16/f16 model modes with fp32 masters.
#include <cmath>
#include <functional>

#include <catch2/catch.hpp>

#include "amp/amp.h"
#include "autograd/grad_mode.h"
#include "models/nn/nn.h"
#include "ops/functional.h"
#include "optim/adam.h"
#include "tensor/safetensors.h"
#include "tests/support/golden.h"

using namespace precis;

namespace {

StateDict load_fixture(const std::string& name) {
  return testing::load_golden_dict(testing::golden_dir() + "/layers/" + name);
}

// Whole layers accumulate more rounding than one op: f32 gets 5x the table's tolerance, as the
// golden model tests (tests/models/golden_models_test.cpp).
void require_close(const Tensor& actual, const Tensor& expected, DType dtype, const std::string& what) {
  testing::require_golden_close(actual, expected, dtype, what, 5.0);
}

// An i64 0/1 mask from the fixture as the bool mask PyTorch used.
Tensor mask(const StateDict& fx, const std::string& name) { return ne(fx.at(name), 0); }

// The fixture's input as a fresh leaf of `dtype` that requires grad.
Tensor leaf(const StateDict& fx, const std::string& name, DType dtype) {
  return fx.at(name).to(dtype).clone().requires_grad_();
}

// Converts m to dtype and loads the fixture's "state." entries into it (strict).
void load_state(nn::Module& m, const StateDict& fx, DType dtype) {
  m.to(dtype);
  REQUIRE(m.load_state_dict(state_subset(fx, "state.")).ok());
}

void check_param_grads(const nn::Module& m, const StateDict& fx, DType dtype) {
  for (const auto& [name, p] : m.named_parameters()) {
    INFO(name);
    REQUIRE(p.grad().defined());
    require_close(p.grad(), fx.at("grad." + name), dtype, "grad." + name);
  }
}

// The network of gen_layer_fixtures.py's TransformerClassifier: image rows as tokens, a learned
// position table, a pre-norm encoder with a final LayerNorm, mean pooling over real tokens.
class TransformerClassifier : public nn::Module {
 public:
  explicit TransformerClassifier(int64_t in_dim = 8, int64_t seq = 6, int64_t d = 16, int64_t classes = 10)
      : embed_(add("embed", nn::Linear(in_dim, d))),
        encoder_(add("encoder", nn::TransformerEncoder(
                                    nn::TransformerEncoderLayer(d, 4, {.dim_feedforward = 32, .dropout = 0.0,
                                                                       .activation = "gelu", .batch_first = true,
                                                                       .norm_first = true}),
                                    2, nn::LayerNorm(d)))),
        head_(add("head", nn::Linear(d, classes))) {
    pos = randn({1, seq, d}) * 0.02;
    register_parameter("pos", pos);
  }

  /// x: (N, S, in_dim); pad: (N, S) bool, true = padding.
  Tensor forward(const Tensor& x, const Tensor& pad) {
    Tensor h = encoder_(embed_(x) + pos, Tensor(), pad);
    Tensor keep = eq(pad, false).unsqueeze(-1).to(h.dtype());
    return head_((h * keep).sum(1) / keep.sum(1));
  }

  Tensor pos;

 private:
  nn::Child<nn::Linear> embed_;
  nn::Child<nn::TransformerEncoder> encoder_;
  nn::Child<nn::Linear> head_;
};

nn::Sequential groupnorm_cnn() {
  return nn::Sequential{nn::Conv2d(1, 8, 3, {.padding = 1}), nn::GroupNorm(4, 8), nn::ReLU(),
                        nn::Conv2d(8, 8, 3, {.padding = 1}), nn::GroupNorm(2, 8), nn::ReLU(),
                        nn::AvgPool2d(2),
                        nn::Conv2d(8, 16, 3, {.padding = 1}), nn::GroupNorm(4, 16), nn::ReLU(),
                        nn::AdaptiveAvgPool2d(1), nn::Flatten(), nn::Linear(16, 10)};
}

// Loads the fixture into `m` in `dtype`, runs `logits_of`, the label-smoothed loss and backward,
// and compares logits, loss and every parameter gradient with PyTorch's.
void check_model(nn::Module& m, const StateDict& fx, DType dtype, const std::function<Tensor()>& logits_of) {
  load_state(m, fx, dtype);
  m.zero_grad();
  Tensor logits = logits_of();
  CHECK(logits.dtype() == dtype);
  require_close(logits, fx.at("logits"), dtype, "logits");
  Tensor loss = cross_entropy(logits, fx.at("target"), {.label_smoothing = 0.1});
  require_close(loss, fx.at("loss"), dtype, "loss");
  loss.backward();
  check_param_grads(m, fx, dtype);
}

// Loads the fixture into `layer`, runs forward and backward on its input (and src_mask, the
// fixture's src_key_padding_mask) and compares the output and every gradient.
void check_encoder_layer(nn::TransformerEncoderLayer& layer, const StateDict& fx, DType dtype, const Tensor& src_mask) {
  load_state(layer, fx, dtype);
  Tensor x = leaf(fx, "input", dtype);
  Tensor out = layer.forward(x, src_mask, mask(fx, "src_key_padding_mask"));
  require_close(out, fx.at("out"), dtype, "out");
  sum(out * fx.at("grad_out").to(dtype)).backward();
  require_close(x.grad(), fx.at("grad.input"), dtype, "grad.input");
  check_param_grads(layer, fx, dtype);
}

}  // namespace

TEST_CASE("golden: TransformerEncoderLayer post-norm, causal and padding masks, matches PyTorch",
          "[models][golden][layers]") {
  const StateDict fx = load_fixture("encoder_layer_post.safetensors");
  for (DType dtype : {DType::f64, DType::f32}) {
    nn::TransformerEncoderLayer layer(16, 4, {.dim_feedforward = 32, .dropout = 0.0, .activation = "relu"});
    check_encoder_layer(layer, fx, dtype, mask(fx, "src_mask"));  // input (S, N, E): sequence-first, the default
  }
}

TEST_CASE("golden: TransformerEncoderLayer norm_first, gelu, batch_first, matches PyTorch", "[models][golden][layers]") {
  const StateDict fx = load_fixture("encoder_layer_pre.safetensors");
  for (DType dtype : {DType::f64, DType::f32}) {
    nn::TransformerEncoderLayer layer(16, 4, {.dim_feedforward = 32, .dropout = 0.0, .activation = "gelu",
                                              .layer_norm_eps = 1e-6, .batch_first = true, .norm_first = true});
    check_encoder_layer(layer, fx, dtype, Tensor());
  }
}

TEST_CASE("golden: MultiheadAttention (output, weights) match PyTorch, gradients through both",
          "[models][golden][layers]") {
  const StateDict fx = load_fixture("mha_weights.safetensors");
  for (DType dtype : {DType::f64, DType::f32}) {
    nn::MultiheadAttention mha(12, 3);
    load_state(mha, fx, dtype);
    Tensor q = leaf(fx, "query", dtype), k = leaf(fx, "key", dtype), v = leaf(fx, "value", dtype);
    const Tensor pad = mask(fx, "key_padding_mask");
    auto [out, weights] = mha.forward(q, k, v, {.key_padding_mask = pad});
    require_close(out, fx.at("out"), dtype, "out");
    require_close(weights, fx.at("weights"), dtype, "weights");
    {
      NoGradGuard ng;
      auto [o, per_head] = mha.forward(q, k, v, {.key_padding_mask = pad, .average_attn_weights = false});
      require_close(per_head, fx.at("weights_per_head"), dtype, "weights_per_head");
    }
    (sum(out * fx.at("grad_out").to(dtype)) + sum(weights * fx.at("grad_weights").to(dtype))).backward();
    require_close(q.grad(), fx.at("grad.query"), dtype, "grad.query");
    require_close(k.grad(), fx.at("grad.key"), dtype, "grad.key");
    require_close(v.grad(), fx.at("grad.value"), dtype, "grad.value");
    check_param_grads(mha, fx, dtype);
  }
}

TEST_CASE("golden: a transformer classifier from the new layers matches PyTorch (f32, f64)",
          "[models][golden][layers]") {
  const StateDict fx = load_fixture("transformer_classifier.safetensors");
  for (DType dtype : {DType::f64, DType::f32}) {
    TransformerClassifier model;
    model.train();
    check_model(model, fx, dtype, [&] { return model.forward(fx.at("input").to(dtype), mask(fx, "pad")); });
  }
}

TEST_CASE("golden: a GroupNorm CNN from the new layers matches PyTorch (f32, f64)", "[models][golden][layers]") {
  const StateDict fx = load_fixture("groupnorm_cnn.safetensors");
  for (DType dtype : {DType::f64, DType::f32}) {
    nn::Sequential model = groupnorm_cnn();
    check_model(model, fx, dtype, [&] { return model(fx.at("input").to(dtype)); });
  }
}

namespace {

enum class Mode { f32, bf16_autocast, f16_autocast_scaler, bf16_model, f16_model_scaler };
const char* mode_name(Mode m) {
  switch (m) {
    case Mode::f32: return "f32";
    case Mode::bf16_autocast: return "bf16 autocast";
    case Mode::f16_autocast_scaler: return "f16 autocast + GradScaler";
    case Mode::bf16_model: return "bf16 model, fp32 masters";
    case Mode::f16_model_scaler: return "f16 model, fp32 masters, GradScaler";
  }
  return "?";
}

// Trains `model` (fixture weights) on the fixture batch for `steps` AdamW steps in `mode`; returns
// the loss at every step. The optimizer is built before the model is converted (Module::to keeps
// the parameters), as PyTorch users write it.
std::vector<double> train_steps(nn::Module& model, const StateDict& fx, Mode mode, int steps,
                                const std::function<Tensor(DType)>& logits_of) {
  REQUIRE(model.load_state_dict(state_subset(fx, "state.")).ok());
  optim::AdamW opt(model.parameters(), {.lr = 5e-3, .weight_decay = 0.0});
  const bool model_mode = mode == Mode::bf16_model || mode == Mode::f16_model_scaler;
  const DType low = (mode == Mode::f16_autocast_scaler || mode == Mode::f16_model_scaler) ? DType::f16 : DType::bf16;
  if (model_mode) model.to(low);
  const DType input_dtype = model_mode ? low : DType::f32;
  amp::GradScaler scaler({.enabled = low == DType::f16});
  std::vector<double> losses;
  for (int s = 0; s < steps; ++s) {
    opt.zero_grad();
    Tensor loss;
    {
      amp::Autocast ac(low, DeviceType::cpu, /*enabled=*/mode == Mode::bf16_autocast || mode == Mode::f16_autocast_scaler);
      loss = cross_entropy(logits_of(input_dtype).to(DType::f32), fx.at("target"), {.label_smoothing = 0.1});
    }
    scaler.scale(loss).backward();
    scaler.step(opt);
    scaler.update();
    losses.push_back(loss.item<double>());
  }
  return losses;
}

void check_training(const std::string& what, const std::function<std::unique_ptr<nn::Module>()>& make,
                    const StateDict& fx, const std::function<Tensor(nn::Module&, DType)>& logits_of) {
  constexpr int kSteps = 25;
  std::vector<double> reference;
  for (Mode mode : {Mode::f32, Mode::bf16_autocast, Mode::f16_autocast_scaler, Mode::bf16_model,
                    Mode::f16_model_scaler}) {
    INFO(what << ", " << mode_name(mode));
    manual_seed(0);
    std::unique_ptr<nn::Module> model = make();
    const std::vector<double> losses =
        train_steps(*model, fx, mode, kSteps, [&](DType dtype) { return logits_of(*model, dtype); });
    for (double l : losses) REQUIRE(std::isfinite(l));
    INFO("loss " << losses.front() << " -> " << losses.back());
    CHECK(losses.back() < 0.6 * losses.front());  // it learns the batch
    if (mode == Mode::f32) {
      reference = losses;
    } else {
      // Low precision tracks fp32: the final loss within 10% of the fp32 run's.
      CHECK(std::abs(losses.back() - reference.back()) < 0.1 * reference.back());
    }
  }
}

}  // namespace

TEST_CASE("the transformer classifier and the GroupNorm CNN train in f32, bf16 and f16 (+ scaler)",
          "[models][layers][amp]") {
  const StateDict tfx = load_fixture("transformer_classifier.safetensors");
  check_training("transformer classifier", [] { return std::make_unique<TransformerClassifier>(); }, tfx,
                 [&](nn::Module& m, DType dtype) {
                   return static_cast<TransformerClassifier&>(m).forward(tfx.at("input").to(dtype), mask(tfx, "pad"));
                 });
  const StateDict cfx = load_fixture("groupnorm_cnn.safetensors");
  check_training("GroupNorm CNN", [] { return std::make_unique<nn::Sequential>(groupnorm_cnn()); }, cfx,
                 [&](nn::Module& m, DType dtype) { return m(cfx.at("input").to(dtype)); });
}
