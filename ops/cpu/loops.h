#pragma once
// Strided iteration for CPU kernels. A loop over N tensors of one shape (each with its own
// strides, stride 0 for broadcast dims) is cut into rows along the innermost dim; the row body
// gets each tensor's element offset and innermost stride, so it can run a tight (vectorisable)
// loop when the strides are 1. Work is split over the intra-op pool by element ranges.
#include <array>
#include <cstdint>

#include "core/thread_pool.h"
#include "tensor/tensor.h"

namespace precis::cpu {

/// Elements per parallel chunk for cheap element-wise work (~memory-bound).
inline constexpr int64_t kElementwiseGrain = 32768;

/// Merges adjacent dims that are contiguous with respect to each other in every operand, so that
/// e.g. a contiguous 3-D tensor becomes one row. Drops size-1 dims.
template <size_t N>
void coalesce_dims(Shape& sizes, std::array<Shape, N>& strides) {
  Shape s;
  std::array<Shape, N> st;
  for (size_t d = 0; d < sizes.size(); ++d) {
    if (sizes[d] == 1) continue;
    if (!s.empty()) {
      bool mergeable = true;
      for (size_t k = 0; k < N; ++k)
        if (st[k].back() != strides[k][d] * sizes[d]) mergeable = false;
      if (mergeable) {
        s.back() *= sizes[d];
        for (size_t k = 0; k < N; ++k) st[k].back() = strides[k][d];
        continue;
      }
    }
    s.push_back(sizes[d]);
    for (size_t k = 0; k < N; ++k) st[k].push_back(strides[k][d]);
  }
  if (s.empty()) {  // a single element
    s.push_back(1);
    for (size_t k = 0; k < N; ++k) st[k].push_back(1);
  }
  sizes = std::move(s);
  strides = std::move(st);
}

/// Calls row(offsets, n, inner_strides) for every innermost row of the elements [begin, end) of
/// `sizes` in row-major order; offsets are element offsets (not bytes) per operand.
template <size_t N, typename Row>
void for_each_row(const Shape& sizes, const std::array<Shape, N>& strides, int64_t begin, int64_t end, Row&& row) {
  const int64_t ndim = static_cast<int64_t>(sizes.size());
  const int64_t inner = sizes[ndim - 1];
  std::array<int64_t, N> inner_stride;
  for (size_t k = 0; k < N; ++k) inner_stride[k] = strides[k][ndim - 1];
  // Multi-index of `begin` over the outer dims, and the offsets it maps to.
  Shape idx(ndim, 0);
  int64_t rem = begin;
  for (int64_t d = ndim - 1; d >= 0; --d) {
    idx[d] = rem % sizes[d];
    rem /= sizes[d];
  }
  std::array<int64_t, N> off{};
  for (size_t k = 0; k < N; ++k)
    for (int64_t d = 0; d < ndim; ++d) off[k] += idx[d] * strides[k][d];
  int64_t pos = begin;
  while (pos < end) {
    const int64_t n = std::min(inner - idx[ndim - 1], end - pos);
    row(off, n, inner_stride);
    pos += n;
    // Advance the multi-index by n along the innermost dim, carrying outwards.
    for (size_t k = 0; k < N; ++k) off[k] += n * inner_stride[k];
    idx[ndim - 1] += n;
    for (int64_t d = ndim - 1; d > 0 && idx[d] == sizes[d]; --d) {
      for (size_t k = 0; k < N; ++k) off[k] -= sizes[d] * strides[k][d] - strides[k][d - 1];
      idx[d] = 0;
      ++idx[d - 1];
    }
  }
}

/// Parallel for_each_row over all elements of tensors that share `ts[0]`'s shape.
template <size_t N, typename Row>
void parallel_rows(const std::array<const Tensor*, N>& ts, Row&& row, int64_t grain = kElementwiseGrain) {
  Shape sizes = ts[0]->sizes();
  std::array<Shape, N> strides;
  for (size_t k = 0; k < N; ++k) strides[k] = ts[k]->strides();
  const int64_t numel = ts[0]->numel();
  if (numel == 0) return;
  coalesce_dims<N>(sizes, strides);
  parallel_for(0, numel, grain, [&](int64_t b, int64_t e) { for_each_row<N>(sizes, strides, b, e, row); });
}

}  // namespace precis::cpu
