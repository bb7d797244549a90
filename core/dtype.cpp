#include "core/dtype.h"

#include <ostream>

#include "core/error.h"

namespace precis {

std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "f32";
    case DType::f64: return "f64";
    case DType::f16: return "f16";
    case DType::bf16: return "bf16";
    case DType::i64: return "i64";
    case DType::i32: return "i32";
    case DType::boolean: return "bool";
    case DType::f8_e4m3: return "f8_e4m3";
    case DType::f8_e5m2: return "f8_e5m2";
  }
  return "?";
}

std::string to_string(DType t) { return std::string(dtype_name(t)); }

std::ostream& operator<<(std::ostream& os, DType t) { return os << dtype_name(t); }

DType dtype_from_name(std::string_view name) {
  for (int i = 0; i < kNumDTypes; ++i)
    if (dtype_name(static_cast<DType>(i)) == name) return static_cast<DType>(i);
  throw ValueError(detail::str_cat("unknown dtype '", name, "'; expected one of f32, f64, f16, bf16, i64, i32, bool, f8_e4m3, f8_e5m2"));
}

namespace {
// Rank within a kind: bool(0) < i32 < i64 < floats.
int kind_rank(DType t) {
  if (t == DType::boolean) return 0;
  if (is_integral(t)) return 1;
  return 2;
}
}  // namespace

DType promote_types(DType a, DType b) {
  if (a == b) return a;
  if (is_float8(a) || is_float8(b))
    throw DTypeError(detail::str_cat("promotion of ", dtype_name(a), " with ", dtype_name(b),
                                     " is not supported: fp8 is a storage format; cast the fp8 operand to bf16 or "
                                     "f32 first (x.to(DType::bf16)), as PyTorch requires"));
  int ka = kind_rank(a), kb = kind_rank(b);
  if (ka != kb) return ka > kb ? a : b;
  if (ka == 1) return DType::i64;  // i32 with i64
  // Both floating and different.
  if (a == DType::f64 || b == DType::f64) return DType::f64;
  if (a == DType::f32 || b == DType::f32) return DType::f32;
  return DType::f32;  // f16 with bf16: neither holds the other
}

}  // namespace precis
