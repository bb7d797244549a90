// The WordPiece tokenizer (data/text/wordpiece.h) on fuzzed text with a fixed vocabulary: the
// first byte picks the options (lower-casing, accents, cleaning, CJK, truncation, padding), the
// rest is split at the first 0xFF byte into a text pair.
#include <string_view>

#include "core/error.h"
#include "data/text/wordpiece.h"
#include "fuzz/common.h"

namespace {

const std::vector<std::string>& vocab() {
  static const std::vector<std::string> v = {
      "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "b", "c", "##a", "##b", "##c", "un", "##aff",
      "##able", "run", "##ning", "hello", "world", ",", "!", "?", "你", "好", "é", "##é", "the", "##s"};
  return v;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  precis::fuzz::init_once();
  if (size == 0) return 0;
  const uint8_t flags = data[0];
  std::string_view rest(reinterpret_cast<const char*>(data + 1), size - 1);
  size_t cut = rest.find('\xff');
  std::string_view first = rest.substr(0, cut);
  std::string_view second = cut == std::string_view::npos ? std::string_view() : rest.substr(cut + 1);
  precis::data::WordPieceOptions opt;
  opt.lowercase = flags & 1;
  if (flags & 2) opt.strip_accents = (flags & 4) != 0;
  opt.clean_text = flags & 8;
  opt.split_cjk = flags & 16;
  opt.max_input_chars_per_word = (flags & 32) ? 3 : 100;
  precis::data::EncodeOptions enc;
  enc.add_special_tokens = !(flags & 64);
  if (flags & 128) {
    enc.truncate_to = 1 + (rest.size() % 9);
    enc.pad_to = rest.size() % 13;
  }
  try {
    precis::data::WordPieceTokenizer tok(vocab(), opt);
    (void)tok.normalize(first);
    (void)tok.basic_tokenize(first);
    auto one = tok.encode(first, enc);
    if (one.ids.size() != one.type_ids.size() || one.ids.size() != one.attention_mask.size()) __builtin_trap();
    (void)tok.decode(one.ids, false);
    auto pair = tok.encode_pair(first, second, enc);
    if (pair.ids.size() != pair.attention_mask.size()) __builtin_trap();
    (void)tok.decode(pair.ids, true);
    (void)tok.wordpiece(first);
  } catch (const precis::Error&) {
  }
  return 0;
}
