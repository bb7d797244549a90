#pragma once
// The dtype visitor: DType (a run-time value) to the C++ element type a kernel is instantiated
// for. One visitor for every backend; `Types` says which C++ types stand for f16 and bf16
// (HostTypes: precis::Half / BFloat16; the CUDA backend passes __half / __nv_bfloat16).
// visit_dtype covers the compute dtypes; the fp8 storage dtypes reach a kernel only through
// visit_dtype_with_fp8 (copies, fills), so no arithmetic kernel is instantiated for them.
//
//   visit_dtype(t.dtype(), [&]<typename T>() { run<T>(static_cast<T*>(t.data_ptr()), t.numel()); });
#include <cstdint>
#include <type_traits>
#include <utility>

#include "core/dtype.h"
#include "core/error.h"
#include "core/float8.h"
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
  else if constexpr (std::is_same_v<T, Float8E4M3>) return DType::f8_e4m3;
  else if constexpr (std::is_same_v<T, Float8E5M2>) return DType::f8_e5m2;
  else {
    static_assert(std::is_same_v<T, bool>, "dtype_of: not an element type");
    return DType::boolean;
  }
}

namespace detail {
[[noreturn]] inline void throw_fp8_not_computed(DType dtype) {
  throw DTypeError(str_cat("this operation does not take ", dtype_name(dtype),
                           ": fp8 is a storage and GEMM format (casts, fills, views, scaled_matmul), not a "
                           "compute dtype; cast to bf16 or f32 first (x.to(DType::bf16)), as in PyTorch"));
}
}  // namespace detail

/// Returns f.template operator()<T>() with T the C++ type of `dtype`, for the compute dtypes and
/// bool; an fp8 dtype throws DTypeError (detail::throw_fp8_not_computed).
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
    case DType::f8_e4m3:
    case DType::f8_e5m2: detail::throw_fp8_not_computed(dtype);
  }
  throw InternalError(detail::str_cat("visit_dtype: unknown dtype code ", static_cast<int>(dtype)));
}

/// visit_dtype over every dtype, the fp8 ones included (as precis::Float8E4M3 / Float8E5M2 on
/// host and device alike): for kernels that only convert or move elements.
template <typename Types = HostTypes, typename F>
decltype(auto) visit_dtype_with_fp8(DType dtype, F&& f) {
  if (dtype == DType::f8_e4m3) return f.template operator()<Float8E4M3>();
  if (dtype == DType::f8_e5m2) return f.template operator()<Float8E5M2>();
  return visit_dtype<Types>(dtype, std::forward<F>(f));
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
