#pragma once
// Block loads and stores shared by the element-wise CPU kernels. Low-precision rows are processed
// in blocks of kBlock elements: converted to their compute type (opmath_t) into a stack buffer,
// computed on, and converted back, so that the math runs on vectorisable float arrays and no
// temporary tensor is allocated.
#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "core/half.h"
#include "core/dtype_visit.h"
#include "core/opmath.h"

namespace precis::cpu {

/// Elements per block of the buffered (converting or gathering) row loops: a few KiB of stack.
inline constexpr int64_t kBlock = 256;

/// True for the storage types that compute in fp32 (Half, BFloat16).
template <typename T>
inline constexpr bool is_reduced_float_v = std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;

/// buf[i] = src[i * stride] in the compute type C, for i < n; bulk-converted when contiguous.
template <typename C, typename T>
inline void load_block(const T* src, int64_t stride, C* buf, int64_t n) {
  if (stride == 1) {
    if constexpr (std::is_same_v<T, Half> && std::is_same_v<C, float>) {
      half_to_float(src, buf, n);
      return;
    } else if constexpr (std::is_same_v<T, BFloat16> && std::is_same_v<C, float>) {
      bfloat16_to_float(src, buf, n);
      return;
    } else if constexpr (std::is_same_v<T, C>) {
      std::copy(src, src + n, buf);
      return;
    }
  }
  if (stride == 0) {
    std::fill(buf, buf + n, static_cast<C>(src[0]));
    return;
  }
  for (int64_t i = 0; i < n; ++i) buf[i] = static_cast<C>(src[i * stride]);
}

/// dst[i * stride] = buf[i] rounded to T, for i < n; bulk-converted when contiguous.
template <typename T, typename C>
inline void store_block(const C* buf, T* dst, int64_t stride, int64_t n) {
  if (stride == 1) {
    if constexpr (std::is_same_v<T, Half> && std::is_same_v<C, float>) {
      float_to_half(buf, dst, n);
      return;
    } else if constexpr (std::is_same_v<T, BFloat16> && std::is_same_v<C, float>) {
      float_to_bfloat16(buf, dst, n);
      return;
    } else if constexpr (std::is_same_v<T, C>) {
      std::copy(buf, buf + n, dst);
      return;
    }
  }
  for (int64_t i = 0; i < n; ++i) dst[i * stride] = convert<T>(buf[i]);
}

}  // namespace precis::cpu
