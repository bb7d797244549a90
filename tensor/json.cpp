#include "tensor/json.h"

#include <limits>
#include <unordered_set>

#include "core/error.h"

namespace precis::json {

Value::Value() = default;
Value::~Value() = default;
Value::Value(const Value&) = default;
Value::Value(Value&&) noexcept = default;
Value& Value::operator=(const Value&) = default;
Value& Value::operator=(Value&&) noexcept = default;

const Value* Value::find(std::string_view key) const {
  for (const auto& [k, v] : object)
    if (k == key) return &v;
  return nullptr;
}

std::string kind_name(const Value& v) {
  switch (v.kind) {
    case Value::Kind::null: return "null";
    case Value::Kind::boolean: return v.boolean ? "true" : "false";
    case Value::Kind::number: return "number " + v.text;
    case Value::Kind::string: return "string";
    case Value::Kind::array: return "array";
    case Value::Kind::object: return "object";
  }
  return "?";
}

namespace {

// Length of the UTF-8 sequence starting at s[i] when it is well-formed, else 0.
size_t utf8_sequence_length(std::string_view s, size_t i) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = byte(i);
  if (c < 0x80) return 1;
  size_t n;
  uint32_t cp;
  if ((c & 0xE0) == 0xC0) {
    n = 2;
    cp = c & 0x1F;
  } else if ((c & 0xF0) == 0xE0) {
    n = 3;
    cp = c & 0x0F;
  } else if ((c & 0xF8) == 0xF0) {
    n = 4;
    cp = c & 0x07;
  } else {
    return 0;
  }
  if (i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    if ((byte(i + k) & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (byte(i + k) & 0x3F);
  }
  static constexpr uint32_t kMinForLength[5] = {0, 0, 0x80, 0x800, 0x10000};
  if (cp < kMinForLength[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  return n;
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

class Parser {
 public:
  Parser(std::string_view text, const std::string& what) : s_(text), what_(what) {}

  Value parse_document() {
    skip_ws();
    Value v = parse_value(0);
    skip_ws();
    if (pos_ != s_.size()) fail("unexpected ", describe_here(), " after the end of the JSON header");
    return v;
  }

 private:
  template <typename... Args>
  [[noreturn]] void fail(const Args&... args) const {
    throw IOError(detail::str_cat(what_, ": invalid JSON header at byte ", pos_, ": ", args...));
  }

  std::string describe_here() const {
    if (pos_ >= s_.size()) return "end of header";
    const unsigned char c = static_cast<unsigned char>(s_[pos_]);
    if (c >= 0x20 && c < 0x7F) return std::string("character '") + static_cast<char>(c) + "'";
    static const char* kHex = "0123456789abcdef";
    return std::string("byte 0x") + kHex[c >> 4] + kHex[c & 15];
  }

  void skip_ws() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\n' || s_[pos_] == '\r')) ++pos_;
  }

  void expect(char c) {
    if (pos_ >= s_.size() || s_[pos_] != c) fail("expected '", c, "', found ", describe_here());
    ++pos_;
  }

  bool consume(char c) {
    if (pos_ >= s_.size() || s_[pos_] != c) return false;
    ++pos_;
    return true;
  }

  // After a member or element: true at the container's `close`, false after a ',' (another one
  // follows); anything else is an error naming the container (`what`).
  bool end_of_container(char close, const char* what) {
    skip_ws();
    if (consume(',')) return false;
    if (consume(close)) return true;
    fail("expected ',' or '", close, "' in ", what, ", found ", describe_here());
  }

  bool consume_literal(std::string_view lit) {
    if (s_.substr(pos_, lit.size()) != lit) return false;
    pos_ += lit.size();
    return true;
  }

  Value parse_value(int depth) {
    if (depth > kMaxDepth) fail("nesting deeper than ", kMaxDepth, " levels");
    if (pos_ >= s_.size()) fail("unexpected end of header, expected a value");
    Value v;
    const char c = s_[pos_];
    if (c == '{') {
      parse_object(v, depth);
    } else if (c == '[') {
      parse_array(v, depth);
    } else if (c == '"') {
      v.kind = Value::Kind::string;
      v.string = parse_string();
    } else if (c == '-' || (c >= '0' && c <= '9')) {
      parse_number(v);
    } else if (consume_literal("true")) {
      v.kind = Value::Kind::boolean;
      v.boolean = true;
    } else if (consume_literal("false")) {
      v.kind = Value::Kind::boolean;
    } else if (consume_literal("null")) {
      v.kind = Value::Kind::null;
    } else {
      fail("expected a value, found ", describe_here());
    }
    return v;
  }

  void parse_object(Value& v, int depth) {
    v.kind = Value::Kind::object;
    expect('{');
    skip_ws();
    if (consume('}')) return;
    // Duplicate keys: a linear search while the object is small (a safetensors entry has three
    // keys), a hash set once it is not, so a header of n tensors parses in O(n), not O(n^2).
    constexpr size_t kLinearKeys = 16;
    std::unordered_set<std::string> keys;
    while (true) {
      skip_ws();
      if (pos_ >= s_.size() || s_[pos_] != '"') fail("expected a quoted key, found ", describe_here());
      const size_t key_pos = pos_;
      std::string key = parse_string();
      bool duplicate;
      if (v.object.size() < kLinearKeys) {
        duplicate = v.find(key) != nullptr;
      } else {
        if (keys.empty())
          for (const auto& member : v.object) keys.insert(member.first);
        duplicate = !keys.insert(key).second;
      }
      if (duplicate) {
        pos_ = key_pos;
        fail("duplicate key \"", key, "\"");
      }
      skip_ws();
      expect(':');
      skip_ws();
      Value member = parse_value(depth + 1);
      v.object.emplace_back(std::move(key), std::move(member));
      if (end_of_container('}', "an object")) return;
    }
  }

  void parse_array(Value& v, int depth) {
    v.kind = Value::Kind::array;
    expect('[');
    skip_ws();
    if (consume(']')) return;
    while (true) {
      skip_ws();
      v.array.push_back(parse_value(depth + 1));
      if (end_of_container(']', "an array")) return;
    }
  }

  uint32_t parse_hex4() {
    if (pos_ + 4 > s_.size()) fail("truncated \\u escape");
    uint32_t cp = 0;
    for (int k = 0; k < 4; ++k) {
      const char h = s_[pos_++];
      cp <<= 4;
      if (h >= '0' && h <= '9') {
        cp |= static_cast<uint32_t>(h - '0');
      } else if (h >= 'a' && h <= 'f') {
        cp |= static_cast<uint32_t>(h - 'a' + 10);
      } else if (h >= 'A' && h <= 'F') {
        cp |= static_cast<uint32_t>(h - 'A' + 10);
      } else {
        --pos_;
        fail("invalid hex digit in a \\u escape: ", describe_here());
      }
    }
    return cp;
  }

  std::string parse_string() {
    expect('"');
    std::string out;
    while (true) {
      if (pos_ >= s_.size()) fail("unterminated string");
      const unsigned char c = static_cast<unsigned char>(s_[pos_]);
      if (c == '"') {
        ++pos_;
        return out;
      }
      if (c < 0x20) fail("unescaped control character in a string: ", describe_here());
      if (c == '\\') {
        ++pos_;
        if (pos_ >= s_.size()) fail("unterminated escape in a string");
        const char e = s_[pos_++];
        switch (e) {
          case '"': out += '"'; break;
          case '\\': out += '\\'; break;
          case '/': out += '/'; break;
          case 'b': out += '\b'; break;
          case 'f': out += '\f'; break;
          case 'n': out += '\n'; break;
          case 'r': out += '\r'; break;
          case 't': out += '\t'; break;
          case 'u': {
            uint32_t cp = parse_hex4();
            if (cp >= 0xDC00 && cp <= 0xDFFF) fail("lone low surrogate \\u", std::hex, cp, " in a string");
            if (cp >= 0xD800 && cp <= 0xDBFF) {
              // A high surrogate must be followed by an escaped low surrogate.
              if (!consume_literal("\\u")) fail("high surrogate not followed by a low surrogate");
              const uint32_t lo = parse_hex4();
              if (lo < 0xDC00 || lo > 0xDFFF) fail("high surrogate not followed by a low surrogate");
              cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            }
            append_utf8(out, cp);
            break;
          }
          default:
            --pos_;
            fail("invalid escape \\", describe_here());
        }
        continue;
      }
      const size_t n = utf8_sequence_length(s_, pos_);
      if (n == 0) fail("invalid UTF-8 in a string: ", describe_here());
      out.append(s_.substr(pos_, n));
      pos_ += n;
    }
  }

  void parse_number(Value& v) {
    v.kind = Value::Kind::number;
    const size_t start = pos_;
    const auto digit = [&] { return pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9'; };
    const bool negative = s_[pos_] == '-';
    if (negative) ++pos_;
    if (!digit()) fail("expected a digit, found ", describe_here());
    if (s_[pos_] == '0' && pos_ + 1 < s_.size() && s_[pos_ + 1] >= '0' && s_[pos_ + 1] <= '9')
      fail("numbers must not have leading zeros");
    // Accumulate the integer part, noting overflow past int64.
    bool fits = true;
    uint64_t magnitude = 0;
    while (digit()) {
      const uint64_t d = static_cast<uint64_t>(s_[pos_] - '0');
      if (magnitude > (std::numeric_limits<uint64_t>::max() - d) / 10) fits = false;
      magnitude = magnitude * 10 + d;
      ++pos_;
    }
    bool integral = true;
    if (pos_ < s_.size() && s_[pos_] == '.') {
      integral = false;
      ++pos_;
      if (!digit()) fail("expected a digit after the decimal point, found ", describe_here());
      while (digit()) ++pos_;
    }
    if (pos_ < s_.size() && (s_[pos_] == 'e' || s_[pos_] == 'E')) {
      integral = false;
      ++pos_;
      if (pos_ < s_.size() && (s_[pos_] == '+' || s_[pos_] == '-')) ++pos_;
      if (!digit()) fail("expected a digit in the exponent, found ", describe_here());
      while (digit()) ++pos_;
    }
    v.text = std::string(s_.substr(start, pos_ - start));
    const uint64_t limit = negative ? uint64_t{1} << 63 : static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
    if (integral && fits && magnitude <= limit) {
      v.is_integer = true;
      // -2^63 has no positive int64 counterpart: negate in unsigned arithmetic.
      v.integer = negative ? static_cast<int64_t>(~magnitude + 1) : static_cast<int64_t>(magnitude);
    }
  }

  std::string_view s_;
  const std::string& what_;
  size_t pos_ = 0;
};

}  // namespace

Value parse(std::string_view text, const std::string& what) { return Parser(text, what).parse_document(); }

void append_quoted(std::string& out, std::string_view s) {
  static const char* kHex = "0123456789abcdef";
  out += '"';
  for (const char ch : s) {
    const unsigned char c = static_cast<unsigned char>(ch);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += ch;
    } else if (c < 0x20) {
      out += "\\u00";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    } else {
      out += ch;
    }
  }
  out += '"';
}

bool is_valid_utf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const size_t n = utf8_sequence_length(s, i);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

}  // namespace precis::json
