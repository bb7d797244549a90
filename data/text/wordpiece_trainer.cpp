#include "data/text/wordpiece_trainer.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <optional>
#include <unordered_map>
#include <unordered_set>

#include "core/error.h"
#include "data/text/unicode.h"

namespace precis::data {

namespace {

using Sym = int32_t;

uint64_t pair_key(Sym a, Sym b) { return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b); }
Sym key_first(uint64_t k) { return static_cast<Sym>(k >> 32); }
Sym key_second(uint64_t k) { return static_cast<Sym>(k & 0xFFFFFFFFu); }

struct Word {
  std::vector<Sym> symbols;
  int64_t count;
};

class Trainer {
 public:
  explicit Trainer(const WordPieceTrainerOptions& options) : options_(options) {}

  std::vector<std::string> run(const std::vector<std::string>& corpus) {
    const WordPieceOptions& names = options_.tokenizer;
    const std::vector<std::string> specials = {names.pad_token, names.unk_token, names.cls_token, names.sep_token,
                                               names.mask_token};
    const WordPieceTokenizer pre(specials, names);  // basic tokenisation only
    const std::string& prefix = names.continuation_prefix;

    // 1. Words and their counts (std::map: a deterministic order for everything below).
    std::map<std::string, int64_t> word_counts;
    const std::unordered_set<std::string> special_set(specials.begin(), specials.end());
    for (const std::string& line : corpus)
      for (std::string& w : pre.basic_tokenize(line))
        if (!special_set.count(w)) ++word_counts[std::move(w)];
    PRECIS_CHECK(!word_counts.empty(), "train_wordpiece_vocab: the corpus has no words");

    // 2. The alphabet, sorted by code point so ids do not depend on the corpus order.
    std::vector<std::pair<std::u32string, std::string>> alphabet;  // (sort key, token)
    {
      std::unordered_set<std::string> seen;
      for (const auto& [word, count] : word_counts) {
        const std::u32string chars = unicode::decode_utf8(word);
        for (size_t i = 0; i < chars.size(); ++i) {
          std::string t = i == 0 ? std::string() : prefix;
          unicode::append_utf8(t, chars[i]);
          if (seen.insert(t).second) alphabet.emplace_back(std::u32string(i == 0 ? U"" : U"\U0010FFFF") + chars[i], t);
        }
      }
      std::sort(alphabet.begin(), alphabet.end());
    }
    const int64_t minimum = static_cast<int64_t>(specials.size() + alphabet.size());
    PRECIS_CHECK(options_.vocab_size >= minimum, "train_wordpiece_vocab: vocab_size ", options_.vocab_size,
                 " is smaller than the ", specials.size(), " special tokens plus the corpus's alphabet of ",
                 alphabet.size(), " characters (word-initial and ", prefix, "-continuation): use at least ", minimum);
    for (const std::string& s : specials) intern(s);
    for (const auto& entry : alphabet) intern(entry.second);

    words_.reserve(word_counts.size());
    for (const auto& [word, count] : word_counts) {
      const std::u32string chars = unicode::decode_utf8(word);
      Word w{{}, count};
      for (size_t i = 0; i < chars.size(); ++i) {
        std::string t = i == 0 ? std::string() : prefix;
        unicode::append_utf8(t, chars[i]);
        w.symbols.push_back(ids_.at(t));
      }
      words_.push_back(std::move(w));
    }
    token_count_.assign(tokens_.size(), 0);
    for (size_t wi = 0; wi < words_.size(); ++wi) {
      for (Sym s : words_[wi].symbols) token_count_[static_cast<size_t>(s)] += words_[wi].count;
      total_symbols_ += words_[wi].count * static_cast<int64_t>(words_[wi].symbols.size());
      add_pairs(static_cast<int32_t>(wi));
    }

    // 3. Merges.
    std::vector<int32_t> stamp(words_.size(), -1);
    for (int32_t step = 0; static_cast<int64_t>(tokens_.size()) < options_.vocab_size; ++step) {
      const auto best = best_pair();
      if (!best) break;
      const Sym a = key_first(*best), b = key_second(*best);
      const std::string& tb = tokens_[static_cast<size_t>(b)];
      std::string merged = tokens_[static_cast<size_t>(a)] + tb.substr(tb.compare(0, prefix.size(), prefix) == 0 ? prefix.size() : 0);
      const Sym m = intern(merged);
      token_count_.resize(tokens_.size(), 0);
      const std::vector<int32_t> where = std::move(where_[*best]);
      where_.erase(*best);
      for (int32_t wi : where) {
        if (stamp[static_cast<size_t>(wi)] == step) continue;
        stamp[static_cast<size_t>(wi)] = step;
        merge_in_word(wi, a, b, m);
      }
      pair_count_.erase(*best);  // every occurrence is gone
    }

    // 4. Specials, alphabet, merges: tokens_ is already in that order.
    return tokens_;
  }

 private:
  Sym intern(const std::string& t) {
    auto [it, inserted] = ids_.emplace(t, static_cast<Sym>(tokens_.size()));
    if (inserted) tokens_.push_back(t);
    return it->second;
  }

  void add_pairs(int32_t wi) {
    const Word& w = words_[static_cast<size_t>(wi)];
    for (size_t i = 0; i + 1 < w.symbols.size(); ++i) {
      const uint64_t k = pair_key(w.symbols[i], w.symbols[i + 1]);
      pair_count_[k] += w.count;
      where_[k].push_back(wi);
    }
  }

  void remove_pairs(int32_t wi) {
    const Word& w = words_[static_cast<size_t>(wi)];
    for (size_t i = 0; i + 1 < w.symbols.size(); ++i) {
      const uint64_t k = pair_key(w.symbols[i], w.symbols[i + 1]);
      auto it = pair_count_.find(k);
      if (it != pair_count_.end() && (it->second -= w.count) <= 0) pair_count_.erase(it);
    }
  }

  void merge_in_word(int32_t wi, Sym a, Sym b, Sym m) {
    Word& w = words_[static_cast<size_t>(wi)];
    bool has = false;
    for (size_t i = 0; i + 1 < w.symbols.size() && !has; ++i) has = w.symbols[i] == a && w.symbols[i + 1] == b;
    if (!has) return;  // a stale entry of the pair's word list
    remove_pairs(wi);
    std::vector<Sym> out;
    out.reserve(w.symbols.size());
    for (size_t i = 0; i < w.symbols.size();) {
      if (i + 1 < w.symbols.size() && w.symbols[i] == a && w.symbols[i + 1] == b) {
        out.push_back(m);
        token_count_[static_cast<size_t>(a)] -= w.count;
        token_count_[static_cast<size_t>(b)] -= w.count;
        token_count_[static_cast<size_t>(m)] += w.count;
        total_symbols_ -= w.count;
        i += 2;
      } else {
        out.push_back(w.symbols[i++]);
      }
    }
    w.symbols = std::move(out);
    add_pairs(wi);
  }

  std::optional<uint64_t> best_pair() const {
    std::optional<uint64_t> best;
    double best_score = -std::numeric_limits<double>::infinity();
    const auto total = static_cast<double>(total_symbols_);
    int64_t best_count = 0;
    for (const auto& [k, count] : pair_count_) {
      if (count < options_.min_frequency) continue;
      const double c = static_cast<double>(count);
      const double ca = static_cast<double>(token_count_[static_cast<size_t>(key_first(k))]);
      const double cb = static_cast<double>(token_count_[static_cast<size_t>(key_second(k))]);
      double score = c;
      if (options_.score == MergeScore::pmi) score = c / (ca * cb);
      else if (options_.score == MergeScore::likelihood_gain) score = c * std::log(c * total / (ca * cb));
      if (score > best_score || (score == best_score && (count > best_count || (count == best_count && k < *best)))) {
        best = k;
        best_score = score;
        best_count = count;
      }
    }
    return best;
  }

  const WordPieceTrainerOptions& options_;
  std::vector<std::string> tokens_;
  std::unordered_map<std::string, Sym> ids_;
  std::vector<Word> words_;
  std::vector<int64_t> token_count_;
  int64_t total_symbols_ = 0;  // sum of token_count_
  std::unordered_map<uint64_t, int64_t> pair_count_;
  std::unordered_map<uint64_t, std::vector<int32_t>> where_;
};

}  // namespace

std::vector<std::string> train_wordpiece_vocab(const std::vector<std::string>& corpus,
                                               const WordPieceTrainerOptions& options) {
  PRECIS_CHECK(options.min_frequency >= 1, "train_wordpiece_vocab: min_frequency must be >= 1, got ",
               options.min_frequency);
  return Trainer(options).run(corpus);
}

}  // namespace precis::data
