#pragma once
// The per-element math of the CUDA index_add and scatter_add kernels (ops/cuda/index.cu), written
// so that each output element is computed by one thread with no atomics (deterministic), adding
// its contributions in the order the CPU kernel does (ops/cpu/index.cpp: increasing position along
// the indexed dim, in opmath_t, rounded once), so the two backends agree bit for bit;
// tests/ops/index_pool_math_test.cpp runs these functions on the host against the CPU kernels.
// Internal header: nvcc compiles it, so plain pointers and PRECIS_HD only.
#include <cstdint>

#include "core/opmath.h"

namespace precis::kernels {

/// index_add's grouping of a 1-D index of length k by row (ops/cuda/index.cu), with no read of
/// the index on the host: offsets (size + 1 entries) and positions (k), where
/// positions[offsets[r] ... offsets[r+1]) are the i with index[i] == r, increasing. Position i is
/// sorted, stably, under group_key(index[i], size) — its row, or `size` for an index outside
/// [0, size), so that no row's group holds it (the op's device-side check reports it) — and
/// offsets[r] is the first sorted position whose key is >= r (group_offset, a binary search).
/// tests/ops/index_pool_math_test.cpp checks the steps against a counting sort, invalid indices
/// included.
PRECIS_HD_INLINE uint64_t group_key(int64_t v, int64_t size) {
  return static_cast<uint64_t>(v >= 0 && v < size ? v : size);
}

/// The first position p in [0, k) with sorted_keys[p] >= r, or k (sorted_keys ascending).
PRECIS_HD_INLINE int64_t group_offset(const uint64_t* sorted_keys, int64_t k, int64_t r) {
  int64_t lo = 0, hi = k;
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (sorted_keys[mid] < static_cast<uint64_t>(r)) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/// index_add for one output element: dst + Σ src[(positions[p] − first) · src_dim_stride] over p
/// in [begin, end), accumulated in opmath_t<T> in that order and rounded once. src points at the
/// element's column (its offset with the indexed coordinate 0). `first`: the position of the
/// column's first entry when positions number the entries of many columns (a grouped scatter_add).
template <typename T>
PRECIS_HD_INLINE T index_add_element(T dst, const T* src, int64_t src_dim_stride, const int64_t* positions,
                                     int64_t begin, int64_t end, int64_t first = 0) {
  opmath_t<T> acc = load_op(dst);
  for (int64_t p = begin; p < end; ++p)
    acc = wrapping_add(acc, load_op(src[(positions[p] - first) * src_dim_stride]));
  return store_op<T>(acc);
}

/// A grouped scatter_add's key for index value v of column col (columns of `rows` outputs): the
/// output element it adds to, numbered col · rows + v, or −1 for v outside [0, rows) (group_key
/// then puts it in no group). Grouping entry col · k + i of every column by this key, as index_add
/// groups its index, gives each output element its positions in increasing i: index_add_element
/// over them (first = col · k) is scatter_add_element without the scan of the whole column.
PRECIS_HD_INLINE int64_t scatter_flat_index(int64_t v, int64_t col, int64_t rows) {
  return v >= 0 && v < rows ? col * rows + v : -1;
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
