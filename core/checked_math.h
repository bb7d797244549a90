#pragma once
// Checked arithmetic for sizes: element counts, byte sizes, strides and offsets. Every size that
// comes from a user (a shape, a slice bound, a kernel size) or from a file (a header field) is
// combined with these, never with bare * and +: signed overflow is undefined behaviour, and an
// unsigned wrap-around turns a huge request into a small allocation that later writes run past.
//
// Each function returns std::nullopt instead of a wrapped value; the caller throws the typed error
// that fits its context (ShapeError for a user's shape, IOError for a file header, ...) and names
// the operands, so this header needs nothing but <optional>.
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <span>

namespace precis {

/// The largest byte count one allocation may ask for: what a signed 64-bit offset can address.
inline constexpr uint64_t kMaxAllocationBytes = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());

/// a + b, or nullopt when the sum does not fit in int64.
inline std::optional<int64_t> checked_add(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_add_overflow(a, b, &r)) return std::nullopt;
  return r;
}

/// a - b, or nullopt when the difference does not fit in int64.
inline std::optional<int64_t> checked_sub(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_sub_overflow(a, b, &r)) return std::nullopt;
  return r;
}

/// a * b, or nullopt when the product does not fit in int64.
inline std::optional<int64_t> checked_mul(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_mul_overflow(a, b, &r)) return std::nullopt;
  return r;
}

/// The element count of a shape, or nullopt when a size is negative or when the product of the
/// sizes, counting a 0 as a 1, does not fit in int64. Counting zeros as ones keeps the contiguous
/// strides of every accepted shape representable ([0, 2^40, 2^40] has no elements but its first
/// stride would be 2^80).
inline std::optional<int64_t> checked_numel(std::span<const int64_t> sizes) {
  int64_t n = 1;
  bool empty = false;
  for (int64_t s : sizes) {
    if (s < 0) return std::nullopt;
    if (s == 0) {
      empty = true;
      continue;
    }
    if (__builtin_mul_overflow(n, s, &n)) return std::nullopt;
  }
  return empty ? 0 : n;
}

/// numel elements of element_size bytes each, or nullopt when numel is negative or the byte count
/// exceeds kMaxAllocationBytes.
inline std::optional<uint64_t> checked_nbytes(int64_t numel, size_t element_size) {
  if (numel < 0) return std::nullopt;
  uint64_t r;
  if (__builtin_mul_overflow(static_cast<uint64_t>(numel), static_cast<uint64_t>(element_size), &r) ||
      r > kMaxAllocationBytes)
    return std::nullopt;
  return r;
}

/// ceil(a / b) for a >= 0, b > 0, without the overflow of (a + b - 1) / b.
inline int64_t ceil_div(int64_t a, int64_t b) { return a == 0 ? 0 : (a - 1) / b + 1; }

}  // namespace precis
