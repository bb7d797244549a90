#pragma once
// Element types. A tensor's dtype is one of these; f16 and bf16 are storage formats whose
// arithmetic is done in fp32 (docs/design/precision.md). f8_e4m3 and f8_e5m2 are storage and
// GEMM-operand formats only (docs/fp8.md): casts, fills, views and scaled_matmul take them, other
// ops ask for a cast first.
#include <cstddef>
#include <cstdint>
#include <iosfwd>
#include <string>
#include <string_view>

namespace precis {

enum class DType : uint8_t {
  f32, f64, f16, bf16, i64, i32, boolean,
  // FP8 (core/float8.h): E4M3 "fn" (max 448, no inf) and E5M2 (max 57344, IEEE-like). Last, so
  // the codes of the other dtypes are unchanged.
  f8_e4m3, f8_e5m2,
  // PyTorch's spellings, for code written from torch.* habits: the same values, so
  // DType::float32 == DType::f32 and switches over the short names cover them.
  float32 = f32, float64 = f64, float16 = f16, half = f16, bfloat16 = bf16, int64 = i64, int32 = i32,
  float8_e4m3fn = f8_e4m3, float8_e5m2 = f8_e5m2,
};
inline constexpr int kNumDTypes = 9;

/// Bytes per element.
constexpr size_t element_size(DType t) {
  switch (t) {
    case DType::f32: return 4;
    case DType::f64: return 8;
    case DType::f16: return 2;
    case DType::bf16: return 2;
    case DType::i64: return 8;
    case DType::i32: return 4;
    case DType::boolean: return 1;
    case DType::f8_e4m3: return 1;
    case DType::f8_e5m2: return 1;
  }
  return 0;
}

/// True for f32, f64, f16, bf16: the dtypes ops compute in. Not for the fp8 dtypes (unlike
/// PyTorch's is_floating_point): they are storage formats, see is_float8.
constexpr bool is_floating(DType t) {
  return t == DType::f32 || t == DType::f64 || t == DType::f16 || t == DType::bf16;
}
/// True for f16 and bf16: the dtypes autocast lowers to.
constexpr bool is_low_precision(DType t) { return t == DType::f16 || t == DType::bf16; }
constexpr bool is_integral(DType t) { return t == DType::i64 || t == DType::i32; }
/// True for f8_e4m3 and f8_e5m2.
constexpr bool is_float8(DType t) { return t == DType::f8_e4m3 || t == DType::f8_e5m2; }

/// Short name as used in messages and safetensors-compatible code ("f32", "bf16", "bool",
/// "f8_e4m3", ...).
std::string_view dtype_name(DType t);
/// Inverse of dtype_name; throws ValueError on an unknown name.
DType dtype_from_name(std::string_view name);
/// dtype_name as a string: to_string(DType::bf16) == "bf16" (PyTorch's str(torch.bfloat16)).
std::string to_string(DType t);
/// Writes dtype_name(t): `std::cout << x.dtype()` prints "bf16".
std::ostream& operator<<(std::ostream& os, DType t);

/// PyTorch's promotion for binary ops between two tensors: bool < integers < floating;
/// among floats the wider wins, and f16 with bf16 gives f32. An fp8 dtype promotes only with
/// itself; with any other dtype it throws DTypeError, as PyTorch does.
DType promote_types(DType a, DType b);

}  // namespace precis
