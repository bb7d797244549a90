#pragma once
// The compute ("opmath") type of each element type and the conversions into and out of it: one
// header for the CPU kernels (ops/cpu, g++) and the CUDA kernels (ops/cuda, nvcc), so that both
// backends round the same way and code written against these functions runs, and is tested, on
// the host. f16 and bf16 are storage formats computed in fp32 (docs/design/precision.md, docs/design/
// low-precision-ops.md); every other type computes in itself.
//
// Host code stores f16/bf16 as precis::Half / BFloat16 (core/half.h); device code as CUDA's
// __half / __nv_bfloat16, which exist only when nvcc compiles the file. Both pairs map to float
// here, and load_op / store_op convert each with its own (bit-identical: round to nearest even)
// conversion.
//
// PRECIS_HD marks a function for host and device when nvcc compiles the file, nothing otherwise.
// No C++ library headers beyond <cstdint> / <type_traits> / <cmath>: nvcc compiles this file.
#include <cstdint>
#include <type_traits>

#include "core/half.h"

#if defined(__CUDACC__)
#include "core/cuda/device_half.h"
#define PRECIS_HD __host__ __device__
#define PRECIS_HD_INLINE __host__ __device__ __forceinline__
#else
#define PRECIS_HD
#define PRECIS_HD_INLINE inline
#endif

namespace precis {

/// True for the 16-bit floating storage types: Half, BFloat16 (and __half, __nv_bfloat16 under
/// nvcc).
template <typename T>
inline constexpr bool is_reduced_float_v = std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>
#if defined(__CUDACC__)
                                           || std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16>
#endif
    ;

/// The type arithmetic on T is done in: float for the 16-bit floats, T otherwise.
template <typename T>
struct OpMath {
  using type = T;
};
template <> struct OpMath<Half> { using type = float; };
template <> struct OpMath<BFloat16> { using type = float; };
#if defined(__CUDACC__)
template <> struct OpMath<__half> { using type = float; };
template <> struct OpMath<__nv_bfloat16> { using type = float; };
#endif
template <typename T>
using opmath_t = typename OpMath<T>::type;

/// The value of a stored element in its compute type (exact: every f16/bf16 is a float).
template <typename T>
PRECIS_HD_INLINE opmath_t<T> load_op(T v) {
#if defined(__CUDACC__)
  if constexpr (std::is_same_v<T, __half>) {
    return __half2float(v);
  } else if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return __bfloat162float(v);
  } else
#endif
  if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
    return static_cast<float>(v);
  } else {
    return v;
  }
}

/// v stored as a T: rounded to nearest even for the 16-bit floats, v != 0 for bool, a
/// static_cast otherwise. A double goes into a host Half/BFloat16 through float (as the CPU copy
/// kernel has always done), into a device __half/__nv_bfloat16 directly.
template <typename T, typename U>
PRECIS_HD_INLINE T store_op(U v) {
  if constexpr (std::is_same_v<T, U>) {
    return v;
  } else if constexpr (std::is_same_v<T, bool>) {
    return v != U(0);
  } else
#if defined(__CUDACC__)
  if constexpr (std::is_same_v<T, __half>) {
    if constexpr (std::is_same_v<U, double>) return __double2half(v);
    else return __float2half_rn(static_cast<float>(v));
  } else if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    if constexpr (std::is_same_v<U, double>) return __double2bfloat16(v);
    else return __float2bfloat16_rn(static_cast<float>(v));
  } else
#endif
  if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
    return T(static_cast<float>(v));
  } else {
    return static_cast<T>(v);
  }
}

/// Converts between any two element types through the source's compute type.
template <typename To, typename From>
PRECIS_HD_INLINE To convert(From v) {
  if constexpr (std::is_same_v<To, From>) {
    return v;
  } else {
    return store_op<To>(load_op(v));
  }
}

}  // namespace precis
