#pragma once
// Strided iteration for CPU kernels. A loop over N tensors of one shape (each with its own
// strides, stride 0 for broadcast dims) is cut into rows along the innermost dim; the row body
// gets each tensor's element offset and innermost stride, so it can run a tight (vectorisable)
// loop when the strides are 1. Work is split over the intra-op pool by element ranges, or by
// tiles when an operand is strided along the innermost dim (parallel_rows).
#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdlib>
#include <vector>

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

/// Reorders the dims so that operand 0 (the output) is walked in its memory order, outermost
/// (largest stride) first, so an output in a permuted dense layout (a transposed or channels-last
/// result, ops/elementwise_layout.cpp) is written row after row and coalesces like a contiguous
/// one. Left alone when operand 0 has a zero or negative stride (a broadcast or flipped operand
/// has no single order); ties keep their order.
template <size_t N>
void order_dims_by_first(Shape& sizes, std::array<Shape, N>& strides) {
  const size_t nd = sizes.size();
  bool sorted = true;
  for (size_t d = 0; d < nd; ++d) {
    if (sizes[d] > 1 && strides[0][d] <= 0) return;
    if (d > 0 && strides[0][d] > strides[0][d - 1] && sizes[d] > 1) sorted = false;
  }
  if (sorted) return;
  std::vector<size_t> order(nd);
  for (size_t d = 0; d < nd; ++d) order[d] = d;
  std::stable_sort(order.begin(), order.end(), [&](size_t i, size_t j) { return strides[0][i] > strides[0][j]; });
  Shape s(nd);
  std::array<Shape, N> st;
  for (size_t k = 0; k < N; ++k) st[k].resize(nd);
  for (size_t p = 0; p < nd; ++p) {
    s[p] = sizes[order[p]];
    for (size_t k = 0; k < N; ++k) st[k][p] = strides[k][order[p]];
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

/// The dim to tile together with the innermost one, or -1 for none: when some operand walks its
/// innermost dim with a stride > 1 but is denser along another dim j (a transposed or
/// channels-last operand), rows are cut into kTileCols-long pieces and kTileRows rows along j are
/// visited one after another, so each cache line that operand touches is reused by the next rows
/// instead of being evicted (a.t().contiguous() on 2048x2048 f32, 1 thread: 23 -> 6 ms; see
/// docs/design/foundation.md). Broadcast (stride 0) dims never count.
inline constexpr int64_t kTileRows = 16, kTileCols = 32;
template <size_t N>
int64_t tile_dim(const Shape& sizes, const std::array<Shape, N>& strides) {
  const int64_t last = static_cast<int64_t>(sizes.size()) - 1;
  if (last < 1 || sizes[last] < kTileCols) return -1;
  int64_t best = -1, worst_inner = 1;
  for (size_t k = 0; k < N; ++k) {
    const int64_t inner = std::abs(strides[k][last]);
    if (inner <= worst_inner) continue;
    // This operand's densest other dim, if denser than its innermost.
    int64_t j_best = -1;
    for (int64_t j = 0; j < last; ++j) {
      const int64_t st = std::abs(strides[k][j]);
      if (st != 0 && st < inner && sizes[j] >= kTileRows && (j_best < 0 || st < std::abs(strides[k][j_best])))
        j_best = j;
    }
    if (j_best >= 0) {
      best = j_best;
      worst_inner = inner;
    }
  }
  return best;
}

/// Parallel for_each_row over all elements of tensors that share `ts[0]`'s shape. Rows may come
/// in any order and be cut anywhere (tiling, above); each element is visited exactly once.
template <size_t N, typename Row>
void parallel_rows(const std::array<const Tensor*, N>& ts, Row&& row, int64_t grain = kElementwiseGrain) {
  Shape sizes = ts[0]->sizes();
  std::array<Shape, N> strides;
  for (size_t k = 0; k < N; ++k) strides[k] = ts[k]->strides();
  const int64_t numel = ts[0]->numel();
  if (numel == 0) return;
  order_dims_by_first<N>(sizes, strides);
  coalesce_dims<N>(sizes, strides);
  const int64_t j = tile_dim<N>(sizes, strides);
  if (j < 0) {
    parallel_for(0, numel, grain, [&](int64_t b, int64_t e) { for_each_row<N>(sizes, strides, b, e, row); });
    return;
  }
  // Tiled: work units are (index over the other outer dims) x (block of kTileRows along j); each
  // unit walks its rows in kTileCols-wide column blocks.
  const int64_t last = static_cast<int64_t>(sizes.size()) - 1;
  Shape outer_sizes;
  std::array<Shape, N> outer_strides;
  for (int64_t d = 0; d < last; ++d) {
    if (d == j) continue;
    outer_sizes.push_back(sizes[d]);
    for (size_t k = 0; k < N; ++k) outer_strides[k].push_back(strides[k][d]);
  }
  const int64_t rows = sizes[j], cols = sizes[last];
  const int64_t row_blocks = (rows + kTileRows - 1) / kTileRows;
  std::array<int64_t, N> inner;
  for (size_t k = 0; k < N; ++k) inner[k] = strides[k][last];
  const int64_t units = numel / (rows * cols) * row_blocks;
  parallel_for(0, units, std::max<int64_t>(1, grain / (kTileRows * cols)), [&](int64_t ub, int64_t ue) {
    for (int64_t u = ub; u < ue; ++u) {
      // Offsets of this unit's outer index (row-major over outer_sizes).
      std::array<int64_t, N> base{};
      int64_t rem = u / row_blocks;
      for (int64_t d = static_cast<int64_t>(outer_sizes.size()) - 1; d >= 0; --d) {
        const int64_t i = rem % outer_sizes[d];
        rem /= outer_sizes[d];
        for (size_t k = 0; k < N; ++k) base[k] += i * outer_strides[k][d];
      }
      const int64_t r0 = u % row_blocks * kTileRows, r1 = std::min(rows, r0 + kTileRows);
      for (int64_t c0 = 0; c0 < cols; c0 += kTileCols) {
        const int64_t n = std::min(kTileCols, cols - c0);
        for (int64_t r = r0; r < r1; ++r) {
          std::array<int64_t, N> off;
          for (size_t k = 0; k < N; ++k) off[k] = base[k] + r * strides[k][j] + c0 * inner[k];
          row(off, n, inner);
        }
      }
    }
  });
}

}  // namespace precis::cpu
