#pragma once
// The dtype visitor: DType (a run-time value) to the C++ element type a kernel is instantiated
// for. One visitor for every backend; `Types` says which C++ types stand for f16 and bf16
// (HostTypes: precis::Half / BFloat16; the CUDA backend passes __half / __nv_bfloat16).
//
//   visit_dtype(t.dtype(), [&]<typename T>() { run<T>(static_cast<T*>(t.data_ptr()), t.numel()); });
#include <cstdint>
#include <type_traits>

#include "core/dtype.h"
#include "core/error.h"
#include "core/half.h"

namespace precis {

/// The host storage types of the 16-bit floats.
struct HostTypes {
  using f16 = Half;
  using bf16 = BFloat16;
};

/// The DType of host element type T (the inverse of visit_dtype with HostTypes).
template <typename T>
constexpr DType dtype_of() {
  if constexpr (std::is_same_v<T, float>) return DType::f32;
  else if constexpr (std::is_same_v<T, double>) return DType::f64;
  else if constexpr (std::is_same_v<T, Half>) return DType::f16;
  else if constexpr (std::is_same_v<T, BFloat16>) return DType::bf16;
  else if constexpr (std::is_same_v<T, int64_t>) return DType::i64;
  else if constexpr (std::is_same_v<T, int32_t>) return DType::i32;
  else {
    static_assert(std::is_same_v<T, bool>, "dtype_of: not an element type");
    return DType::boolean;
  }
}

/// Returns f.template operator()<T>() with T the C++ type of `dtype`.
template <typename Types = HostTypes, typename F>
decltype(auto) visit_dtype(DType dtype, F&& f) {
  switch (dtype) {
    case DType::f32: return f.template operator()<float>();
    case DType::f64: return f.template operator()<double>();
    case DType::f16: return f.template operator()<typename Types::f16>();
    case DType::bf16: return f.template operator()<typename Types::bf16>();
    case DType::i64: return f.template operator()<int64_t>();
    case DType::i32: return f.template operator()<int32_t>();
    case DType::boolean: return f.template operator()<bool>();
  }
  throw InternalError(detail::str_cat("visit_dtype: unknown dtype code ", static_cast<int>(dtype)));
}

/// visit_dtype for kernels that exist for the floating dtypes only (f32, f64, f16, bf16): f is
/// not instantiated for the others. The caller checks the dtype first (with an error naming the
/// op and operand); reaching a non-floating dtype here is an internal error.
template <typename Types = HostTypes, typename F>
decltype(auto) visit_floating_dtype(DType dtype, F&& f) {
  switch (dtype) {
    case DType::f32: return f.template operator()<float>();
    case DType::f64: return f.template operator()<double>();
    case DType::f16: return f.template operator()<typename Types::f16>();
    case DType::bf16: return f.template operator()<typename Types::bf16>();
    default: break;
  }
  throw InternalError(detail::str_cat("visit_floating_dtype: ", dtype_name(dtype),
                                      " is not floating; the kernel should have checked its operands"));
}

}  // namespace precis
