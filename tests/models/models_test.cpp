// The bundled models: names (torchvision / Hugging Face), sizes, heads, masks, configuration.
#include <cstdio>
#include <fstream>

#include <catch2/catch.hpp>

#include "autograd/grad_mode.h"
#include "models/bert.h"
#include "models/resnet.h"
#include "amp/autocast.h"
#include "ops/memory_format.h"
#include "ops/functional.h"
#include "tensor/factory.h"
#include "tests/support/tensor_testing.h"

using namespace precis;

namespace {
bool has_key(const StateDict& d, const std::string& k) { return d.count(k) == 1; }
}  // namespace

TEST_CASE("resnet: torchvision names and parameter counts", "[models]") {
  auto r18 = models::resnet18();
  CHECK(r18->num_parameters() == 11689512);  // torchvision resnet18
  const StateDict sd = r18->state_dict();
  CHECK(sd.size() == 122);  // torchvision's resnet18 state_dict has 122 entries
  for (const char* k : {"conv1.weight", "bn1.running_mean", "bn1.num_batches_tracked", "layer1.0.conv1.weight",
                        "layer1.1.bn2.bias", "layer2.0.downsample.0.weight", "layer2.0.downsample.1.running_var",
                        "layer4.1.conv2.weight", "fc.weight", "fc.bias"})
    CHECK(has_key(sd, k));
  CHECK_FALSE(has_key(sd, "layer1.0.downsample.0.weight"));
  CHECK(sd.at("conv1.weight").sizes() == Shape{64, 3, 7, 7});
  CHECK(models::resnet34()->num_parameters() == 21797672);
  auto r50 = models::resnet50();
  CHECK(r50->num_parameters() == 25557032);
  CHECK(r50->state_dict().count("layer1.0.downsample.0.weight") == 1);
  CHECK(r50->state_dict().at("layer4.2.conv3.weight").sizes() == Shape{2048, 512, 1, 1});
}

TEST_CASE("resnet: CIFAR layouts, in_channels, width and forward shapes", "[models]") {
  auto r20 = models::resnet20({.num_classes = 10});
  // He et al.'s resnet20 has 0.27M parameters; the option-B projections add two 1x1 convs + BN.
  CHECK(r20->num_parameters() == 272474);
  CHECK(r20->layers.size() == 3);
  CHECK(r20->state_dict().at("conv1.weight").sizes() == Shape{16, 3, 3, 3});
  CHECK(r20->state_dict().count("layer3.0.downsample.0.weight") == 1);
  CHECK(r20->state_dict().count("layer3.2.conv2.weight") == 1);
  CHECK(models::resnet32()->layers[0]->size() == 5);
  CHECK(models::resnet56()->layers[2]->size() == 9);
  auto fm = models::resnet20({.num_classes = 10, .in_channels = 1, .width = 4});
  fm->eval();
  CHECK((*fm)(randn({2, 1, 28, 28})).sizes() == Shape{2, 10});
  auto c18 = models::resnet18_cifar({.num_classes = 10, .width = 4});
  CHECK_FALSE(c18->maxpool);
  CHECK(c18->state_dict().at("conv1.weight").sizes() == Shape{4, 3, 3, 3});
  CHECK((*c18)(randn({2, 3, 32, 32})).sizes() == Shape{2, 10});
  auto z = models::resnet18_cifar({.width = 4, .zero_init_residual = true});
  CHECK(max(abs(z->layers[0]->at<models::BasicBlock>(0).bn2->weight)).item<float>() == 0.0f);
  PRECIS_REQUIRE_THROWS_WITH_ALL((*fm)(randn({2, 3, 28, 28})), ShapeError, "ResNet", "[2, 3, 28, 28]", "(N, 1, H, W)");
  PRECIS_REQUIRE_THROWS_WITH_ALL(models::resnet("resnet19"), ValueError, "unknown model 'resnet19'", "resnet20");
  // Stage widths are checked arithmetic: 70 stages would shift the width past 63 bits.
  PRECIS_REQUIRE_THROWS_WITH_ALL(models::ResNet(models::BlockKind::basic, std::vector<int64_t>(70, 0),
                                                models::Stem::cifar, {.width = 4}),
                                 ValueError, "models::ResNet: stage 62 of 70", "fit in int64");
  PRECIS_REQUIRE_THROWS_WITH_ALL(models::ResNet(models::BlockKind::basic, {1, -1}, models::Stem::cifar, {.width = 4}),
                                 ValueError, "stage 2", "(-1) must not be negative");
  // Seeded construction is reproducible.
  Generator g1(5), g2(5);
  auto a = models::resnet20({.width = 4, .generator = &g1}), b = models::resnet20({.width = 4, .generator = &g2});
  CHECK(a->fc->weight.to_vector<float>() == b->fc->weight.to_vector<float>());
  CHECK(a->layers[1]->at<models::BasicBlock>(0).conv1->weight.to_vector<float>() ==
        b->layers[1]->at<models::BasicBlock>(0).conv1->weight.to_vector<float>());
}

TEST_CASE("bert: BERT-mini has Hugging Face's names and size", "[models]") {
  models::BertConfig negative = models::BertConfig::mini();
  negative.num_hidden_layers = -1;
  PRECIS_REQUIRE_THROWS_WITH_ALL(models::BertModel(negative), ValueError, "num_hidden_layers is -1");
  models::BertModel bert(models::BertConfig::mini());
  CHECK(bert.num_parameters() == 11170560);  // prajjwal1/bert-mini: 11.17M
  const StateDict sd = bert.state_dict();
  for (const char* k :
       {"embeddings.word_embeddings.weight", "embeddings.position_embeddings.weight",
        "embeddings.token_type_embeddings.weight", "embeddings.LayerNorm.weight", "embeddings.LayerNorm.bias",
        "encoder.layer.0.attention.self.query.weight", "encoder.layer.0.attention.self.key.bias",
        "encoder.layer.0.attention.self.value.weight", "encoder.layer.0.attention.output.dense.weight",
        "encoder.layer.0.attention.output.LayerNorm.weight", "encoder.layer.3.intermediate.dense.weight",
        "encoder.layer.3.output.dense.weight", "encoder.layer.3.output.LayerNorm.bias", "pooler.dense.weight"})
    CHECK(has_key(sd, k));
  CHECK(sd.at("encoder.layer.2.intermediate.dense.weight").sizes() == Shape{1024, 256});
  CHECK(sd.size() == 5 + 4 * 16 + 2);
  // HF initialisation: N(0, 0.02), the padding row zero, LayerNorm (1, 0).
  const Tensor w = bert.embeddings->word_embeddings->weight;
  CHECK(std::sqrt(var(w).item<double>()) == Approx(0.02).epsilon(0.02));
  CHECK(max(abs(w.select(0, 0))).item<float>() == 0.0f);
}

TEST_CASE("bert: the masked-LM head is tied to the word embeddings", "[models]") {
  models::BertConfig c = models::BertConfig::mini(100);
  c.num_hidden_layers = 1;
  c.hidden_size = 32;
  c.intermediate_size = 64;
  models::BertForMaskedLM mlm(c);
  const StateDict sd = mlm.state_dict();
  for (const char* k : {"bert.embeddings.word_embeddings.weight", "cls.predictions.transform.dense.weight",
                        "cls.predictions.transform.LayerNorm.weight", "cls.predictions.bias",
                        "cls.predictions.decoder.weight", "cls.predictions.decoder.bias"})
    CHECK(has_key(sd, k));
  CHECK_FALSE(has_key(sd, "bert.pooler.dense.weight"));
  CHECK(mlm.decoder->weight.is_same(mlm.bert->embeddings->word_embeddings->weight));
  // named_parameters lists the tied tensors once (an optimizer sees each parameter once).
  size_t n = 0;
  for (auto& [name, p] : mlm.named_parameters()) n += name.find("decoder") != std::string::npos;
  CHECK(n == 0);
  // The gradient of the shared matrix collects both uses.
  mlm.eval();
  const Tensor ids = randint(1, 100, {2, 6});
  Tensor logits = mlm.forward(ids, Tensor());
  CHECK(logits.sizes() == Shape{2, 6, 100});
  Tensor labels = full({2, 6}, -100, {.dtype = DType::i64});
  {
    NoGradGuard ng;
    labels.select(1, 2).copy_(ids.select(1, 2));
  }
  models::BertForMaskedLM::loss(logits, labels).backward();
  CHECK(mlm.bert->embeddings->word_embeddings->weight.grad().defined());
  // Tying survives a dtype change and a clone.
  mlm.to(DType::bf16);
  CHECK(mlm.decoder->weight.is_same(mlm.bert->embeddings->word_embeddings->weight));
  auto copy = mlm.clone<models::BertForMaskedLM>();
  CHECK(copy->decoder->weight.is_same(copy->bert->embeddings->word_embeddings->weight));
  for (auto& [name, p] : copy->named_parameters())
    if (name == "cls.predictions.bias") CHECK(copy->decoder->bias.is_same(p));
  CHECK_FALSE(copy->decoder->weight.is_same(mlm.decoder->weight));
}

TEST_CASE("bert: padding masks and the classification head", "[models]") {
  models::BertConfig c = models::BertConfig::mini(50);
  c.num_hidden_layers = 2;
  c.hidden_size = 32;
  c.intermediate_size = 64;
  models::BertForSequenceClassification clf(c, 3);
  clf.eval();
  CHECK(clf.state_dict().count("classifier.weight") == 1);
  CHECK(clf.state_dict().count("bert.pooler.dense.bias") == 1);
  const Tensor lengths = from_vector<int64_t>({5, 3});
  const Tensor mask = models::attention_mask_from_lengths(lengths, 5);
  CHECK(mask.to_vector<bool>() == std::vector<bool>{true, true, true, true, true, true, true, true, false, false});
  Tensor ids = randint(1, 50, {2, 5});
  Tensor out = clf.forward(ids, mask);
  CHECK(out.sizes() == Shape{2, 3});
  // Changing padded tokens does not change the output; an i64 0/1 mask works like the bool one.
  Tensor ids2 = ids.clone();
  {
    NoGradGuard ng;
    ids2.select(0, 1).slice(0, 3, 5).fill_(7);
  }
  PRECIS_REQUIRE_CLOSE(clf.forward(ids2, mask.to(DType::i64)), out, DType::f32);
  Tensor types = zeros({2, 5}, {.dtype = DType::i64});
  PRECIS_REQUIRE_CLOSE(clf.forward(ids, mask, types), out, DType::f32);
  PRECIS_REQUIRE_THROWS_WITH_ALL(clf.forward(ids, zeros({2, 4})), ShapeError, "attention_mask", "[2, 4]");
  PRECIS_REQUIRE_THROWS_WITH_ALL(clf.forward(randint(0, 50, {1, 600})), ShapeError, "max_position_embeddings 512");
}

TEST_CASE("bert: the vocabulary size comes from a vocab file", "[models]") {
  const std::string path = "bert_vocab_test.txt";
  {
    std::ofstream f(path);
    f << "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nthe\n##s\n";
  }
  const auto c = models::BertConfig::mini_from_vocab_file(path);
  std::remove(path.c_str());
  CHECK(c.vocab_size == 7);
  CHECK(c.hidden_size == 256);
  CHECK(c.num_hidden_layers == 4);
  CHECK(c.num_attention_heads == 4);
  CHECK(c.intermediate_size == 1024);
  PRECIS_REQUIRE_THROWS_WITH_ALL(models::BertConfig::mini_from_vocab_file("/nonexistent/vocab.txt"), IOError,
                                 "/nonexistent/vocab.txt");
}

// A channels-last input runs the whole network channels-last (ops/memory_format.h) and gives the
// NCHW run's loss and parameter gradients: the CIFAR BasicBlock network in f32 (oneDNN's nhwc
// kernels), the ImageNet Bottleneck one (max-pool, 1×1 late maps) in f64, where the tiny batch's
// ill-conditioned batch norms cannot hide a difference behind rounding; and bf16 autocast, whose
// channels-last run must be no further from the f32 NCHW gradients than the bf16 NCHW run (bf16
// rounding through 20 layers differs with the summation order, so the two bf16 runs differ).
TEST_CASE("resnet: channels-last input gives the NCHW run's loss and gradients", "[models]") {
  struct Run {
    double loss;
    std::vector<std::vector<double>> grads;
  };
  auto run = [](models::ResNet& m, const Tensor& x, const Tensor& y, MemoryFormat format, bool bf16) {
    m.zero_grad();
    Tensor loss;
    {
      amp::Autocast ac(DType::bf16, DeviceType::cpu, bf16);
      loss = cross_entropy(m(contiguous(x, format)), y);
    }
    loss.backward();
    Run r{loss.to(DType::f64).item<double>(), {}};
    for (const Tensor& p : m.parameters()) r.grads.push_back(p.grad().to_vector<double>());
    return r;
  };
  // max over parameters of (max |a − b|) / (max |reference|).
  auto worst = [](const Run& a, const Run& b, const Run& ref) {
    REQUIRE(a.grads.size() == b.grads.size());
    double w = 0;
    for (size_t i = 0; i < a.grads.size(); ++i) {
      double diff = 0, scale = 1e-12;
      for (size_t j = 0; j < a.grads[i].size(); ++j) {
        diff = std::max(diff, std::fabs(a.grads[i][j] - b.grads[i][j]));
        scale = std::max(scale, std::fabs(ref.grads[i][j]));
      }
      w = std::max(w, diff / scale);
    }
    return w;
  };
  Generator g(3);
  const Tensor x = randn({4, 3, 32, 32}), y = randint(0, 10, {4});
  auto cifar = models::resnet18_cifar({.num_classes = 10, .width = 8, .generator = &g});
  const Run f32 = run(*cifar, x, y, MemoryFormat::Contiguous, false);
  const Run f32_cl = run(*cifar, x, y, MemoryFormat::ChannelsLast, false);
  CHECK(std::fabs(f32.loss - f32_cl.loss) <= 1e-5 * (1 + std::fabs(f32.loss)));
  CHECK(worst(f32, f32_cl, f32) <= 1e-3);
  const Run bf = run(*cifar, x, y, MemoryFormat::Contiguous, true);
  const Run bf_cl = run(*cifar, x, y, MemoryFormat::ChannelsLast, true);
  const double err_nchw = worst(bf, f32, f32), err_cl = worst(bf_cl, f32, f32);
  INFO("bf16 gradients' worst relative error against f32: NCHW " << err_nchw << ", channels-last " << err_cl);
  CHECK(err_cl <= 2 * err_nchw + 0.02);
  CHECK(std::fabs(bf.loss - bf_cl.loss) <= 2e-2 * (1 + std::fabs(f32.loss)));

  auto imagenet = models::resnet50({.num_classes = 10, .width = 4, .generator = &g});
  imagenet->to(DType::f64);
  const Tensor x64 = x.to(DType::f64);
  const Run a = run(*imagenet, x64, y, MemoryFormat::Contiguous, false);
  const Run b = run(*imagenet, x64, y, MemoryFormat::ChannelsLast, false);
  CHECK(std::fabs(a.loss - b.loss) <= 1e-10 * (1 + std::fabs(a.loss)));
  CHECK(worst(a, b, a) <= 1e-8);
}
