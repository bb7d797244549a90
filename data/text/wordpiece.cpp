#include "data/text/wordpiece.h"

#include <algorithm>
#include <unordered_set>

#include "core/error.h"
#include "data/file_bytes.h"
#include "data/text/unicode.h"
#include "tensor/file_io.h"

namespace precis::data {

namespace {

bool is_utf8_continuation(char c) { return (static_cast<unsigned char>(c) & 0xC0) == 0x80; }

int64_t utf8_length(std::string_view s) {
  return std::count_if(s.begin(), s.end(), [](char c) { return !is_utf8_continuation(c); });
}

}  // namespace

std::vector<std::string> read_vocab(const std::string& path) {
  const std::vector<uint8_t> bytes = read_file_bytes(path, kMaxVocabFileBytes, "vocabulary file");
  std::vector<std::string> vocab;
  std::unordered_map<std::string_view, size_t> first_line;
  const std::string_view text(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  size_t pos = 0;
  while (pos < text.size()) {
    size_t nl = text.find('\n', pos);
    if (nl == std::string_view::npos) nl = text.size();
    std::string_view line = text.substr(pos, nl - pos);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    const size_t line_no = vocab.size() + 1;
    PRECIS_CHECK_T(IOError, !line.empty(), "the vocabulary file '", path, "': line ", line_no,
                   " is empty (a vocab.txt has one token per line)");
    PRECIS_CHECK_T(IOError, unicode::is_valid_utf8(line), "the vocabulary file '", path, "': line ", line_no,
                   " is not valid UTF-8");
    vocab.emplace_back(line);
    pos = nl + 1;
  }
  PRECIS_CHECK_T(IOError, !vocab.empty(), "the vocabulary file '", path, "' is empty");
  for (size_t i = 0; i < vocab.size(); ++i) {
    auto [it, inserted] = first_line.emplace(vocab[i], i + 1);
    PRECIS_CHECK_T(IOError, inserted, "the vocabulary file '", path, "': token '", vocab[i], "' on line ", i + 1,
                   " repeats line ", it->second);
  }
  return vocab;
}

void write_vocab(const std::string& path, const std::vector<std::string>& vocab) {
  // Through a temporary file renamed over `path`: a reader never finds the file half written.
  // The ranks of a distributed run each train the same vocabulary and write it to the same file,
  // and one that found the file while another was writing it read it empty.
  std::string text;
  for (const std::string& t : vocab) (text += t) += '\n';
  try {
    write_file_atomic(path, [&](const ByteSink& sink) { sink(text.data(), text.size()); });
  } catch (const IOError& e) {
    throw IOError(precis::detail::str_cat("cannot write the vocabulary file '", path, "' (", e.what(), ")"));
  }
}

WordPieceTokenizer::WordPieceTokenizer(std::vector<std::string> vocab, WordPieceOptions options)
    : options_(std::move(options)), vocab_(std::move(vocab)) {
  PRECIS_CHECK(!vocab_.empty(), "WordPieceTokenizer: the vocabulary is empty");
  PRECIS_CHECK(options_.max_input_chars_per_word >= 1, "WordPieceTokenizer: max_input_chars_per_word must be >= 1");
  ids_.reserve(vocab_.size());
  for (size_t i = 0; i < vocab_.size(); ++i) {
    PRECIS_CHECK(!vocab_[i].empty(), "WordPieceTokenizer: vocabulary entry ", i, " is empty");
    PRECIS_CHECK(unicode::is_valid_utf8(vocab_[i]), "WordPieceTokenizer: vocabulary entry ", i, " is not valid UTF-8");
    auto [it, inserted] = ids_.emplace(vocab_[i], static_cast<int64_t>(i));
    PRECIS_CHECK(inserted, "WordPieceTokenizer: token '", vocab_[i], "' appears twice (ids ", it->second, " and ", i, ")");
  }
  std::string missing;
  auto special = [&](const std::string& token, int64_t& id) {
    id = token_to_id(token);
    if (id < 0) missing += (missing.empty() ? "" : ", ") + token;
    specials_.push_back(token);
  };
  special(options_.unk_token, unk_id_);
  special(options_.cls_token, cls_id_);
  special(options_.sep_token, sep_id_);
  special(options_.pad_token, pad_id_);
  special(options_.mask_token, mask_id_);
  PRECIS_CHECK(missing.empty(), "WordPieceTokenizer: the vocabulary lacks the special token(s) ", missing,
               " (a BERT vocab.txt has [PAD], [UNK], [CLS], [SEP] and [MASK]; or set them in WordPieceOptions)");
  std::sort(specials_.begin(), specials_.end(), [](const std::string& a, const std::string& b) { return a.size() > b.size(); });
}

WordPieceTokenizer WordPieceTokenizer::from_file(const std::string& path, WordPieceOptions options) {
  std::vector<std::string> vocab = read_vocab(path);
  try {
    return WordPieceTokenizer(std::move(vocab), std::move(options));
  } catch (const ValueError& e) {
    throw IOError(detail::str_cat(path, ": ", e.what()));
  }
}

int64_t WordPieceTokenizer::token_to_id(std::string_view token) const {
  const auto it = ids_.find(std::string(token));
  return it == ids_.end() ? -1 : it->second;
}

const std::string& WordPieceTokenizer::id_to_token(int64_t id) const {
  PRECIS_CHECK_INDEX(id >= 0 && id < vocab_size(), "WordPieceTokenizer: id ", id, " is outside the vocabulary of ",
                     vocab_size(), " tokens");
  return vocab_[static_cast<size_t>(id)];
}

bool WordPieceTokenizer::is_special(int64_t id) const {
  return id == unk_id_ || id == cls_id_ || id == sep_id_ || id == pad_id_ || id == mask_id_;
}

std::string WordPieceTokenizer::normalize(std::string_view text) const {
  const std::u32string in = unicode::decode_utf8(text);
  const bool strip = options_.strip_accents.value_or(options_.lowercase);
  std::u32string cleaned;
  cleaned.reserve(in.size());
  for (char32_t c : in) {
    if (options_.clean_text) {
      if (c == 0 || c == 0xFFFD || unicode::is_control(c)) continue;
      if (unicode::is_whitespace(c)) c = ' ';
    }
    if (options_.split_cjk && unicode::is_cjk(c)) {
      cleaned.push_back(' ');
      cleaned.push_back(c);
      cleaned.push_back(' ');
    } else {
      cleaned.push_back(c);
    }
  }
  std::u32string stripped;
  if (strip) {
    stripped.reserve(cleaned.size());
    for (char32_t c : cleaned) unicode::append_stripped(stripped, c);
  } else {
    stripped = std::move(cleaned);
  }
  std::u32string lowered;
  if (options_.lowercase) {
    lowered.reserve(stripped.size());
    for (char32_t c : stripped) unicode::append_lower(lowered, c);
  } else {
    lowered = std::move(stripped);
  }
  return unicode::encode_utf8(lowered);
}

void WordPieceTokenizer::split_words(std::string_view text, std::vector<std::string>& out) const {
  const std::u32string chars = unicode::decode_utf8(normalize(text));
  std::string word;
  auto flush = [&] {
    if (!word.empty()) out.push_back(std::move(word));
    word.clear();
  };
  for (char32_t c : chars) {
    if (unicode::is_whitespace(c)) {
      flush();
    } else if (unicode::is_punctuation(c)) {
      flush();
      unicode::append_utf8(word, c);
      flush();
    } else {
      unicode::append_utf8(word, c);
    }
  }
  flush();
}

std::vector<std::string> WordPieceTokenizer::basic_tokenize(std::string_view text) const {
  std::vector<std::string> words;
  // Special tokens written in the raw text are kept whole (matched case-sensitively, leftmost,
  // longest first), as Hugging Face's tokenizers do with registered special tokens.
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t best = std::string_view::npos;
    const std::string* best_token = nullptr;
    for (const std::string& s : specials_) {
      const size_t at = text.find(s, pos);
      if (at < best) {
        best = at;
        best_token = &s;
      }
    }
    split_words(text.substr(pos, best == std::string_view::npos ? std::string_view::npos : best - pos), words);
    if (best_token == nullptr) break;
    words.push_back(*best_token);
    pos = best + best_token->size();
  }
  return words;
}

void WordPieceTokenizer::append_pieces(std::string_view word, std::vector<int64_t>& ids) const {
  if (utf8_length(word) > options_.max_input_chars_per_word) {
    ids.push_back(unk_id_);
    return;
  }
  if (const auto it = ids_.find(std::string(word)); it != ids_.end()) {
    ids.push_back(it->second);  // whole words (and special tokens) in one lookup
    return;
  }
  const size_t first = ids.size();
  std::string candidate;
  size_t start = 0;
  while (start < word.size()) {
    size_t end = word.size();
    int64_t found = -1;
    while (end > start) {
      candidate.assign(start > 0 ? options_.continuation_prefix : std::string());
      candidate.append(word.substr(start, end - start));
      if (const auto it = ids_.find(candidate); it != ids_.end()) {
        found = it->second;
        break;
      }
      do --end; while (end > start && is_utf8_continuation(word[end]));
    }
    if (found < 0) {
      ids.resize(first);
      ids.push_back(unk_id_);
      return;
    }
    ids.push_back(found);
    start = end;
  }
}

std::vector<std::string> WordPieceTokenizer::wordpiece(std::string_view word) const {
  std::vector<int64_t> ids;
  append_pieces(word, ids);
  std::vector<std::string> pieces;
  for (int64_t id : ids) pieces.push_back(vocab_[static_cast<size_t>(id)]);
  return pieces;
}

std::vector<int64_t> WordPieceTokenizer::token_ids(std::string_view text) const {
  std::vector<int64_t> ids;
  for (const std::string& w : basic_tokenize(text)) append_pieces(w, ids);
  return ids;
}

std::vector<std::string> WordPieceTokenizer::tokenize(std::string_view text) const {
  std::vector<std::string> pieces;
  for (int64_t id : token_ids(text)) pieces.push_back(vocab_[static_cast<size_t>(id)]);
  return pieces;
}

namespace {

void pad(Encoding& e, int64_t pad_to, int64_t pad_id) {
  while (static_cast<int64_t>(e.ids.size()) < pad_to) {
    e.ids.push_back(pad_id);
    e.type_ids.push_back(0);
    e.attention_mask.push_back(0);
  }
}

void append(Encoding& e, const std::vector<int64_t>& ids, int64_t type) {
  e.ids.insert(e.ids.end(), ids.begin(), ids.end());
  e.type_ids.insert(e.type_ids.end(), ids.size(), type);
  e.attention_mask.insert(e.attention_mask.end(), ids.size(), 1);
}

}  // namespace

Encoding WordPieceTokenizer::encode(std::string_view text, const EncodeOptions& options) const {
  std::vector<int64_t> ids = token_ids(text);
  const int64_t specials = options.add_special_tokens ? 2 : 0;
  if (options.truncate_to > 0) {
    PRECIS_CHECK(options.truncate_to >= specials, "WordPieceTokenizer::encode: truncate_to ", options.truncate_to,
                 " leaves no room for the ", specials, " special tokens");
    if (static_cast<int64_t>(ids.size()) > options.truncate_to - specials)
      ids.resize(static_cast<size_t>(options.truncate_to - specials));
  }
  Encoding e;
  if (options.add_special_tokens) append(e, {cls_id_}, 0);
  append(e, ids, 0);
  if (options.add_special_tokens) append(e, {sep_id_}, 0);
  pad(e, options.pad_to, pad_id_);
  return e;
}

Encoding WordPieceTokenizer::encode_pair(std::string_view first, std::string_view second,
                                         const EncodeOptions& options) const {
  std::vector<int64_t> a = token_ids(first), b = token_ids(second);
  const int64_t specials = options.add_special_tokens ? 3 : 0;
  if (options.truncate_to > 0) {
    PRECIS_CHECK(options.truncate_to >= specials, "WordPieceTokenizer::encode_pair: truncate_to ", options.truncate_to,
                 " leaves no room for the ", specials, " special tokens");
    // longest_first: the shorter sequence (the first on a tie) keeps up to half the budget
    // (rounded down), the longer one gets the rest; the same result as removing one token at a
    // time from the longer one, and the same as Hugging Face's tokenizers.
    const auto budget = static_cast<size_t>(options.truncate_to - specials);
    if (a.size() + b.size() > budget) {
      std::vector<int64_t>& shorter = a.size() <= b.size() ? a : b;
      std::vector<int64_t>& longer = a.size() <= b.size() ? b : a;
      shorter.resize(std::min(shorter.size(), budget / 2));
      longer.resize(budget - shorter.size());
    }
  }
  Encoding e;
  if (options.add_special_tokens) append(e, {cls_id_}, 0);
  append(e, a, 0);
  if (options.add_special_tokens) append(e, {sep_id_}, 0);
  append(e, b, 1);
  if (options.add_special_tokens) append(e, {sep_id_}, 1);
  pad(e, options.pad_to, pad_id_);
  return e;
}

std::string WordPieceTokenizer::decode(const std::vector<int64_t>& ids, bool skip_special_tokens) const {
  std::string out;
  const std::string& prefix = options_.continuation_prefix;
  for (int64_t id : ids) {
    if (skip_special_tokens && is_special(id)) continue;
    const std::string& t = id_to_token(id);
    if (!prefix.empty() && t.size() > prefix.size() && t.compare(0, prefix.size(), prefix) == 0 && !out.empty()) {
      out.append(t, prefix.size());
    } else {
      if (!out.empty()) out.push_back(' ');
      out.append(t);
    }
  }
  return out;
}

}  // namespace precis::data
