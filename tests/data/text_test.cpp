// Text pipeline: corpus reading, vocabulary training, MLM masking, dynamic batching.
#include <catch2/catch.hpp>

#include <filesystem>
#include <limits>
#include <set>

#include "core/error.h"
#include "data/data_loader.h"
#include "data/text/corpus.h"
#include "data/text/mlm.h"
#include "data/text/token_batching.h"
#include "data/text/unicode.h"
#include "data/text/wordpiece_trainer.h"
#include "tensor/factory.h"
#include "test_files.h"

using namespace precis;
using namespace precis::data;
using namespace precis::data::testing;

namespace {

const std::vector<std::string>& small_corpus() {
  static const std::vector<std::string> lines = {
      "The quick brown fox jumps over the lazy dog.",
      "A quick movement of the enemy will jeopardize six gunboats.",
      "The five boxing wizards jump quickly; the dog sleeps.",
      "Hugging, hugs and huggers: the hug is a hugging gesture!",
      "Pack my box with five dozen liquor jugs, said the wizard.",
      "Jumping foxes and jumpy dogs jumped over boxes in Zürich.",
      "Naïve wizards box quickly with the huggable fox.",
      "Dogs, foxes, wizards and boxes: 12 jumps, 345 hugs.",
  };
  return lines;
}

}  // namespace

TEST_CASE("text: corpus from files, folders and WordNet", "[data]") {
  ScratchDir dir;
  std::filesystem::create_directories(dir.path() / "sub");
  std::filesystem::create_directories(dir.path() / ".hidden");
  write_text(dir.file("b.txt"), "second file\r\n\n  \nlast line");
  write_text(dir.file("a.txt"), "first line\nsecond line\n");
  write_text((dir.path() / "sub" / "c.txt").string(), "nested");
  write_text((dir.path() / ".hidden" / "x.txt").string(), "hidden");
  REQUIRE(read_text_lines(dir.path().string()) ==
          std::vector<std::string>{"first line", "second line", "second file", "last line", "nested"});
  REQUIRE(read_text_lines(dir.file("a.txt")) == std::vector<std::string>{"first line", "second line"});
  REQUIRE_THROWS_AS(read_text_lines(dir.file("missing")), IOError);

  ScratchDir wn;
  write_text(wn.file("data.adv"),
             "  1 This software and database is being provided to you, the LICENSEE, by  \n"
             "  2 Princeton University under the following license.  \n"
             "00001740 02 r 01 a_cappella 0 000 | without musical accompaniment; \"they performed a cappella\"  \n"
             "00001837 02 r 03 AD 0 A.D. 0 anno_Domini 0 000 | in the Christian era  \n");
  REQUIRE(read_corpus(wn.path().string()).size() == 4);  // no data.noun: a plain folder of text
  write_text(wn.file("data.noun"), "00001930 03 n 01 physical_entity 0 007 @ 00001740 n 0000 | an entity that has physical existence  \n");
  REQUIRE(read_corpus(wn.path().string()) ==
          std::vector<std::string>{"an entity that has physical existence",
                                   "without musical accompaniment; \"they performed a cappella\"", "in the Christian era"});
  write_text(wn.file("data.verb"), "00001740 29 v 04 breathe 0 no gloss here\n");
  REQUIRE_THROWS_WITH(read_wordnet_glosses(wn.path().string()), Catch::Contains("data.verb: line 1"));
  REQUIRE_THROWS_AS(read_wordnet_glosses(dir.path().string()), IOError);
}

TEST_CASE("text: the installed WordNet glosses", "[data]") {
  if (!std::filesystem::exists(std::string(kWordNetDir) + "/data.noun")) {
    WARN("wordnet-base is not installed: skipped");
    return;
  }
  const auto glosses = read_wordnet_glosses();
  REQUIRE(glosses.size() > 100000);
  for (const std::string& g : glosses) REQUIRE_FALSE(g.empty());
  REQUIRE(glosses.front().find("Princeton") == std::string::npos);
}

TEST_CASE("text: vocabulary training", "[data]") {
  std::vector<std::string> corpus = small_corpus();
  corpus.insert(corpus.end(), small_corpus().begin(), small_corpus().end());  // every pair seen twice
  WordPieceTrainerOptions opts{.vocab_size = 150, .min_frequency = 2};
  const std::vector<std::string> vocab = train_wordpiece_vocab(corpus, opts);
  REQUIRE(vocab.size() == 150);
  REQUIRE(std::vector<std::string>(vocab.begin(), vocab.begin() + 5) ==
          std::vector<std::string>{"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"});
  REQUIRE(std::set<std::string>(vocab.begin(), vocab.end()).size() == vocab.size());
  REQUIRE(train_wordpiece_vocab(corpus, opts) == vocab);  // deterministic

  const WordPieceTokenizer tok(vocab);
  int64_t pieces = 0, chars = 0;
  for (const std::string& line : corpus) {
    const auto ids = tok.token_ids(line);
    for (int64_t id : ids) REQUIRE(id != tok.unk_id());
    pieces += static_cast<int64_t>(ids.size());
    for (const std::string& w : tok.basic_tokenize(line)) chars += static_cast<int64_t>(unicode::decode_utf8(w).size());
  }
  // The merges shorten the encoding well below one piece per character.
  INFO(pieces << " pieces for " << chars << " characters");
  REQUIRE(pieces < chars / 2);
  REQUIRE(std::find(vocab.begin(), vocab.end(), "the") != vocab.end());
  // Characters the corpus never had are not covered.
  REQUIRE(tok.token_ids("quick ß")[1] == tok.unk_id());

  // The other merge scores train valid vocabularies of the requested size too.
  for (MergeScore score : {MergeScore::pmi, MergeScore::frequency}) {
    const auto other = train_wordpiece_vocab(corpus, {.vocab_size = 150, .score = score});
    REQUIRE(other.size() == 150);
    REQUIRE(other != vocab);
    const WordPieceTokenizer other_tok(other);
    for (const std::string& line : corpus)
      for (int64_t id : other_tok.token_ids(line)) REQUIRE(id != other_tok.unk_id());
  }
  // A single copy has fewer pairs seen twice: training stops early, with a smaller vocabulary.
  const auto early = train_wordpiece_vocab(small_corpus(), {.vocab_size = 1000});
  REQUIRE(early.size() < 1000);
  REQUIRE(early.size() > 60);
  // Too small a vocabulary to hold the alphabet: the message gives the minimum.
  REQUIRE_THROWS_WITH(train_wordpiece_vocab(corpus, {.vocab_size = 10}), Catch::Contains("use at least"));
  REQUIRE_THROWS_AS(train_wordpiece_vocab({"", "  "}, {.vocab_size = 10}), ValueError);
  // With no pairs left to merge it stops early.
  const auto tiny = train_wordpiece_vocab({"ab ab ab"}, {.vocab_size = 50, .min_frequency = 1});
  REQUIRE(tiny == std::vector<std::string>{"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "##b", "ab"});
}

TEST_CASE("text: MLM masking statistics on 1e5 tokens", "[data]") {
  const int64_t vocab = 1000, mask_id = 4;
  MlmMasker masker(vocab, mask_id, {0, 1, 2, 3, 4});
  std::vector<int64_t> ids(100000);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = i % 50 == 0 ? 2 : 5 + static_cast<int64_t>(i * 7919 % 995);
  SampleRng rng(123, 0, 0);
  const MaskedTokens m = masker.mask(ids, rng);
  int64_t candidates = 0, chosen = 0, to_mask = 0, changed = 0, kept = 0;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] == 2) {
      REQUIRE(m.labels[i] == kIgnoreIndex);
      REQUIRE(m.input_ids[i] == 2);
      continue;
    }
    ++candidates;
    if (m.labels[i] == kIgnoreIndex) {
      REQUIRE(m.input_ids[i] == ids[i]);
      continue;
    }
    REQUIRE(m.labels[i] == ids[i]);
    ++chosen;
    if (m.input_ids[i] == mask_id) ++to_mask;
    else if (m.input_ids[i] == ids[i]) ++kept;
    else ++changed;
    REQUIRE(m.input_ids[i] >= 0);
    REQUIRE(m.input_ids[i] < vocab);
  }
  // Within 5 standard deviations of the binomial expectations.
  const double p = static_cast<double>(chosen) / static_cast<double>(candidates);
  REQUIRE(std::abs(p - 0.15) < 5 * std::sqrt(0.15 * 0.85 / static_cast<double>(candidates)));
  const auto share = [&](int64_t k) { return static_cast<double>(k) / static_cast<double>(chosen); };
  const double sd8 = std::sqrt(0.8 * 0.2 / static_cast<double>(chosen)), sd1 = std::sqrt(0.1 * 0.9 / static_cast<double>(chosen));
  REQUIRE(std::abs(share(to_mask) - 0.8) < 5 * sd8);
  REQUIRE(std::abs(share(changed) - 0.1) < 5 * sd1 + 0.002);  // a random id equal to the original counts as kept
  REQUIRE(std::abs(share(kept) - 0.1) < 5 * sd1 + 0.002);

  // Seeded: the same stream masks the same way; the tensor form agrees with the vector form.
  SampleRng again(123, 0, 0);
  REQUIRE(masker.mask(ids, again).input_ids == m.input_ids);
  SampleRng t_rng(123, 0, 0);
  auto [input, labels] = masker.mask(from_vector(ids, {1000, 100}), t_rng);
  REQUIRE(input.sizes() == Shape{1000, 100});
  REQUIRE(labels.to_vector<int64_t>() == m.labels);
  REQUIRE_THROWS_AS(MlmMasker(10, 20, {}), ValueError);
}

TEST_CASE("text: token-budget batches cover every sequence once within the budget", "[data]") {
  std::vector<int64_t> lengths(500);
  for (size_t i = 0; i < lengths.size(); ++i) lengths[i] = 3 + static_cast<int64_t>((i * 2654435761u) % 120);
  for (int64_t bucket : {1, 8}) {
    const TokenBudgetOptions opts{.max_tokens = 512, .bucket_width = bucket, .seed = 5};
    const auto batches = token_budget_batches(lengths, opts, 0);
    std::vector<int64_t> seen;
    int64_t padded = 0, real = 0;
    for (const auto& b : batches) {
      REQUIRE_FALSE(b.empty());
      int64_t longest = 0;
      for (int64_t i : b) {
        longest = std::max(longest, lengths[static_cast<size_t>(i)]);
        real += lengths[static_cast<size_t>(i)];
      }
      REQUIRE(static_cast<int64_t>(b.size()) * longest <= 512);
      padded += static_cast<int64_t>(b.size()) * longest;
      seen.insert(seen.end(), b.begin(), b.end());
    }
    std::sort(seen.begin(), seen.end());
    for (int64_t i = 0; i < 500; ++i) REQUIRE(seen[static_cast<size_t>(i)] == i);
    // Length grouping keeps padding small.
    REQUIRE(static_cast<double>(padded) < 1.15 * static_cast<double>(real));
    REQUIRE(token_budget_batches(lengths, opts, 0) == batches);
    REQUIRE(token_budget_batches(lengths, opts, 1) != batches);
  }
  const auto capped = token_budget_batches(lengths, {.max_tokens = 100000, .max_batch_size = 16, .shuffle = false}, 0);
  for (const auto& b : capped) REQUIRE(b.size() <= 16);
  REQUIRE_THROWS_WITH(token_budget_batches({5, 700}, {.max_tokens = 512}, 0), Catch::Contains("sequence 1 has 700 tokens"));
}

TEST_CASE("text: an MLM loader with dynamic batches is deterministic across workers", "[data]") {
  const WordPieceTokenizer tok(train_wordpiece_vocab(small_corpus(), {.vocab_size = 100}));
  std::vector<std::string> lines;
  for (int r = 0; r < 5; ++r) lines.insert(lines.end(), small_corpus().begin(), small_corpus().end());
  auto ds = MlmDataset::from_lines(tok, lines, 16);
  REQUIRE(ds->size() == 40);
  auto collect = [&](int workers) {
    DataLoader loader(ds, {.seed = 9,
                           .num_workers = workers,
                           .collate = pad_collate({static_cast<double>(tok.pad_id()), static_cast<double>(kIgnoreIndex)}),
                           .batch_sampler = token_budget_sampler(ds->lengths(), {.max_tokens = 64, .seed = 9})});
    std::vector<std::vector<int64_t>> out;
    for (Batch& b : loader) {
      REQUIRE(b.size() == 3);  // input_ids, labels, attention_mask
      REQUIRE(b[0].numel() <= 64);
      REQUIRE(b[0].sizes() == b[1].sizes());
      REQUIRE(b[2].sizes() == b[0].sizes());
      const auto ids = b[0].to_vector<int64_t>(), labels = b[1].to_vector<int64_t>(), mask = b[2].to_vector<int64_t>();
      for (size_t i = 0; i < ids.size(); ++i)
        if (mask[i] == 0) {
          REQUIRE(ids[i] == tok.pad_id());
          REQUIRE(labels[i] == kIgnoreIndex);
        }
      out.push_back(ids);
      out.push_back(labels);
    }
    return out;
  };
  const auto ref = collect(0);
  REQUIRE(collect(2) == ref);
  REQUIRE(collect(4) == ref);
}

TEST_CASE("text: token-budget batches with a budget near INT64_MAX do not overflow", "[data]") {
  // (batch size + 1) x longest overflowed int64 and wrapped below the budget (issue 13).
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  const std::vector<int64_t> lengths = {1, 1, kMax / 2 + 1};
  const auto batches = token_budget_batches(lengths, {.max_tokens = kMax, .bucket_width = 1, .shuffle = false}, 0);
  // 1 x 1, 2 x 1 fit; 3 x (kMax / 2 + 1) does not: the long sequence starts a batch of its own.
  REQUIRE(batches == std::vector<std::vector<int64_t>>{{0, 1}, {2}});
}
