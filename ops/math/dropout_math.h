#pragma once
// The dropout mask as host/device functions, shared by the CPU kernel (ops/cpu/dropout.cpp) and
// the CUDA kernel (ops/cuda/dropout.cu), so both keep the same elements for the same seed and
// offset; tests/ops/index_pool_math_test.cpp checks these functions against the CPU kernel.
// Element i (row-major over the input's shape) uses lane i % 4 of Philox block offset + i / 4 of
// the seed's stream (ops/contracts/kernels_loss.h, DropoutKernel). Internal header: nvcc compiles it.
#include <cmath>
#include <cstdint>

#include "core/opmath.h"
#include "core/philox.h"

namespace precis::kernels {

/// The keep threshold of drop probability p (0 <= p < 1): an element is kept when the 24 high bits
/// of its lane, as a fraction of 2^24, are below 1 − p (rand's uint32_to_unit_float(u) < 1 − p, in
/// integers). Host only: computed once per launch.
inline uint32_t dropout_keep_threshold(double p) {
  return static_cast<uint32_t>(std::llround((1.0 - p) * 16777216.0));
}

/// The stream offset a kernel draws from: its (seed, offset) draw's offset plus, for a kernel
/// captured in a CUDA graph, the base the graph writes before each replay (core/rng.h PhiloxDraw;
/// null outside a capture). Read once per kernel (per thread on a GPU).
PRECIS_HD_INLINE uint64_t philox_offset(uint64_t offset, const uint64_t* offset_base) {
  return offset_base != nullptr ? offset + *offset_base : offset;
}

/// Whether the element whose random lane is `bits` is kept under `threshold`.
PRECIS_HD_INLINE bool dropout_keep(uint32_t bits, uint32_t threshold) { return (bits >> 8) < threshold; }

/// The Philox block holding the lanes of elements 4·b ... 4·b + 3 (b = i / 4) for (seed, offset).
PRECIS_HD_INLINE PhiloxBlock dropout_block(uint64_t seed, uint64_t offset, int64_t b) {
  return philox_stream_block(seed, offset + static_cast<uint64_t>(b));
}

/// Whether element i (row-major) is kept: one Philox block per call (kernels draw a block per
/// four elements instead).
PRECIS_HD_INLINE bool dropout_keep_at(uint64_t seed, uint64_t offset, int64_t i, uint32_t threshold) {
  return dropout_keep(dropout_block(seed, offset, i / 4).v[i & 3], threshold);
}

/// A kept element's output in the compute type C: x · scale, scale = (C)(1 / (1 − p)).
template <typename C>
PRECIS_HD_INLINE C dropout_scaled(C x, C scale) {
  return x * scale;
}

}  // namespace precis::kernels
