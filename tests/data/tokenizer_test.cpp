// WordPiece tokenizer: ids equal to BERT's reference tokenizer on the committed fixture, Unicode
// helpers, vocab files.
#include <catch2/catch.hpp>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "core/error.h"
#include "data/text/unicode.h"
#include "data/text/wordpiece.h"
#include "test_files.h"
#include "tests/support/paths.h"

using namespace precis;
using namespace precis::data;
using namespace precis::data::testing;

namespace {

std::string fixture(const std::string& name) { return precis::testing::test_data_dir() + "/data/fixtures/" + name; }

const WordPieceTokenizer& bert() {
  static const WordPieceTokenizer tok = WordPieceTokenizer::from_file(fixture("bert-base-uncased-vocab.txt"));
  return tok;
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string cur;
  for (char c : s) {
    if (c == sep) {
      out.push_back(cur);
      cur.clear();
    } else {
      cur.push_back(c);
    }
  }
  out.push_back(cur);
  return out;
}

std::vector<int64_t> parse_ids(const std::string& s) {
  std::vector<int64_t> ids;
  std::istringstream in(s);
  for (int64_t id; in >> id;) ids.push_back(id);
  return ids;
}

// Undoes the fixture's escaping: \\ and \u{hex}.
std::string unescape(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '\\') {
      out.push_back(s[i]);
    } else if (s[i + 1] == '\\') {
      out.push_back('\\');
      ++i;
    } else {
      REQUIRE(s.compare(i, 3, "\\u{") == 0);
      const size_t close = s.find('}', i);
      unicode::append_utf8(out, static_cast<char32_t>(std::stoul(s.substr(i + 3, close - i - 3), nullptr, 16)));
      i = close;
    }
  }
  return out;
}

}  // namespace

TEST_CASE("tokenizer: ids equal BERT's reference tokenizer on the fixture", "[data]") {
  std::ifstream f(fixture("bert_tokenizer_cases.tsv"));
  REQUIRE(f.is_open());
  int singles = 0, pairs = 0;
  for (std::string line; std::getline(f, line);) {
    if (line.empty() || line[0] == '#') continue;
    const auto cols = split(line, '\t');
    INFO("fixture line: " << line);
    if (cols[0] == "single") {
      REQUIRE(cols.size() == 5);
      const int64_t max_len = std::stoll(cols[2]);
      const Encoding e = bert().encode(unescape(cols[1]), {.truncate_to = max_len, .pad_to = max_len});
      REQUIRE(e.ids == parse_ids(cols[3]));
      std::vector<std::string> tokens;
      for (int64_t id : e.ids) tokens.push_back(bert().id_to_token(id));
      REQUIRE(tokens == split(cols[4], ' '));
      ++singles;
    } else {
      REQUIRE(cols[0] == "pair");
      REQUIRE(cols.size() == 7);
      const int64_t max_len = std::stoll(cols[3]);
      const Encoding e = bert().encode_pair(unescape(cols[1]), unescape(cols[2]), {.truncate_to = max_len, .pad_to = max_len});
      REQUIRE(e.ids == parse_ids(cols[4]));
      REQUIRE(e.type_ids == parse_ids(cols[5]));
      REQUIRE(e.attention_mask == parse_ids(cols[6]));
      ++pairs;
    }
  }
  REQUIRE(singles >= 40);
  REQUIRE(pairs >= 5);
}

TEST_CASE("tokenizer: pieces, special ids, decode", "[data]") {
  const auto& tok = bert();
  REQUIRE(tok.vocab_size() == 30522);
  REQUIRE(tok.pad_id() == 0);
  REQUIRE(tok.unk_id() == 100);
  REQUIRE(tok.cls_id() == 101);
  REQUIRE(tok.sep_id() == 102);
  REQUIRE(tok.mask_id() == 103);
  REQUIRE(tok.wordpiece("unaffable") == std::vector<std::string>{"una", "##ffa", "##ble"});
  REQUIRE(tok.wordpiece(std::string(101, 'a')) == std::vector<std::string>{"[UNK]"});
  REQUIRE(tok.basic_tokenize("Héllo,WORLD [MASK]!") == std::vector<std::string>{"hello", ",", "world", "[MASK]", "!"});
  REQUIRE(tok.normalize("Ça\tVA\u00a0?") == "ca va ?");
  REQUIRE(tok.decode(tok.encode("Unaffable naïve people!").ids) == "unaffable naive people !");
  REQUIRE(tok.decode(tok.encode("x").ids, /*skip_special_tokens=*/false) == "[CLS] x [SEP]");
  REQUIRE(tok.token_to_id("definitely-not-a-token") == -1);
  REQUIRE_THROWS_AS(tok.id_to_token(30522), IndexError);
  REQUIRE_THROWS_AS(tok.encode("abc", {.truncate_to = 1}), ValueError);
  const Encoding e = tok.encode("a b", {.add_special_tokens = false, .pad_to = 4});
  REQUIRE(e.ids == std::vector<int64_t>{1037, 1038, 0, 0});
  REQUIRE(e.attention_mask == std::vector<int64_t>{1, 1, 0, 0});

  // A cased tokenizer keeps case and accents.
  WordPieceTokenizer cased(tok.vocab(), {.lowercase = false});
  REQUIRE(cased.normalize("Héllo") == "Héllo");
  WordPieceTokenizer keep_accents(tok.vocab(), {.strip_accents = false});
  REQUIRE(keep_accents.normalize("HÉLLO") == "héllo");
}

TEST_CASE("tokenizer: unicode helpers", "[data]") {
  using namespace unicode;
  REQUIRE(decode_utf8("a\xC3\xA9\xE4\xB8\xAD\xF0\x9F\x98\x80") == U"a\u00e9\u4e2d\U0001F600");
  REQUIRE(decode_utf8("a\xFF" "b\xC3" "c\xE4\xB8" "d\xC0\x80" "e\xED\xA0\x80") == U"abcde");  // invalid bytes dropped
  REQUIRE(encode_utf8(U"\u00e9\U0001F600") == "\xC3\xA9\xF0\x9F\x98\x80");
  REQUIRE(is_valid_utf8("h\xC3\xA9"));
  REQUIRE_FALSE(is_valid_utf8("h\xC3"));
  REQUIRE(is_punctuation(U'!'));
  REQUIRE(is_punctuation(U'$'));           // ASCII symbols count, as in BERT
  REQUIRE(is_punctuation(U'\u201c'));      // “ (Pi)
  REQUIRE(is_punctuation(U'\u3002'));      // 。 (Po)
  REQUIRE_FALSE(is_punctuation(U'\u20ac'));  // € (Sc)
  REQUIRE(is_control(U'\u200b'));          // Cf
  REQUIRE(is_control(U'\u0085'));
  REQUIRE_FALSE(is_control(U'\n'));
  REQUIRE(is_whitespace(U'\u3000'));
  REQUIRE(is_whitespace(U'\u2028'));
  REQUIRE_FALSE(is_whitespace(U'\u200b'));
  REQUIRE(is_cjk(U'\u4e2d'));
  REQUIRE_FALSE(is_cjk(U'\u3042'));        // Hiragana
  REQUIRE(is_nonspacing_mark(U'\u0301'));
  auto stripped = [](std::u32string s) {
    std::u32string out;
    for (char32_t c : s) append_stripped(out, c);
    return out;
  };
  auto lowered = [](std::u32string s) {
    std::u32string out;
    for (char32_t c : s) append_lower(out, c);
    return out;
  };
  // Latin-1 and Latin Extended-A/B, Vietnamese stacked accents, Greek, Cyrillic, Hangul.
  REQUIRE(stripped(U"ÀÁÂÃÄÅÇÈÉÊËÌÍÎÏÑÒÓÔÕÖÙÚÛÜÝàáâãäåçèéêëìíîïñòóôõöùúûüýÿ") ==
          U"AAAAAACEEEEIIIINOOOOOUUUUYaaaaaaceeeeiiiinooooouuuuyy");
  REQUIRE(stripped(U"ĀăĄćĈċČďĒĕĘěĜğĠģĤĨĩĪĭĮİĴĶĹļĽŃņŇŌŏŐŔŗŘŚŝŞšŢťŨũŪŭŮűŲŴŶŸŹżŽ") ==
          U"AaAcCcCdEeEeGgGgHIiIiIIJKLlLNnNOoORrRSsSsTtUuUuUuUWYYZzZ");
  REQUIRE(stripped(U"ǍǎǕǖǗǘȘșȚțẠạẤầỆệỮữ") == U"AaUuUuSsTtAaAaEeUu");
  REQUIRE(stripped(U"ÆØŒßĐŁÞ") == U"ÆØŒßĐŁÞ");  // letters, not letter + accent
  REQUIRE(stripped(U"άέήίόύώΐ") == U"αεηιουωι");
  REQUIRE(stripped(U"ЁЙёй") == U"ЕИеи");
  REQUIRE(stripped(U"한") == U"\u1112\u1161\u11ab");
  REQUIRE(stripped(U"e\u0301") == U"e");
  REQUIRE(lowered(U"ABCÀÉÎÕÜΣΑΒЖЁİ") == U"abcàéîõüσαβжёi\u0307");
  REQUIRE(std::string(tables_version()) == "14.0.0");
}

TEST_CASE("tokenizer: malformed vocab files raise IOError naming the file and line", "[data]") {
  ScratchDir dir;
  auto expect = [&](const std::string& name, const std::string& text, const std::string& what) {
    INFO(name);
    write_text(dir.file(name), text);
    REQUIRE_THROWS_WITH(WordPieceTokenizer::from_file(dir.file(name)),
                        Catch::Contains(dir.file(name)) && Catch::Contains(what));
    try {
      WordPieceTokenizer::from_file(dir.file(name));
    } catch (const IOError&) {
    }
  };
  const std::string specials = "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n";
  expect("empty.txt", "", "is empty");
  expect("blank-line.txt", specials + "a\n\nb\n", "line 7 is empty");
  expect("dup.txt", specials + "a\nb\na\n", "token 'a' on line 8 repeats line 6");
  expect("utf8.txt", specials + "a\n\xC3\n", "line 7 is not valid UTF-8");
  expect("no-mask.txt", "[PAD]\n[UNK]\n[CLS]\n[SEP]\na\n", "lacks the special token(s) [MASK]");
  REQUIRE_THROWS_AS(WordPieceTokenizer::from_file(dir.file("missing.txt")), IOError);
  // CRLF files and a missing final newline are fine; write_vocab round-trips.
  write_text(dir.file("crlf.txt"), "[PAD]\r\n[UNK]\r\n[CLS]\r\n[SEP]\r\n[MASK]\r\nhi");
  const auto tok = WordPieceTokenizer::from_file(dir.file("crlf.txt"));
  REQUIRE(tok.vocab_size() == 6);
  REQUIRE(tok.encode("hi HI").ids == std::vector<int64_t>{2, 5, 5, 3});
  write_vocab(dir.file("out.txt"), tok.vocab());
  REQUIRE(read_vocab(dir.file("out.txt")) == tok.vocab());
}

TEST_CASE("tokenizer: a vocab file being written is never read half written", "[data]") {
  // What the ranks of a distributed run do: each writes the same vocabulary to one file, and one
  // that finds the file reads it. Written in place, a reader found it truncated or partial.
  ScratchDir dir;
  const std::string path = dir.file("vocab.txt");
  std::vector<std::string> vocab = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"};
  for (int i = 0; i < 40000; ++i) vocab.push_back("token" + std::to_string(i));
  // The writer rewrites the file until the reader has read it 20 times: the reads fall among
  // the rewrites.
  constexpr int kReads = 20;
  std::atomic<int> reads{0}, writes{0};
  std::thread writer([&] {
    while (reads < kReads) {
      write_vocab(path, vocab);
      ++writes;
    }
  });
  int bad = 0;
  while (reads < kReads) {
    if (!std::filesystem::exists(path)) continue;
    try {
      bad += read_vocab(path).size() != vocab.size();
    } catch (const IOError&) {
      ++bad;
    }
    ++reads;
  }
  writer.join();
  INFO(writes << " writes while the file was read " << kReads << " times");
  CHECK(writes > 1);
  CHECK(bad == 0);
  REQUIRE(read_vocab(path) == vocab);
}

TEST_CASE("tokenizer: a vocab file that cannot be written names the file and the system's reason", "[data]") {
  ScratchDir dir;
  write_text(dir.file("plain"), "x");
  const std::string path = dir.file("plain") + "/vocab.txt";  // below a regular file
  REQUIRE_THROWS_WITH(write_vocab(path, {"[PAD]", "a"}), Catch::Contains("'" + path + "'") &&
                                                             Catch::Contains("Not a directory") &&
                                                             !Catch::Contains("write_vocab"));
}
