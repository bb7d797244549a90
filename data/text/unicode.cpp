#include "data/text/unicode.h"

#include <algorithm>

#include "data/text/unicode_tables.h"

namespace precis::data::unicode {

namespace ut = unicode_tables;

std::u32string decode_utf8(std::string_view s) {
  std::u32string out;
  out.reserve(s.size());
  size_t i = 0;
  const size_t n = s.size();
  while (i < n) {
    const auto b0 = static_cast<unsigned char>(s[i]);
    if (b0 < 0x80) {
      out.push_back(b0);
      ++i;
      continue;
    }
    int len;
    char32_t cp;
    char32_t min;
    if ((b0 & 0xE0) == 0xC0) { len = 2; cp = b0 & 0x1F; min = 0x80; }
    else if ((b0 & 0xF0) == 0xE0) { len = 3; cp = b0 & 0x0F; min = 0x800; }
    else if ((b0 & 0xF8) == 0xF0) { len = 4; cp = b0 & 0x07; min = 0x10000; }
    else { ++i; continue; }  // a continuation byte or 0xF8..0xFF: not a start byte
    int k = 1;
    for (; k < len && i + k < n; ++k) {
      const auto b = static_cast<unsigned char>(s[i + k]);
      if ((b & 0xC0) != 0x80) break;
      cp = (cp << 6) | (b & 0x3F);
    }
    if (k < len) {  // truncated: drop the bytes read so far and resynchronise
      i += k;
      continue;
    }
    i += len;
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) continue;  // overlong, out of range, surrogate
    out.push_back(cp);
  }
  return out;
}

void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

std::string encode_utf8(std::u32string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char32_t c : text) append_utf8(out, c);
  return out;
}

bool is_valid_utf8(std::string_view text) {
  // Valid exactly when decoding drops nothing: re-encoding gives the same bytes back.
  return encode_utf8(decode_utf8(text)) == text;
}

namespace {

int char_class(char32_t cp) {
  const ut::ClassRange* begin = ut::kClassRanges;
  const ut::ClassRange* end = ut::kClassRanges + ut::kClassRangeCount;
  const auto* it = std::upper_bound(begin, end, cp, [](char32_t c, const ut::ClassRange& r) { return c < r.first; });
  if (it == begin) return 0;
  --it;
  return cp <= it->last ? it->cls : 0;
}

constexpr int kClassOther = 1, kClassPunct = 2, kClassMark = 3;

}  // namespace

bool is_whitespace(char32_t c) {
  switch (c) {
    case 0x09: case 0x0A: case 0x0B: case 0x0C: case 0x0D: case 0x20: case 0x85: case 0xA0: case 0x1680:
    case 0x2028: case 0x2029: case 0x202F: case 0x205F: case 0x3000:
      return true;
    default:
      return c >= 0x2000 && c <= 0x200A;
  }
}

bool is_control(char32_t c) {
  if (c == '\t' || c == '\n' || c == '\r') return false;
  if (c < 0x80) return c < 0x20 || c == 0x7F;
  return char_class(c) == kClassOther;
}

bool is_punctuation(char32_t c) {
  if ((c >= 33 && c <= 47) || (c >= 58 && c <= 64) || (c >= 91 && c <= 96) || (c >= 123 && c <= 126)) return true;
  if (c < 0x80) return false;
  return char_class(c) == kClassPunct;
}

bool is_nonspacing_mark(char32_t c) { return c >= 0x300 && char_class(c) == kClassMark; }

bool is_cjk(char32_t c) {
  return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x20000 && c <= 0x2A6DF) ||
         (c >= 0x2A700 && c <= 0x2B73F) || (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B820 && c <= 0x2CEAF) ||
         (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

void append_lower(std::u32string& out, char32_t c) {
  if (c < 0x80) {
    out.push_back(c >= 'A' && c <= 'Z' ? c + 32 : c);
    return;
  }
  if (c == 0x130) {  // İ → i + combining dot above (the one one-to-many lowercase mapping)
    out.push_back('i');
    out.push_back(0x307);
    return;
  }
  const ut::CodeMap* begin = ut::kLowerSingle;
  const ut::CodeMap* end = ut::kLowerSingle + ut::kLowerSingleCount;
  const auto* it = std::lower_bound(begin, end, c, [](const ut::CodeMap& m, char32_t x) { return m.from < x; });
  out.push_back(it != end && it->from == c ? it->to : c);
}

void append_stripped(std::u32string& out, char32_t c) {
  if (c < 0xC0) {
    out.push_back(c);
    return;
  }
  if (c >= 0xAC00 && c <= 0xD7A3) {  // Hangul syllable → leading, vowel and (optional) trailing jamo
    const char32_t s = c - 0xAC00;
    out.push_back(0x1100 + s / (21 * 28));
    out.push_back(0x1161 + (s % (21 * 28)) / 28);
    if (s % 28 != 0) out.push_back(0x11A7 + s % 28);
    return;
  }
  const ut::StripEntry* begin = ut::kStrip;
  const ut::StripEntry* end = ut::kStrip + ut::kStripCount;
  const auto* it = std::lower_bound(begin, end, c, [](const ut::StripEntry& e, char32_t x) { return e.cp < x; });
  if (it != end && it->cp == c) {
    out.append(ut::kStripPool + it->offset, it->length);
    return;
  }
  out.push_back(c);
}

const char* tables_version() { return ut::kUnicodeVersion; }

}  // namespace precis::data::unicode
