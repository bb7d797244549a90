#pragma once
// The compute ("opmath") type of each element type and the conversions into and out of it: one
// header for the CPU kernels (ops/cpu, g++) and the CUDA kernels (ops/cuda, nvcc), so that both
// backends round the same way and code written against these functions runs, and is tested, on
// the host. f16 and bf16 are storage formats computed in fp32 (docs/design/precision.md, docs/design/
// low-precision-ops.md); every other type computes in itself.
//
// ElementTraits<T> says how: its compute type, load (exact widening) and store (rounding to
// nearest even for the 16-bit floats). Host code stores f16/bf16 as precis::Half / BFloat16
// (core/half.h, specialised here); device code as CUDA's __half / __nv_bfloat16, specialised in
// core/cuda/device_types.cuh, which only nvcc-compiled files include. This header includes no
// CUDA header, so it is public and installable.
//
// PRECIS_HD marks a function for host and device when nvcc compiles the file, nothing otherwise.
#include <cstdint>
#include <type_traits>

#include "core/half.h"

#if defined(__CUDACC__)
#define PRECIS_HD __host__ __device__
#define PRECIS_HD_INLINE __host__ __device__ __forceinline__
#else
#define PRECIS_HD
#define PRECIS_HD_INLINE inline
#endif

namespace precis {

/// Arithmetic types and bool: computed in themselves; stored by static_cast (bool: v != 0).
template <typename T>
struct ElementTraits {
  using compute = T;
  static constexpr bool reduced_float = false;
  static PRECIS_HD_INLINE T load(T v) { return v; }
  template <typename U>
  static PRECIS_HD_INLINE T store(U v) {
    if constexpr (std::is_same_v<T, bool>) {
      return v != U(0);
    } else {
      return static_cast<T>(v);
    }
  }
};

/// The host 16-bit floats: computed in float, stored rounded to nearest even (core/half.h). A
/// double goes in through float, as the CPU copy kernel has always done.
template <typename T>
struct HostReducedFloatTraits {
  using compute = float;
  static constexpr bool reduced_float = true;
  static inline float load(T v) { return static_cast<float>(v); }
  template <typename U>
  static inline T store(U v) {
    return T(static_cast<float>(v));
  }
};
template <> struct ElementTraits<Half> : HostReducedFloatTraits<Half> {};
template <> struct ElementTraits<BFloat16> : HostReducedFloatTraits<BFloat16> {};

/// True for the 16-bit floating storage types (Half, BFloat16, and on the device __half,
/// __nv_bfloat16).
template <typename T>
inline constexpr bool is_reduced_float_v = ElementTraits<T>::reduced_float;

/// The type arithmetic on T is done in: float for the 16-bit floats, T otherwise.
template <typename T>
using opmath_t = typename ElementTraits<T>::compute;

/// The value of a stored element in its compute type (exact: every f16/bf16 is a float).
template <typename T>
PRECIS_HD_INLINE opmath_t<T> load_op(T v) {
  return ElementTraits<T>::load(v);
}

/// v stored as a T: rounded to nearest even for the 16-bit floats, v != 0 for bool, a
/// static_cast otherwise.
template <typename T, typename U>
PRECIS_HD_INLINE T store_op(U v) {
  if constexpr (std::is_same_v<T, U>) {
    return v;
  } else {
    return ElementTraits<T>::template store<U>(v);
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
