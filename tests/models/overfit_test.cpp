// Overfitting one batch: a small ResNet and a small BERT drive their training loss to near zero in
// f32, under bf16 autocast, and under f16 autocast with the dynamic loss scaler. A model that
// cannot memorise 8 examples has a broken forward, backward or optimizer hookup.
#include <functional>

#include <catch2/catch.hpp>

#include "amp/autocast.h"
#include "amp/grad_scaler.h"
#include "models/bert.h"
#include "models/resnet.h"
#include "ops/functional.h"
#include "optim/adam.h"
#include "tensor/factory.h"

using namespace precis;

namespace {

enum class Mode { f32, bf16_autocast, f16_scaler };

const char* mode_name(Mode m) {
  return m == Mode::f32 ? "f32" : m == Mode::bf16_autocast ? "bf16 autocast" : "f16 autocast + GradScaler";
}

// Runs up to max_steps Adam steps of loss_fn() and returns the last loss (stops early below target).
double overfit(nn::Module& model, Mode mode, double lr, int max_steps, double target,
               const std::function<Tensor()>& loss_fn, int* steps_taken) {
  optim::Adam opt(model.parameters(), {.lr = lr});
  amp::GradScaler scaler;
  double loss_value = 0;
  for (int step = 0; step < max_steps; ++step) {
    opt.zero_grad();
    Tensor loss;
    if (mode == Mode::f32) {
      loss = loss_fn();
    } else {
      amp::Autocast autocast(mode == Mode::bf16_autocast ? DType::bf16 : DType::f16);
      loss = loss_fn();
    }
    REQUIRE(loss.dtype() == DType::f32);
    loss_value = loss.item<double>();
    *steps_taken = step + 1;
    if (loss_value < target) break;
    if (mode == Mode::f16_scaler) {
      scaler.scale(loss).backward();
      scaler.step(opt);
      scaler.update();
    } else {
      loss.backward();
      opt.step();
    }
  }
  return loss_value;
}

}  // namespace

TEST_CASE("overfit: resnet20 (width 8) memorises 8 Fashion-MNIST-sized images", "[models][overfit]") {
  for (Mode mode : {Mode::f32, Mode::bf16_autocast, Mode::f16_scaler}) {
    Generator gen(42);
    auto model = models::resnet20({.num_classes = 10, .in_channels = 1, .width = 8, .generator = &gen});
    const Tensor x = randn({8, 1, 28, 28}, {}, &gen);
    const Tensor y = randint(0, 10, {8}, {.dtype = DType::i64}, &gen);
    int steps = 0;
    const double loss = overfit(*model, mode, 1e-2, 150, 0.05, [&] { return cross_entropy((*model)(x), y); }, &steps);
    INFO(mode_name(mode) << ": loss " << loss << " after " << steps << " steps");
    CHECK(loss < 0.05);
  }
}

TEST_CASE("overfit: resnet20 as a bf16 model (fp32 master weights in the optimizer, BatchNorm fp32)", "[models][overfit]") {
  Generator gen(42);
  auto model = models::resnet20({.num_classes = 10, .in_channels = 1, .width = 8, .generator = &gen});
  model->to(DType::bf16);  // docs/design/precision.md's low-precision model mode
  const Tensor x = randn({8, 1, 28, 28}, {}, &gen).to(DType::bf16);
  const Tensor y = randint(0, 10, {8}, {.dtype = DType::i64}, &gen);
  int steps = 0;
  const double loss = overfit(*model, Mode::f32, 1e-2, 150, 0.05,
                              [&] { return cross_entropy((*model)(x).to(DType::f32), y); }, &steps);
  INFO("bf16 model: loss " << loss << " after " << steps << " steps");
  CHECK(loss < 0.05);
  CHECK(model->fc->weight.dtype() == DType::bf16);
  CHECK(model->bn1->weight.dtype() == DType::f32);
}

TEST_CASE("overfit: a small BERT (2 layers, hidden 64) memorises a masked-LM batch", "[models][overfit]") {
  models::BertConfig config;
  config.vocab_size = 64;
  config.hidden_size = 64;
  config.num_hidden_layers = 2;
  config.num_attention_heads = 4;
  config.intermediate_size = 128;
  config.max_position_embeddings = 32;
  config.hidden_dropout_prob = 0.0;
  config.attention_probs_dropout_prob = 0.0;
  for (Mode mode : {Mode::f32, Mode::bf16_autocast, Mode::f16_scaler}) {
    Generator gen(7);
    config.generator = &gen;
    models::BertForMaskedLM model(config);
    const int64_t batch = 8, len = 16, mask_id = 3;
    const Tensor tokens = randint(5, config.vocab_size, {batch, len}, {.dtype = DType::i64}, &gen);
    // Mask about 15% of the positions (never the first); the labels are the original tokens there.
    Tensor masked = lt(rand({batch, len}, {}, &gen), 0.15);
    Tensor input = where(masked, full({batch, len}, mask_id, {.dtype = DType::i64}), tokens);
    Tensor labels = where(masked, tokens, full({batch, len}, -100, {.dtype = DType::i64}));
    // Sequence 1 is padded after 12 tokens.
    Tensor lengths = from_vector<int64_t>({16, 12, 16, 16, 16, 16, 16, 16});
    Tensor attention = models::attention_mask_from_lengths(lengths, len);
    int steps = 0;
    const double loss = overfit(model, mode, 1e-2, 200, 0.05, [&] {
      return models::BertForMaskedLM::loss(model.forward(input, attention), labels);
    }, &steps);
    INFO(mode_name(mode) << ": loss " << loss << " after " << steps << " steps");
    CHECK(loss < 0.05);
  }
}
