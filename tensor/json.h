#pragma once
// A small, strict JSON reader and string escaper for file headers (safetensors). Not a general
// JSON library: numbers keep their text and say whether they are integers, objects keep their key
// order and reject duplicate keys, nesting is limited so hostile input cannot exhaust the stack.
// Errors are thrown as precis::IOError prefixed with the caller's `what` (usually the file name).
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace precis::json {

struct Value {
  // Declared here, defined in json.cpp where Value is complete: clang with libstdc++ 12 refuses
  // to instantiate vector<pair<string, Value>>'s members inside Value's own definition.
  Value();
  ~Value();
  Value(const Value&);
  Value(Value&&) noexcept;
  Value& operator=(const Value&);
  Value& operator=(Value&&) noexcept;

  enum class Kind : uint8_t { null, boolean, number, string, array, object };
  Kind kind = Kind::null;
  bool boolean = false;
  /// number: the literal as written; is_integer when it has no fraction or exponent and fits in
  /// int64 (then `integer` holds it).
  std::string text;
  bool is_integer = false;
  int64_t integer = 0;
  /// string: the decoded UTF-8 text.
  std::string string;
  std::vector<Value> array;
  std::vector<std::pair<std::string, Value>> object;  // in file order; keys unique

  /// The member named key, or null when absent (objects only).
  const Value* find(std::string_view key) const;
};

/// "object", "array", "string", "number", "true"/"false", "null" — for error messages.
std::string kind_name(const Value& v);

/// Parses one JSON value filling all of `text` (whitespace around it allowed). Rejects invalid
/// UTF-8, control characters in strings, lone surrogates, leading zeros, duplicate object keys,
/// nesting deeper than kMaxDepth and anything after the value. Throws IOError("<what>: ...").
inline constexpr int kMaxDepth = 64;
Value parse(std::string_view text, const std::string& what);

/// Appends s as a JSON string literal (quotes included; ", \ and control characters escaped;
/// other UTF-8 kept as it is).
void append_quoted(std::string& out, std::string_view s);

/// True when s is well-formed UTF-8 (no overlong forms, no surrogates, <= U+10FFFF).
bool is_valid_utf8(std::string_view s);

}  // namespace precis::json
