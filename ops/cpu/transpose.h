#pragma once
// Transposing copies on the CPU: dst row-major along its innermost dim while src is dense along
// another one (a.t().contiguous(), NCHW -> NHWC). Same-dtype 4- and 2-byte elements move as 8x8
// blocks transposed in registers (AVX2 for 32-bit, SSE2 for 16-bit lanes), visited in strips of
// one cache line so that every line of src and dst is used in full while it is resident; the
// strips are split over the intra-op pool. The general tiled loop of loops.h handles the other copies
// (measured in benchmarks/results/layout-2026-12-02.md).
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>

#include "core/thread_pool.h"
#include "ops/cpu/loops.h"

namespace precis::cpu {

namespace transpose_detail {

// d[i * ld + k] = s[k * ls + i] for i, k < 8; 32-bit elements.
inline void block8x8_32(const uint32_t* s, int64_t ls, uint32_t* d, int64_t ld) {
  __m256i r[8];
  for (int k = 0; k < 8; ++k) r[k] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + k * ls));
  // Pairs of rows interleaved by element, then by element pair; each 128-bit lane then holds
  // four rows' values of one column, and the lanes are recombined across the row halves.
  __m256i t[8], u[8];
  for (int k = 0; k < 8; k += 2) {
    t[k] = _mm256_unpacklo_epi32(r[k], r[k + 1]);      // columns 0,1 | 4,5 of rows k, k+1
    t[k + 1] = _mm256_unpackhi_epi32(r[k], r[k + 1]);  // columns 2,3 | 6,7
  }
  for (int h = 0; h < 8; h += 4) {  // rows h..h+3
    u[h] = _mm256_unpacklo_epi64(t[h], t[h + 2]);          // column 0 | 4
    u[h + 1] = _mm256_unpackhi_epi64(t[h], t[h + 2]);      // column 1 | 5
    u[h + 2] = _mm256_unpacklo_epi64(t[h + 1], t[h + 3]);  // column 2 | 6
    u[h + 3] = _mm256_unpackhi_epi64(t[h + 1], t[h + 3]);  // column 3 | 7
  }
  for (int c = 0; c < 4; ++c) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + c * ld), _mm256_permute2x128_si256(u[c], u[c + 4], 0x20));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + (c + 4) * ld), _mm256_permute2x128_si256(u[c], u[c + 4], 0x31));
  }
}

// d[i * ld + k] = s[k * ls + i] for i, k < 8; 16-bit elements.
inline void block8x8_16(const uint16_t* s, int64_t ls, uint16_t* d, int64_t ld) {
  __m128i r[8];
  for (int k = 0; k < 8; ++k) r[k] = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + k * ls));
  __m128i t[8], u[8];
  for (int k = 0; k < 8; k += 2) {
    t[k] = _mm_unpacklo_epi16(r[k], r[k + 1]);      // columns 0..3 of rows k, k+1
    t[k + 1] = _mm_unpackhi_epi16(r[k], r[k + 1]);  // columns 4..7
  }
  for (int h = 0; h < 8; h += 4) {  // rows h..h+3
    u[h] = _mm_unpacklo_epi32(t[h], t[h + 2]);          // columns 0, 1
    u[h + 1] = _mm_unpackhi_epi32(t[h], t[h + 2]);      // columns 2, 3
    u[h + 2] = _mm_unpacklo_epi32(t[h + 1], t[h + 3]);  // columns 4, 5
    u[h + 3] = _mm_unpackhi_epi32(t[h + 1], t[h + 3]);  // columns 6, 7
  }
  for (int p = 0; p < 4; ++p) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(d + (2 * p) * ld), _mm_unpacklo_epi64(u[p], u[p + 4]));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(d + (2 * p + 1) * ld), _mm_unpackhi_epi64(u[p], u[p + 4]));
  }
}

template <typename U>
inline void block8x8(const U* s, int64_t ls, U* d, int64_t ld) {
  if constexpr (sizeof(U) == 4) {
    block8x8_32(s, ls, d, ld);
  } else {
    block8x8_16(s, ls, d, ld);
  }
}

}  // namespace transpose_detail

/// dst = src for one dtype T of 4 or 2 bytes when, with dims in dst's memory order and merged
/// where both allow, dst is contiguous along its innermost dim and src has stride 1 along another
/// dim (and > 1 along the innermost): a batch of 2-D transposes. Returns false, touching nothing,
/// for any other layout or for blocks under 8x8.
/// strip_bytes: the height of a strip in bytes of a src column (a multiple of 64); 0 picks it.
template <typename T>
bool transpose_copy(const Tensor& dst, const Tensor& src, int64_t strip_bytes = 0) {
  static_assert(sizeof(T) == 4 || sizeof(T) == 2);
  using U = std::conditional_t<sizeof(T) == 4, uint32_t, uint16_t>;
  if (dst.dtype() != src.dtype() || dst.numel() == 0) return false;
  Shape sizes = dst.sizes();
  std::array<Shape, 2> strides{dst.strides(), src.strides()};
  order_dims_by_first<2>(sizes, strides);
  coalesce_dims<2>(sizes, strides);
  const int64_t last = static_cast<int64_t>(sizes.size()) - 1;
  if (last < 1 || strides[0][last] != 1 || strides[1][last] <= 1 || sizes[last] < 8) return false;
  int64_t j = -1;
  for (int64_t d = 0; d < last; ++d)
    if (strides[1][d] == 1 && sizes[d] >= 8) j = d;
  if (j < 0) return false;
  // The other dims index a batch of (rows = sizes[j]) x (cols = sizes[last]) transposes.
  Shape batch_sizes;
  std::array<Shape, 2> batch_strides;
  for (int64_t d = 0; d < last; ++d) {
    if (d == j) continue;
    batch_sizes.push_back(sizes[d]);
    for (size_t k = 0; k < 2; ++k) batch_strides[k].push_back(strides[k][d]);
  }
  const int64_t rows = sizes[j], cols = sizes[last];
  const int64_t dst_row = strides[0][j], src_col = strides[1][last];
  int64_t batch = 1;
  for (int64_t s : batch_sizes) batch *= s;
  // Strips of whole cache lines of each src column, walked in column blocks of one cache line of
  // each dst row, so every line of both is read or written whole while it is resident. A strip's
  // dst rows must stay in cache between column blocks: one-line strips (16 f32 rows) when dst
  // rows are long and power-of-two apart, four lines when the strip's dst rows fit in 16 KiB.
  // (CPU time, 1 thread, interleaved on a loaded machine: 2048x2048 f32 one line 2.9-3.1 ms,
  // four lines 3.3 ms, the general loop 4.8-5.0 ms; NCHW -> NHWC 64x64x32x32 f32 one line
  // 2.2-2.4 ms, four lines 1.9-2.0 ms, the general loop 2.6 ms.)
  const int64_t elem = static_cast<int64_t>(sizeof(T));
  if (strip_bytes <= 0) strip_bytes = dst_row * elem * (256 / elem) <= 16384 ? 256 : 64;
  const int64_t kStrip = strip_bytes / elem;
  const int64_t strips = (rows + kStrip - 1) / kStrip;
  U* const d0 = static_cast<U*>(dst.data_ptr());
  const U* const s0 = static_cast<const U*>(src.data_ptr());
  const int64_t grain = std::max<int64_t>(1, kElementwiseGrain / (kStrip * cols));
  parallel_for(0, batch * strips, grain, [&](int64_t ub, int64_t ue) {
    for (int64_t u = ub; u < ue; ++u) {
      int64_t rem = u / strips, doff = 0, soff = 0;
      for (int64_t d = static_cast<int64_t>(batch_sizes.size()) - 1; d >= 0; --d) {
        const int64_t i = rem % batch_sizes[d];
        rem /= batch_sizes[d];
        doff += i * batch_strides[0][d];
        soff += i * batch_strides[1][d];
      }
      U* const d = d0 + doff;
      const U* const s = s0 + soff;
      const int64_t r0 = u % strips * kStrip, r1 = std::min(rows, r0 + kStrip);
      const int64_t r_full = r0 + (r1 - r0) / 8 * 8;
      // Column blocks of kCols elements (64 bytes of each dst row: its lines are written whole,
      // one 8x8 block after another).
      constexpr int64_t kCols = 64 / static_cast<int64_t>(sizeof(T));
      const int64_t c_full = cols / kCols * kCols;
      for (int64_t c = 0; c < c_full; c += kCols) {
        for (int64_t r = r0; r < r_full; r += 8)
          for (int64_t k = c; k < c + kCols; k += 8)
            transpose_detail::block8x8<U>(s + k * src_col + r, src_col, d + r * dst_row + k, dst_row);
        for (int64_t r = r_full; r < r1; ++r)
          for (int64_t k = c; k < c + kCols; ++k) d[r * dst_row + k] = s[k * src_col + r];
      }
      for (int64_t c = c_full; c + 8 <= cols; c += 8)
        for (int64_t r = r0; r < r_full; r += 8)
          transpose_detail::block8x8<U>(s + c * src_col + r, src_col, d + r * dst_row + c, dst_row);
      const int64_t c_tail = c_full + (cols - c_full) / 8 * 8;
      for (int64_t r = r0; r < r1; ++r) {
        // Rows below r_full: their 8-wide blocks past c_full were not done above.
        const int64_t k0 = r < r_full ? c_tail : c_full;
        for (int64_t k = k0; k < cols; ++k) d[r * dst_row + k] = s[k * src_col + r];
      }
    }
  });
  return true;
}

}  // namespace precis::cpu
