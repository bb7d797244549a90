#pragma once
// The Unicode processing BERT's tokenizer needs: UTF-8 coding, character classes, lowercasing
// and accent stripping. Tables come from Unicode 14 (data/text/gen_unicode_tables.py, from
// Python's unicodedata) and cover every code point: categories, one-to-one lowercase mappings
// (plus İ → i + U+0307), and canonical decompositions (NFD) of every precomposed character
// (Latin, Greek, Cyrillic, Vietnamese, CJK compatibility ideographs, …; Hangul syllables
// algorithmically). Context-dependent rules (final sigma) are not applied, as in BERT's per-character
// lowercasing.
#include <string>
#include <string_view>

namespace precis::data::unicode {

/// Decodes UTF-8. Invalid or truncated sequences (and encoded surrogates) are dropped, as
/// BERT's decode("utf-8", "ignore").
std::u32string decode_utf8(std::string_view text);
/// Appends the UTF-8 encoding of cp.
void append_utf8(std::string& out, char32_t cp);
std::string encode_utf8(std::u32string_view text);
/// True when `text` is valid UTF-8.
bool is_valid_utf8(std::string_view text);

/// Tab, newline, carriage return, or a character with the Unicode White_Space property.
bool is_whitespace(char32_t cp);
/// Category C* (Cc, Cf, Cs, Co, Cn) other than tab, newline and carriage return.
bool is_control(char32_t cp);
/// BERT's punctuation: ASCII non-alphanumeric printable characters, or category P*.
bool is_punctuation(char32_t cp);
/// Category Mn (nonspacing combining marks: the accents NFD separates out).
bool is_nonspacing_mark(char32_t cp);
/// The CJK ideograph blocks BERT isolates (Unified Ideographs, Extensions A–E, compatibility
/// ideographs and supplement); not Hiragana, Katakana or Hangul.
bool is_cjk(char32_t cp);

/// Appends the lowercase form of cp (one character, or two for U+0130).
void append_lower(std::u32string& out, char32_t cp);
/// Appends cp's canonical decomposition without its nonspacing marks (é → e, Å → A, ǖ → u;
/// a lone combining mark → nothing).
void append_stripped(std::u32string& out, char32_t cp);

/// The Unicode version of the tables.
const char* tables_version();

}  // namespace precis::data::unicode
