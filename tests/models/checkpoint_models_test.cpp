// Activation checkpointing of the bundled models: BERT-mini's encoder layers and ResNet-18's blocks
// give the gradients (and parameters after a step, and BatchNorm statistics) of the plain model bit
// for bit, in f32, under bf16 autocast and under f16 autocast with the loss scaler, with dropout
// on, over accumulated micro-batches.
#include <catch2/catch.hpp>

#include <optional>

#include "amp/autocast.h"
#include "amp/grad_scaler.h"
#include "models/bert.h"
#include "models/resnet.h"
#include "ops/functional.h"
#include "ops/profiler.h"
#include "optim/sgd.h"
#include "tensor/factory.h"
#include "tests/support/tensor_testing.h"

using namespace precis;
using autograd::CheckpointMode;

namespace {

using Named = std::vector<std::pair<std::string, Tensor>>;

// What a run leaves: each parameter's gradient (before the step), each parameter and buffer after.
struct Outcome {
  Named grads, after;
};

struct Precision {
  std::optional<DType> autocast;  // none: f32
  bool scaler = false;
};

// Token ids in [1, vocab) from a fixed recurrence: the same batch in every run.
Tensor token_ids(int64_t b, int64_t l, int64_t vocab, int64_t salt) {
  std::vector<int64_t> v(static_cast<size_t>(b * l));
  uint64_t s = 88172645463325252ull + static_cast<uint64_t>(salt);
  for (auto& x : v) {
    s ^= s << 13, s ^= s >> 7, s ^= s << 17;
    x = 1 + static_cast<int64_t>(s % static_cast<uint64_t>(vocab - 1));
  }
  return from_vector<int64_t>(v, {b, l});
}

// Runs `micro` forward/backward passes of `loss_of` (accumulating), one optimizer step through the
// scaler when asked, and returns what the model holds.
Outcome train_step(nn::Module& model, const std::function<Tensor(int64_t)>& loss_of, const Precision& p, int micro) {
  optim::SGD opt(model.parameters(), {.lr = 0.01});
  amp::GradScaler scaler({.init_scale = 256.0, .enabled = p.scaler});
  manual_seed(9);
  for (int64_t i = 0; i < micro; ++i) {
    Tensor loss;
    {
      std::optional<amp::Autocast> ac;
      if (p.autocast) ac.emplace(*p.autocast);
      loss = loss_of(i);
    }
    scaler.scale(loss).backward();
  }
  Outcome o;
  for (auto& [name, t] : model.named_parameters()) o.grads.emplace_back(name, t.grad().clone());
  amp::StepResult r = scaler.step(opt);
  scaler.update();
  REQUIRE(r.applied());
  for (auto& [name, t] : model.state_dict()) o.after.emplace_back(name, t.clone());
  return o;
}

void require_same(const Outcome& a, const Outcome& b) {
  REQUIRE(a.grads.size() == b.grads.size());
  for (size_t i = 0; i < a.grads.size(); ++i) {
    INFO("gradient of " << a.grads[i].first);
    REQUIRE(a.grads[i].second.defined());
    PRECIS_REQUIRE_SAME_BITS(a.grads[i].second, b.grads[i].second);
  }
  REQUIRE(a.after.size() == b.after.size());
  for (size_t i = 0; i < a.after.size(); ++i) {
    INFO("after the step: " << a.after[i].first);
    PRECIS_REQUIRE_SAME_BITS(a.after[i].second, b.after[i].second);
  }
}

// Sequences of l tokens against hidden size 32: l <= 32 and l > 32 run the two sides of
// BertModel::selective_keep_policy.
Outcome bert_run(CheckpointMode mode, const Precision& p, int micro, int64_t l = 12) {
  Generator init(42);
  models::BertConfig c = models::BertConfig::mini(96);
  c.hidden_size = 32;
  c.num_hidden_layers = 3;
  c.num_attention_heads = 2;
  c.intermediate_size = 64;
  c.max_position_embeddings = std::max<int64_t>(16, l);
  c.generator = &init;
  models::BertForMaskedLM model(c);
  model.train();
  model.bert->set_checkpointing({.mode = mode});
  const int64_t b = 3;
  const Tensor mask = models::attention_mask_from_lengths(from_vector<int64_t>({l, l - 3, 5}), l);
  auto loss_of = [&](int64_t micro_step) {
    const Tensor ids = token_ids(b, l, c.vocab_size, micro_step);
    // Every third position is predicted; the rest ignored (-100).
    std::vector<int64_t> labels = token_ids(b, l, c.vocab_size, 100 + micro_step).to_vector<int64_t>();
    for (size_t i = 0; i < labels.size(); ++i)
      if (i % 3 != 0) labels[i] = -100;
    return model.forward_with_labels(ids, mask, from_vector<int64_t>(labels, {b, l})).loss;
  };
  return train_step(model, loss_of, p, micro);
}

Outcome resnet_run(CheckpointMode mode, const Precision& p, int micro) {
  Generator init(43);
  auto model = models::resnet18({.num_classes = 5, .width = 4, .generator = &init});
  model->train();
  model->set_checkpointing({.mode = mode});
  auto loss_of = [&](int64_t micro_step) {
    Generator data(100 + static_cast<uint64_t>(micro_step));
    const Tensor x = randn({2, 3, 32, 32}, {}, &data);
    const Tensor target = from_vector<int64_t>({1, 3});
    return cross_entropy(model->forward(x), target);
  };
  return train_step(*model, loss_of, p, micro);
}

// A one-layer BERT of hidden size 16 (two heads) over a 32-token vocabulary.
models::BertConfig one_layer_bert(int64_t max_positions) {
  models::BertConfig c = models::BertConfig::mini(32);
  c.hidden_size = 16;
  c.num_hidden_layers = 1;
  c.num_attention_heads = 2;
  c.intermediate_size = 32;
  c.max_position_embeddings = max_positions;
  return c;
}

const std::vector<std::pair<const char*, Precision>> kPrecisions = {
    {"f32", {}}, {"bf16 autocast", {DType::bf16, false}}, {"f16 autocast with the loss scaler", {DType::f16, true}}};

}  // namespace

TEST_CASE("BERT-mini with checkpointed encoder layers trains as without, bit for bit", "[models][checkpoint]") {
  for (const auto& [name, precision] : kPrecisions) {
    INFO(name);
    const Outcome plain = bert_run(CheckpointMode::none, precision, 2);
    for (CheckpointMode mode : {CheckpointMode::full, CheckpointMode::selective}) {
      INFO(autograd::checkpoint_mode_name(mode));
      require_same(bert_run(mode, precision, 2), plain);
    }
  }
}

TEST_CASE("BERT with sequences longer than its hidden size trains as without under selective, bit for bit",
          "[models][checkpoint]") {
  // The encoder layers then keep the attention context (and recompute the value projection).
  for (const auto& [name, precision] : kPrecisions) {
    INFO(name);
    require_same(bert_run(CheckpointMode::selective, precision, 2, 40), bert_run(CheckpointMode::none, precision, 2, 40));
  }
}

TEST_CASE("BERT's selective layers recompute v, and the context while it is the cheaper product",
          "[models][checkpoint]") {
  // One layer, hidden 16, no bias FLOPs counted: a step's FLOPs with selective minus without are
  // exactly the recomputed GEMMs: q·kᵀ (2·B·L²·hidden) and the value projection (2·B·L·hidden²)
  // always, softmax·v (as q·kᵀ) at L <= hidden only.
  models::BertModel bert(one_layer_bert(32));
  bert.train();
  auto flops = [&](CheckpointMode mode, int64_t l) {
    bert.set_checkpointing({.mode = mode});
    bert.zero_grad();
    profiler::FlopCounter count;
    sum(bert.forward(token_ids(2, l, 32, l))).backward();
    return count.flops();
  };
  const double b = 2, h = 16;
  for (int64_t l : {8, 16, 24}) {
    INFO("L = " << l);
    const double scores = 2 * b * l * l * h, value = 2 * b * l * h * h;
    const double recomputed = flops(CheckpointMode::selective, l) - flops(CheckpointMode::none, l);
    REQUIRE(recomputed == scores + value + (l <= h ? scores : 0));
  }
  // Options other than selective's defaults are the caller's choice, run as given: keeping every
  // linear and the two products recomputes no GEMM at all.
  const double plain = flops(CheckpointMode::none, 24);
  bert.set_checkpointing({.mode = CheckpointMode::selective,
                          .kept_ops = {OpId::linear, OpId::linear_gelu, OpId::matmul}});
  bert.zero_grad();
  profiler::FlopCounter with_matmul;
  sum(bert.forward(token_ids(2, 24, 32, 24))).backward();
  REQUIRE(with_matmul.flops() == plain);
}

TEST_CASE("ResNet-18 with checkpointed stages trains as without, bit for bit", "[models][checkpoint]") {
  for (const auto& [name, precision] : kPrecisions) {
    INFO(name);
    const Outcome plain = resnet_run(CheckpointMode::none, precision, 2);
    for (CheckpointMode mode : {CheckpointMode::full, CheckpointMode::selective}) {
      INFO(autograd::checkpoint_mode_name(mode));
      require_same(resnet_run(mode, precision, 2), plain);
    }
  }
}

TEST_CASE("nn::Sequential checkpoints each child", "[models][checkpoint]") {
  auto run = [](CheckpointMode mode) {
    Generator init(44);
    nn::Sequential seq{nn::Linear(8, 16, {.generator = &init}), nn::GELU(), nn::Dropout(0.3),
                       nn::Linear(16, 8, {.generator = &init}), nn::LayerNorm(8)};
    seq.set_checkpointing({.mode = mode});
    Outcome o;
    manual_seed(3);
    Tensor x = randn({4, 8}, {}, &init);
    sum(seq(x) * seq(x)).backward();
    for (auto& [name, t] : seq.named_parameters()) o.grads.emplace_back(name, t.grad());
    REQUIRE(seq.checkpointing().mode == mode);
    return o;
  };
  const Outcome plain = run(CheckpointMode::none);
  require_same(run(CheckpointMode::full), plain);
  require_same(run(CheckpointMode::selective), plain);
}

TEST_CASE("the models' checkpointing options make their layers checkpointed regions", "[models][checkpoint]") {
  // So the equalities above compare a recomputation with the plain run, not the plain run twice.
  models::BertModel bert(one_layer_bert(8));
  auto resnet = models::resnet18({.num_classes = 3, .width = 4});
  const Tensor ids = token_ids(2, 8, 32, 0);
  const Tensor images = randn({2, 3, 32, 32});
  for (auto [mode, node] : {std::pair{CheckpointMode::full, "CheckpointBackward"},
                            std::pair{CheckpointMode::selective, "CheckpointBackward(selective)"}}) {
    bert.set_checkpointing({.mode = mode});
    REQUIRE(bert.forward(ids).grad_fn()->name() == node);
    // features = flatten(pool(layer4(...))): the pool's input comes from the last block's region,
    // whose input comes from the block before's, back to layer1's first: one region per residual
    // block (eight in resnet18), not one per stage.
    resnet->set_checkpointing({.mode = mode});
    const Tensor features = resnet->features(images);
    std::shared_ptr<autograd::Node> region = features.grad_fn()->next_edges()[0].fn->next_edges()[0].fn;
    int regions = 0;
    while (region != nullptr && region->name() == node) {
      ++regions;
      std::shared_ptr<autograd::Node> previous;
      for (const autograd::Edge& e : region->next_edges())
        if (e.valid() && e.fn->name() == node) previous = e.fn;
      region = previous;
    }
    CHECK(regions == 8);
  }
  bert.set_checkpointing({.mode = CheckpointMode::none});
  REQUIRE(bert.forward(ids).grad_fn()->name() != "CheckpointBackward");
}
