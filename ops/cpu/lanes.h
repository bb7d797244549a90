#pragma once
// Multi-lane accumulation for contiguous CPU row loops. Floating-point adds do not reassociate, so
// a plain `for (i) s += f(i)` is one dependency chain the compiler must not vectorise; kLanes
// independent accumulators hide the add latency, fit in vector registers, and are combined
// pairwise at the end (which also keeps the rounding error lower than a serial sum). Shared by the
// reductions (ops/cpu/reduce.cpp), the softmax/cross-entropy rows (softmax_rows.h) and the norms,
// so each sums a row the same way.
#include <cstdint>

namespace precis::cpu {

/// Independent accumulators in the multi-lane row loops (a power of two).
inline constexpr int64_t kLanes = 16;
static_assert((kLanes & (kLanes - 1)) == 0, "lanes are combined pairwise");

/// Sum over i in [0, n) of f(i), accumulated in A (float, double or int64_t) with kLanes lanes
/// combined pairwise. f is called once per index, in increasing order within each lane.
template <typename A, typename F>
inline A lanes_sum(int64_t n, F&& f) {
  A acc[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int64_t k = 0; k < kLanes; ++k) acc[k] += f(i + k);
  for (int64_t k = 0; i + k < n; ++k) acc[k] += f(i + k);
  for (int64_t w = kLanes / 2; w > 0; w /= 2)
    for (int64_t k = 0; k < w; ++k) acc[k] += acc[k + w];
  return acc[0];
}

}  // namespace precis::cpu
