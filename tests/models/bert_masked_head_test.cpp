// BertForMaskedLM::forward_with_labels: the full head and the head at labelled positions only
// (MaskedLMOptions::masked_positions_only) and the head without logits (return_logits = false)
// give one loss and the same gradient for every parameter; the edge cases (no labelled position)
// and bad labels.
#include <map>

#include <catch2/catch.hpp>

#include "amp/autocast.h"
#include "autograd/grad_mode.h"
#include "models/bert.h"
#include "ops/functional.h"
#include "tensor/factory.h"
#include "tests/support/tensor_testing.h"

using namespace precis;

namespace {

models::BertConfig small_config(Generator* gen) {
  models::BertConfig c = models::BertConfig::mini(97);
  c.hidden_size = 32;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.intermediate_size = 64;
  c.generator = gen;
  return c;
}

// ids (3, 9) in [1, 97); labels: the ids at a fixed fifth of the positions, -100 elsewhere.
std::pair<Tensor, Tensor> batch() {
  Generator g(11);
  const Tensor ids = randint(1, 97, {3, 9}, {.dtype = DType::i64}, &g);
  std::vector<int64_t> labels(27, -100);
  const std::vector<int64_t> id = ids.to_vector<int64_t>();
  for (int64_t p : {0, 4, 8, 10, 13, 21, 26}) labels[p] = id[p];
  return {ids, from_vector<int64_t>(labels, {3, 9})};
}

std::map<std::string, Tensor> take_grads(nn::Module& m) {
  std::map<std::string, Tensor> out;
  for (auto& [name, p] : m.named_parameters()) {
    if (p.grad().defined()) out[name] = p.grad().clone();
    p.set_grad(Tensor());
  }
  return out;
}

}  // namespace

TEST_CASE("bert: the masked-positions-only head gives the full head's loss and gradients (f64)", "[models]") {
  Generator gen(3);
  models::BertForMaskedLM mlm(small_config(&gen));
  mlm.to(DType::f64);
  mlm.eval();  // dropout off: both passes see the same encoder
  const auto [ids, labels] = batch();
  // Padding at the end of two sequences; one labelled position (26) lies in the padding.
  const Tensor mask = models::attention_mask_from_lengths(from_vector<int64_t>({9, 7, 5}), 9);

  const models::MaskedLMOutput full = mlm.forward_with_labels(ids, mask, labels);
  REQUIRE(full.logits.sizes() == Shape{3, 9, 97});
  REQUIRE(full.labels.sizes() == Shape{3, 9});
  // The same loss as the static loss() of forward()'s logits.
  PRECIS_REQUIRE_CLOSE(full.loss, models::BertForMaskedLM::loss(mlm.forward(ids, mask), labels), DType::f64);
  take_grads(mlm);
  full.loss.backward();
  const std::map<std::string, Tensor> g_full = take_grads(mlm);

  const models::MaskedLMOutput masked = mlm.forward_with_labels(ids, mask, labels, {.masked_positions_only = true});
  REQUIRE(masked.logits.sizes() == Shape{7, 97});
  CHECK(masked.labels.to_vector<int64_t>() ==
        index_select(labels.reshape({-1}), 0, from_vector<int64_t>({0, 4, 8, 10, 13, 21, 26})).to_vector<int64_t>());
  // Row r of the masked logits is the full logits at the r-th labelled position.
  const Tensor at =
      index_select(full.logits.detach().reshape({27, 97}), 0, from_vector<int64_t>({0, 4, 8, 10, 13, 21, 26}));
  PRECIS_REQUIRE_CLOSE(masked.logits.detach(), at, DType::f64);
  PRECIS_REQUIRE_CLOSE(masked.loss.detach(), full.loss.detach(), DType::f64);
  masked.loss.backward();
  const std::map<std::string, Tensor> g_masked = take_grads(mlm);

  // Every parameter gets the same gradient (the tied word embeddings collect both uses).
  REQUIRE(g_full.size() == g_masked.size());
  REQUIRE(g_full.count("bert.embeddings.word_embeddings.weight") == 1);
  REQUIRE(g_full.count("cls.predictions.transform.dense.weight") == 1);
  for (const auto& [name, g] : g_full) {
    INFO(name);
    REQUIRE(g_masked.count(name) == 1);
    PRECIS_REQUIRE_CLOSE(g_masked.at(name), g, DType::f64);
  }
}

TEST_CASE("bert: the head without logits (linear_cross_entropy) gives the full head's loss and gradients (f64)",
          "[models]") {
  Generator gen(5);
  models::BertForMaskedLM mlm(small_config(&gen));
  mlm.to(DType::f64);
  mlm.eval();
  const auto [ids, labels] = batch();
  const models::MaskedLMOutput full = mlm.forward_with_labels(ids, Tensor(), labels);
  take_grads(mlm);
  full.loss.backward();
  const std::map<std::string, Tensor> g_full = take_grads(mlm);
  for (bool masked_only : {false, true}) {
    INFO("masked_positions_only " << masked_only);
    const models::MaskedLMOutput fused = mlm.forward_with_labels(
        ids, Tensor(), labels, {.masked_positions_only = masked_only, .return_logits = false});
    CHECK_FALSE(fused.logits.defined());
    PRECIS_REQUIRE_CLOSE(fused.loss.detach(), full.loss.detach(), DType::f64);
    fused.loss.backward();
    const std::map<std::string, Tensor> g = take_grads(mlm);
    REQUIRE(g.size() == g_full.size());
    for (const auto& [name, gf] : g_full) {
      INFO(name);
      REQUIRE(g.count(name) == 1);
      PRECIS_REQUIRE_CLOSE(g.at(name), gf, DType::f64);
    }
  }
}

TEST_CASE("bert: the masked-positions-only head under bf16 autocast and with token types", "[models]") {
  Generator gen(4);
  models::BertForMaskedLM mlm(small_config(&gen));
  mlm.eval();
  const auto [ids, labels] = batch();
  std::vector<int64_t> segment(27);
  for (int64_t p = 0; p < 27; ++p) segment[p] = p % 9 >= 5;  // sentence B from position 5
  const Tensor types = from_vector<int64_t>(segment, {3, 9});
  amp::Autocast ac(DType::bf16);
  const models::MaskedLMOutput full = mlm.forward_with_labels(ids, Tensor(), labels, {.token_type_ids = types});
  const models::MaskedLMOutput masked =
      mlm.forward_with_labels(ids, Tensor(), labels, {.token_type_ids = types, .masked_positions_only = true});
  CHECK(full.loss.dtype() == DType::f32);
  CHECK(masked.loss.dtype() == DType::f32);
  CHECK(masked.logits.dtype() == DType::bf16);
  PRECIS_REQUIRE_CLOSE(masked.loss.detach(), full.loss.detach(), DType::bf16);
}

TEST_CASE("bert: forward_with_labels with no labelled position, and bad labels", "[models]") {
  Generator gen(5);
  models::BertForMaskedLM mlm(small_config(&gen));
  const auto [ids, labels] = batch();
  const Tensor none = full({3, 9}, -100, {.dtype = DType::i64});
  // No labelled position: an empty head, a NaN mean (cross_entropy's 0/0), and a graph that still
  // backpropagates zero (the training loop's guard for such a batch).
  const models::MaskedLMOutput out = mlm.forward_with_labels(ids, Tensor(), none, {.masked_positions_only = true});
  CHECK(out.logits.sizes() == Shape{0, 97});
  CHECK(out.labels.sizes() == Shape{0});
  CHECK(std::isnan(out.loss.item<double>()));
  mul(sum(out.logits), 0.0).backward();
  CHECK(mlm.transform_dense->weight.grad().defined());
  CHECK(max(abs(mlm.transform_dense->weight.grad())).item<double>() == 0.0);

  PRECIS_REQUIRE_THROWS_WITH_ALL(mlm.forward_with_labels(ids, Tensor(), labels.reshape({27})), ShapeError,
                                 "forward_with_labels", "labels [27] i64 cpu", "[3, 9] i64 cpu");
  PRECIS_REQUIRE_THROWS_WITH_ALL(mlm.forward_with_labels(ids, Tensor(), labels.to(DType::f32)), DTypeError,
                                 "forward_with_labels", "[3, 9] f32 cpu", "i64");
  PRECIS_REQUIRE_THROWS_WITH_ALL(mlm.forward_with_labels(ids, Tensor(), Tensor()), Error, "labels");
  // A label outside the vocabulary is cross_entropy's IndexError, in both modes.
  Tensor bad = labels.clone();
  {
    NoGradGuard ng;
    bad.select(0, 0).select(0, 0).fill_(97);
  }
  PRECIS_REQUIRE_THROWS_WITH_ALL(mlm.forward_with_labels(ids, Tensor(), bad, {.masked_positions_only = true}),
                                 IndexError, "target 97", "97 classes");
}
