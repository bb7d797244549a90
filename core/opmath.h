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

/// v converted to the integer type I, saturating: NaN gives 0, a value below or above I's range
/// gives I's minimum or maximum, any other value is truncated toward zero. A plain static_cast is
/// undefined behaviour for NaN and out-of-range values (C++ [conv.fpint]); PyTorch leaves the
/// result unspecified too (x86 gives INT_MIN, other CPUs saturate). Saturation is what CUDA's
/// float-to-integer conversion (cvt.rzi) does, so the CPU and CUDA kernels agree on every input.
template <typename I, typename F>
PRECIS_HD_INLINE I saturating_float_to_int(F v) {
  static_assert(std::is_integral_v<I> && !std::is_same_v<I, bool> && std::is_floating_point_v<F>);
  constexpr int kDigits = static_cast<int>(sizeof(I)) * 8 - (std::is_signed_v<I> ? 1 : 0);
  constexpr F kLimit = static_cast<F>(uint64_t{1} << (kDigits - 1)) * F(2);  // max + 1, a power of 2: exact
  constexpr I kMax = std::is_signed_v<I> ? static_cast<I>((uint64_t{1} << kDigits) - 1) : static_cast<I>(~uint64_t{0});
  constexpr I kMin = std::is_signed_v<I> ? static_cast<I>(-kMax - 1) : I(0);
  if (!(v == v)) return I(0);
  if (v >= kLimit) return kMax;
  if constexpr (std::is_signed_v<I>) {
    if (v < -kLimit) return kMin;  // -kLimit itself is kMin, exact
  } else {
    if (v <= F(-1)) return kMin;  // (-1, 0) truncates to 0, in range
  }
  return static_cast<I>(v);
}

/// Integer arithmetic that wraps around modulo 2^bits on overflow (two's complement), as integer
/// tensors do in PyTorch in practice and on CUDA hardware; signed overflow is undefined behaviour
/// in C++, so signed operands are computed in the unsigned type (modular by definition) and
/// converted back (modular since C++20). Floating types use the plain operators. Same instructions
/// as the plain operators: vectorised loops stay vectorised.
template <typename T>
using wrapping_unsigned_t = std::conditional_t<(sizeof(T) < sizeof(unsigned)), unsigned, std::make_unsigned_t<T>>;
template <typename T>
PRECIS_HD_INLINE T wrapping_add(T a, T b) {
  if constexpr (std::is_integral_v<T> && std::is_signed_v<T>) {
    using U = wrapping_unsigned_t<T>;
    return static_cast<T>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));
  } else {
    return a + b;
  }
}
template <typename T>
PRECIS_HD_INLINE T wrapping_sub(T a, T b) {
  if constexpr (std::is_integral_v<T> && std::is_signed_v<T>) {
    using U = wrapping_unsigned_t<T>;
    return static_cast<T>(static_cast<U>(static_cast<U>(a) - static_cast<U>(b)));
  } else {
    return a - b;
  }
}
template <typename T>
PRECIS_HD_INLINE T wrapping_mul(T a, T b) {
  if constexpr (std::is_integral_v<T> && std::is_signed_v<T>) {
    using U = wrapping_unsigned_t<T>;
    return static_cast<T>(static_cast<U>(static_cast<U>(a) * static_cast<U>(b)));
  } else {
    return a * b;
  }
}

/// Arithmetic types and bool: computed in themselves; stored by static_cast (bool: v != 0), a
/// floating value into an integer type saturating (saturating_float_to_int).
template <typename T>
struct ElementTraits {
  /// The type arithmetic on T is done in.
  using compute = T;
  /// Whether T is a 16-bit float stored narrower than it is computed.
  static constexpr bool reduced_float = false;
  /// An element as the compute type.
  static PRECIS_HD_INLINE T load(T v) { return v; }
  /// A computed value stored as T (bool: v != 0; floating into integer: saturating).
  template <typename U>
  static PRECIS_HD_INLINE T store(U v) {
    if constexpr (std::is_same_v<T, bool>) {
      return v != U(0);
    } else if constexpr (std::is_integral_v<T> && std::is_floating_point_v<U>) {
      return saturating_float_to_int<T>(v);
    } else {
      return static_cast<T>(v);
    }
  }
};

/// The host 16-bit floats: computed in float, stored rounded to nearest even (core/half.h). A
/// double goes in through float, as the CPU copy kernel has always done.
template <typename T>
struct HostReducedFloatTraits {
  /// 16-bit floats compute in float.
  using compute = float;
  /// Always true: T is stored narrower than it is computed.
  static constexpr bool reduced_float = true;
  /// An element widened to float (exact).
  static inline float load(T v) { return static_cast<float>(v); }
  /// A computed value rounded to T once (a double goes through float first).
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

/// v stored as a T: rounded to nearest even for the 16-bit floats, v != 0 for bool, saturating
/// from a floating type into an integer type (NaN gives 0), a static_cast otherwise.
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
