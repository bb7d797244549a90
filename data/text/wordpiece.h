#pragma once
// A BERT-compatible WordPiece tokenizer: the same ids as Google's BERT tokenizer (and Hugging
// Face's BertWordPieceTokenizer) for a given vocab.txt.
//
//   auto tok = data::WordPieceTokenizer::from_file("vocab.txt");     // lower-cases by default
//   data::Encoding e = tok.encode("Héllo, world!");                  // [CLS] hello , world ! [SEP]
//   data::Encoding p = tok.encode_pair("a question?", "an answer", {.truncate_to = 128, .pad_to = 128});
//
// The pipeline: special tokens ([CLS], [MASK], … written in the text) are matched first and kept
// whole; the rest is normalised (control characters removed, whitespace unified, spaces put
// around CJK ideographs, accents stripped by NFD minus nonspacing marks, lower-cased), split on
// whitespace and punctuation (every punctuation character is a word), and each word is cut
// into the longest vocabulary pieces from the left, continuation pieces prefixed "##"; a word
// with an unmatched rest or over 100 characters becomes [UNK]. Unicode coverage: see unicode.h.
// All const member functions are thread-safe.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace precis::data {

/// The tokenizer's normalisation and special tokens; the defaults are BERT-uncased's (Hugging
/// Face's BertTokenizer: do_lower_case, strip_accents, tokenize_chinese_chars, unk_token, ...).
struct WordPieceOptions {
  bool lowercase = true;  ///< lower-case the text (BERT's do_lower_case)
  /// Accent stripping; unset means "same as lowercase" (BERT's rule).
  std::optional<bool> strip_accents = std::nullopt;
  /// Drop control characters and map every whitespace character to a space.
  bool clean_text = true;
  /// Put spaces around CJK ideographs so each is a word.
  bool split_cjk = true;
  int64_t max_input_chars_per_word = 100;  ///< >= 1; a longer word (in code points) becomes [UNK]
  std::string continuation_prefix = "##";  ///< marks a piece that continues a word
  std::string unk_token = "[UNK]";    ///< a word that cannot be covered; must be in the vocabulary
  std::string cls_token = "[CLS]";    ///< starts an encoding; must be in the vocabulary
  std::string sep_token = "[SEP]";    ///< ends each sequence of an encoding; must be in the vocabulary
  std::string pad_token = "[PAD]";    ///< fills up to EncodeOptions::pad_to; must be in the vocabulary
  std::string mask_token = "[MASK]";  ///< masked-LM's mask; must be in the vocabulary
};

/// How encode and encode_pair frame, truncate and pad (Hugging Face's add_special_tokens,
/// truncation with max_length, padding="max_length").
struct EncodeOptions {
  /// Add [CLS] … [SEP] (and … [SEP] for the second sequence of a pair).
  bool add_special_tokens = true;
  /// When > 0: at most this many ids, special tokens included. A pair is cut "longest first"
  /// (Hugging Face's default): the shorter sequence keeps up to half the room, the longer the rest.
  int64_t truncate_to = 0;
  /// When > 0: right-pad with [PAD] (type id 0, attention 0) up to this many ids (a longer
  /// encoding is not cut: use truncate_to too).
  int64_t pad_to = 0;
};

/// Ids of one encoded sequence or pair; the three vectors have the same length.
struct Encoding {
  std::vector<int64_t> ids;             ///< token ids, special tokens and padding included
  std::vector<int64_t> type_ids;        ///< 0 for the first sequence, 1 for the second
  std::vector<int64_t> attention_mask;  ///< 1 for tokens, 0 for padding
};

/// Immutable after construction: share one between threads freely (see the file comment).
class WordPieceTokenizer {
 public:
  /// `vocab[i]` is the token of id i. ValueError for an empty vocabulary, an empty or duplicate
  /// token, invalid UTF-8, or a missing special token (naming them).
  explicit WordPieceTokenizer(std::vector<std::string> vocab, WordPieceOptions options = {});
  /// Loads a vocab.txt (one token per line, id = line number). IOError naming the file and the
  /// line for the problems listed above, or when it cannot be read.
  static WordPieceTokenizer from_file(const std::string& path, WordPieceOptions options = {});

  /// Normalised words (before WordPiece), special tokens kept whole.
  std::vector<std::string> basic_tokenize(std::string_view text) const;
  /// The normalised text (clean, CJK spacing, accent stripping, lower case), without splitting.
  std::string normalize(std::string_view text) const;
  /// WordPiece pieces of one normalised word ({unk} when it cannot be covered).
  std::vector<std::string> wordpiece(std::string_view word) const;
  /// Pieces of a text: basic_tokenize then wordpiece.
  std::vector<std::string> tokenize(std::string_view text) const;
  /// Ids of tokenize(text), without special tokens.
  std::vector<int64_t> token_ids(std::string_view text) const;

  /// [CLS] text [SEP] (the specials only with add_special_tokens), truncated and padded as
  /// `options` say; type ids all 0. ValueError when truncate_to leaves no room for the specials.
  Encoding encode(std::string_view text, const EncodeOptions& options = {}) const;
  /// [CLS] first [SEP] second [SEP] (type ids 0 up to the first [SEP], 1 after; the specials only
  /// with add_special_tokens), truncated longest first and padded as `options` say. ValueError
  /// when truncate_to leaves no room for the three specials.
  Encoding encode_pair(std::string_view first, std::string_view second, const EncodeOptions& options = {}) const;
  /// The text of ids: pieces joined by spaces, "##" pieces glued to the previous one.
  std::string decode(const std::vector<int64_t>& ids, bool skip_special_tokens = true) const;

  int64_t vocab_size() const { return static_cast<int64_t>(vocab_.size()); }  ///< the number of tokens
  /// Id of `token`, or -1 when absent.
  int64_t token_to_id(std::string_view token) const;
  /// IndexError when id is out of range.
  const std::string& id_to_token(int64_t id) const;
  /// Every token, indexed by id (aliases the tokenizer's copy).
  const std::vector<std::string>& vocab() const { return vocab_; }
  /// Whether `id` is one of the five special tokens of the options.
  bool is_special(int64_t id) const;
  int64_t unk_id() const { return unk_id_; }    ///< id of options().unk_token
  int64_t cls_id() const { return cls_id_; }    ///< id of options().cls_token
  int64_t sep_id() const { return sep_id_; }    ///< id of options().sep_token
  int64_t pad_id() const { return pad_id_; }    ///< id of options().pad_token
  int64_t mask_id() const { return mask_id_; }  ///< id of options().mask_token
  const WordPieceOptions& options() const { return options_; }  ///< the options it was built with

 private:
  void split_words(std::string_view text, std::vector<std::string>& out) const;
  void append_pieces(std::string_view word, std::vector<int64_t>& ids) const;

  WordPieceOptions options_;
  std::vector<std::string> vocab_;
  std::unordered_map<std::string, int64_t> ids_;
  std::vector<std::string> specials_;  // matched in raw text, longest first
  int64_t unk_id_ = -1, cls_id_ = -1, sep_id_ = -1, pad_id_ = -1, mask_id_ = -1;
};

/// The largest vocab.txt read_vocab accepts: 64 MiB, a thousand times BERT's 30522 tokens (231 KB),
/// so a gzip file that inflates without end is refused early.
inline constexpr uint64_t kMaxVocabFileBytes = uint64_t{64} << 20;

/// Reads a vocab.txt: one token per line (a trailing "\r" is removed). IOError naming the file and
/// line for an unreadable file (a directory, say), an empty file, an empty line, invalid UTF-8, a
/// duplicate token, or more than kMaxVocabFileBytes.
std::vector<std::string> read_vocab(const std::string& path);
/// Writes one token per line, atomically (tensor/file_io.h's write_file_atomic): a reader finds
/// the old file or the whole new one, never a part, also while another process writes the same
/// file. IOError naming the file and the system's reason when it cannot be written.
void write_vocab(const std::string& path, const std::vector<std::string>& vocab);

}  // namespace precis::data
