// The strict JSON reader of safetensors headers (tensor/json.h), on raw bytes.
#include <string_view>

#include "core/error.h"
#include "fuzz/common.h"
#include "tensor/json.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    precis::json::Value v = precis::json::parse(text, "fuzz");
    // Round-trip what was read through the escaper: it must accept every decoded string.
    std::string out;
    if (v.kind == precis::json::Value::Kind::string) precis::json::append_quoted(out, v.string);
    for (const auto& [key, member] : v.object) precis::json::append_quoted(out, key);
    (void)precis::json::kind_name(v);
    (void)precis::json::is_valid_utf8(text);
  } catch (const precis::Error&) {
  }
  return 0;
}
