#pragma once
// The per-element math of the CUDA index_add and scatter_add kernels (ops/cuda/index.cu), written
// so that each output element is computed by one thread with no atomics (deterministic), adding
// its contributions in the order the CPU kernel does (ops/cpu/index.cpp: increasing position along
// the indexed dim, in opmath_t, rounded once), so the two backends agree bit for bit;
// tests/ops/index_pool_math_test.cpp runs these functions on the host against the CPU kernels.
// Internal header: nvcc compiles it, so plain pointers and PRECIS_HD only (the grouping is host
// code).
#include <cstdint>

#include "core/opmath.h"

namespace precis::kernels {

/// index_add's grouping of a 1-D index of length k by value: positions[offsets[r] ... offsets[r+1])
/// are the i with index[i] == r, increasing (a stable counting sort). offsets: size + 1 entries,
/// positions: k. Returns the first i whose index is outside [0, size), or −1 when all are valid
/// (then the arrays are filled). Host only.
inline int64_t group_index_rows(const int64_t* index, int64_t k, int64_t size, int64_t* offsets, int64_t* positions) {
  for (int64_t r = 0; r <= size; ++r) offsets[r] = 0;
  for (int64_t i = 0; i < k; ++i) {
    if (index[i] < 0 || index[i] >= size) return i;
    ++offsets[index[i] + 1];
  }
  for (int64_t r = 0; r < size; ++r) offsets[r + 1] += offsets[r];
  // offsets[r] doubles as row r's write cursor, then is restored from the next row's start.
  for (int64_t i = 0; i < k; ++i) positions[offsets[index[i]]++] = i;
  for (int64_t r = size; r > 0; --r) offsets[r] = offsets[r - 1];
  offsets[0] = 0;
  return -1;
}

/// index_add for one output element: dst + Σ src[positions[p] · src_dim_stride] over p in
/// [begin, end), accumulated in opmath_t<T> in that order and rounded once. src points at the
/// element's column (its offset with the indexed coordinate 0).
template <typename T>
PRECIS_HD_INLINE T index_add_element(T dst, const T* src, int64_t src_dim_stride, const int64_t* positions,
                                     int64_t begin, int64_t end) {
  opmath_t<T> acc = load_op(dst);
  for (int64_t p = begin; p < end; ++p) acc = wrapping_add(acc, load_op(src[positions[p] * src_dim_stride]));
  return store_op<T>(acc);
}

/// scatter_add for output element j of a column along the indexed dim: dst + Σ src[i] over the
/// i < k with index[i] == j, in increasing i, accumulated in opmath_t<T> and rounded once. index
/// and src point at the column (strides along the indexed dim). `hit` tells whether any i matched.
template <typename T>
PRECIS_HD_INLINE T scatter_add_element(T dst, int64_t j, const int64_t* index, int64_t index_stride, const T* src,
                                       int64_t src_stride, int64_t k, bool& hit) {
  opmath_t<T> acc = load_op(dst);
  hit = false;
  for (int64_t i = 0; i < k; ++i) {
    if (index[i * index_stride] != j) continue;
    acc = wrapping_add(acc, load_op(src[i * src_stride]));
    hit = true;
  }
  return store_op<T>(acc);
}

}  // namespace precis::kernels
