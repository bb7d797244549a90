#pragma once
// The shared machinery of the CPU reductions (sum, mean, var): how x's dims split into kept and
// reduced ones, and a driver that runs a reduction op over them in parallel.
//
// Determinism: every output is accumulated in an order fixed by the shapes and strides alone.
// A long reduction is cut into chunks of a fixed size (kReduceChunk elements, never "one per
// thread"); each chunk gives a partial, and the partials are combined in chunk order. So the
// result is bit-identical for any thread count.
#include <algorithm>
#include <numeric>
#include <vector>

#include "core/thread_pool.h"
#include "ops/cpu/loops.h"
#include "tensor/tensor.h"

namespace precis::cpu {

/// Reduced elements per partial. Large enough that the partials are cheap, small enough that a
/// single big reduction (sum of everything) still spreads over the pool.
inline constexpr int64_t kReduceChunk = 16384;
/// Outputs per block in the outer (column) reduction's stack buffers and final merge.
inline constexpr int64_t kReduceColumnBlock = 256;
/// Reduced positions (rows of x) per chunk of the outer reduction: each column's fp32 sum over a
/// chunk carries the error of a 64-term sum before the f64 merge. (It was kReduceChunk / cols for
/// narrow outputs: 8192 rows summed in fp32, and the mean over 10^6 rows of 0.1 was 6.5e-5 off.)
inline constexpr int64_t kReduceColumnChunkRows = 64;
/// Widest tile of kept columns one work item of the outer (column) reduction accumulates: its
/// fp32 chunk buffer (128 KB) and f64 totals (256 KB) stay in L2 while each reduced position's
/// run of x streams past them. An item walks every chunk of its tile in order, so a wide output
/// (linear's bias gradient, (2048, 30522)) needs no partials array: the earlier layout (one item
/// per chunk of whole rows, partials scattered to a (cols × chunks) array one float per cache
/// line) paid for those scattered stores and their combine. Long runs per reduced position read
/// fastest (one thread, bf16 (2048, 30522): whole 61 KB rows 10.2 ms, 30 KB runs 10.8 ms, 15 KB
/// 12.2 ms, 8 KB 13 ms).
inline constexpr int64_t kReduceColumnTile = 32768;
/// Narrowest tile the column reduction cuts a few wide outputs into so that every thread gets
/// one (runs of at least 1–2 KB per reduced position stay friendly to the prefetchers).
inline constexpr int64_t kReduceColumnMinTile = 512;

/// x's dims split into kept dims (row-major over them is the order of the contiguous output)
/// and reduced dims, each coalesced. The reduced dims are ordered by decreasing stride so that
/// the innermost reduced dim is the most contiguous one.
struct ReducePlan {
  Shape kept_sizes, kept_strides;  // may be empty (a single output)
  Shape red_sizes, red_strides;    // never empty ({1}, {0} for an empty set)
  int64_t num_out = 1;
  int64_t red_numel = 1;
  /// Outer reduction: the innermost kept dim is contiguous in x and no reduced dim is, so whole
  /// rows of outputs are accumulated at once (vectorised across the kept dim).
  bool columns = false;
};

namespace detail {
inline void coalesce_one(Shape& sizes, Shape& strides) {
  Shape s, st;
  for (size_t d = 0; d < sizes.size(); ++d) {
    if (sizes[d] == 1) continue;
    if (!s.empty() && st.back() == strides[d] * sizes[d]) {
      s.back() *= sizes[d];
      st.back() = strides[d];
      continue;
    }
    s.push_back(sizes[d]);
    st.push_back(strides[d]);
  }
  sizes = std::move(s);
  strides = std::move(st);
}
}  // namespace detail

/// dims: sorted, unique, in range.
inline ReducePlan make_reduce_plan(const Tensor& x, const std::vector<int64_t>& dims) {
  ReducePlan p;
  const int64_t nd = x.dim();
  std::vector<bool> reduced(nd, false);
  for (int64_t d : dims) reduced[d] = true;
  std::vector<int64_t> red;
  for (int64_t d = 0; d < nd; ++d) {
    if (reduced[d]) {
      red.push_back(d);
    } else {
      p.kept_sizes.push_back(x.sizes()[d]);
      p.kept_strides.push_back(x.strides()[d]);
    }
  }
  std::stable_sort(red.begin(), red.end(), [&](int64_t a, int64_t b) { return x.strides()[a] > x.strides()[b]; });
  for (int64_t d : red) {
    p.red_sizes.push_back(x.sizes()[d]);
    p.red_strides.push_back(x.strides()[d]);
  }
  for (int64_t s : p.kept_sizes) p.num_out *= s;
  for (int64_t s : p.red_sizes) p.red_numel *= s;
  detail::coalesce_one(p.kept_sizes, p.kept_strides);
  detail::coalesce_one(p.red_sizes, p.red_strides);
  if (p.red_sizes.empty()) {
    p.red_sizes = {1};
    p.red_strides = {0};
  }
  p.columns = !p.kept_sizes.empty() && p.kept_strides.back() == 1 && p.kept_sizes.back() > 1 &&
              std::none_of(p.red_strides.begin(), p.red_strides.end(), [](int64_t s) { return s == 1; });
  return p;
}

/// Element offset in x of output `o` (row-major index over the kept dims).
inline int64_t kept_offset(const ReducePlan& p, int64_t o) {
  int64_t off = 0;
  for (int64_t d = static_cast<int64_t>(p.kept_sizes.size()) - 1; d >= 0; --d) {
    off += (o % p.kept_sizes[d]) * p.kept_strides[d];
    o /= p.kept_sizes[d];
  }
  return off;
}

/// Runs a reduction. Op provides:
///   using acc_t;                        partial accumulator (fp32 for f32/f16/bf16, f64, i64)
///   acc_t identity() const;
///   acc_t row(const T* p, int64_t n, int64_t stride, int64_t o) const;   reduces n elements
///   int64_t column_rows() const;                                       the most rows one columns call takes
///   void columns(acc_t* buf, const T* p, int64_t n, int64_t st, int64_t k, int64_t o0) const;
///       for r = 0 .. k − 1 in order: buf[j] += f(p[r·st + j], o0 + j)
///   using total_t; total_t total_identity() const; total_t merge(total_t, acc_t) const;
///   void write(int64_t o, total_t total) const;                          stores output o
/// Every output's reduction order depends only on the plan, never on the thread count.
template <typename T, typename Op>
void run_reduction(const ReducePlan& p, const T* x, const Op& op) {
  using acc_t = typename Op::acc_t;
  if (p.num_out == 0) return;
  if (p.red_numel == 0) {
    for (int64_t o = 0; o < p.num_out; ++o) op.write(o, op.total_identity());
    return;
  }
  const std::array<Shape, 1> red_strides{p.red_strides};

  if (!p.columns) {
    // One output at a time: its reduced elements are visited as rows of the innermost reduced
    // dim (contiguous rows when the reduction is over the inner dims).
    const int64_t n_chunks = (p.red_numel + kReduceChunk - 1) / kReduceChunk;
    auto partial = [&](int64_t o, int64_t c) {
      const T* base = x + kept_offset(p, o);
      acc_t acc = op.identity();
      for_each_row<1>(p.red_sizes, red_strides, c * kReduceChunk, std::min(p.red_numel, (c + 1) * kReduceChunk),
                      [&](std::array<int64_t, 1> off, int64_t n, std::array<int64_t, 1> st) {
                        acc = acc + op.row(base + off[0], n, st[0], o);
                      });
      return acc;
    };
    const int64_t per_item = std::min(p.red_numel, kReduceChunk);
    const int64_t grain = std::max<int64_t>(1, kElementwiseGrain / per_item);
    if (n_chunks == 1) {
      parallel_for(0, p.num_out, grain, [&](int64_t b, int64_t e) {
        for (int64_t o = b; o < e; ++o) op.write(o, op.merge(op.total_identity(), partial(o, 0)));
      });
      return;
    }
    std::vector<acc_t> partials(p.num_out * n_chunks);
    parallel_for(0, p.num_out * n_chunks, grain, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) partials[i] = partial(i / n_chunks, i % n_chunks);
    });
    parallel_for(0, p.num_out, std::max<int64_t>(1, kElementwiseGrain / n_chunks), [&](int64_t b, int64_t e) {
      for (int64_t o = b; o < e; ++o) {
        auto total = op.total_identity();
        for (int64_t c = 0; c < n_chunks; ++c) total = op.merge(total, partials[o * n_chunks + c]);
        op.write(o, total);
      }
    });
    return;
  }

  // Outer reduction: the innermost kept dim (size `cols`, stride 1) is accumulated a tile of
  // columns at a time; each reduced position adds a contiguous run of x into the tile's buffer.
  // Every output's order is fixed by chunk_pos alone: fp32 sums over chunks of chunk_pos reduced
  // positions, merged in chunk order. How the columns are tiled and which thread runs what never
  // changes it, so the tiling may depend on the thread count.
  const int64_t cols = p.kept_sizes.back();
  const int64_t outer = p.num_out / cols;
  const int64_t chunk_pos = kReduceColumnChunkRows;
  const int64_t n_chunks = (p.red_numel + chunk_pos - 1) / chunk_pos;
  const int64_t threads = get_num_threads();
  int64_t n_tiles = (cols + kReduceColumnTile - 1) / kReduceColumnTile;
  if (outer * n_tiles < 8 * threads) {
    // Few work items: the fewest tiles (no narrower than kReduceColumnMinTile) that give every
    // thread the same number, if there are such.
    const int64_t max_tiles = std::max<int64_t>(n_tiles, cols / kReduceColumnMinTile);
    for (int64_t t = n_tiles; t <= std::min(max_tiles, n_tiles + threads); ++t)
      if ((outer * t) % threads == 0) {
        n_tiles = t;
        break;
      }
  }
  // Tile width: equal tiles, a multiple of 16 columns; the last may be narrower.
  const int64_t tile = std::min(cols, ((cols + n_tiles - 1) / n_tiles + 15) / 16 * 16);
  n_tiles = (cols + tile - 1) / tile;
  const int64_t col_items = outer * n_tiles;
  const int64_t rows_at_once = std::max<int64_t>(1, op.column_rows());
  // buf[j] = the fp32 (acc_t) sum of outputs o0 + j, j < n, over reduced positions [r0, r1).
  auto accumulate = [&](acc_t* buf, int64_t o0, int64_t n, int64_t r0, int64_t r1) {
    const T* base = x + kept_offset(p, o0);
    std::fill(buf, buf + n, op.identity());
    for_each_row<1>(p.red_sizes, red_strides, r0, r1,
                    [&](std::array<int64_t, 1> off, int64_t rn, std::array<int64_t, 1> st) {
                      for (int64_t r = 0; r < rn; r += rows_at_once)
                        op.columns(buf, base + off[0] + r * st[0], n, st[0], std::min(rows_at_once, rn - r), o0);
                    });
  };
  // Item `item`'s first output and width.
  auto tile_of = [&](int64_t item, int64_t& o0, int64_t& n) {
    const int64_t t = item % n_tiles;
    o0 = (item / n_tiles) * cols + t * tile;
    n = std::min(tile, cols - t * tile);
  };
  using total_t = typename Op::total_t;

  // Tiles alone balance the threads when there are many, or as many per thread.
  if (n_chunks == 1 || col_items % threads == 0 || col_items >= 4 * threads) {
    // One item per tile, walking its chunks in order and merging each into the tile's totals.
    const int64_t grain = std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(1, p.red_numel * tile));
    parallel_for(0, col_items, grain, [&](int64_t b, int64_t e) {
      // On the stack for narrow tiles (no allocation per task for small sums, e.g. sum_to in a
      // broadcast op's backward); on the heap for wide ones.
      acc_t small[kReduceColumnBlock];
      total_t small_tot[kReduceColumnBlock];
      const bool wide = tile > kReduceColumnBlock;
      std::vector<acc_t> wide_buf(wide ? static_cast<size_t>(tile) : 0);
      std::vector<total_t> wide_tot(wide && n_chunks > 1 ? static_cast<size_t>(tile) : 0);
      acc_t* buf = wide ? wide_buf.data() : small;
      total_t* tot = wide ? wide_tot.data() : small_tot;
      for (int64_t i = b; i < e; ++i) {
        int64_t o0, n;
        tile_of(i, o0, n);
        if (n_chunks == 1) {
          accumulate(buf, o0, n, 0, p.red_numel);
          for (int64_t j = 0; j < n; ++j) op.write(o0 + j, op.merge(op.total_identity(), buf[j]));
          continue;
        }
        std::fill(tot, tot + n, op.total_identity());
        for (int64_t c = 0; c < n_chunks; ++c) {
          accumulate(buf, o0, n, c * chunk_pos, std::min(p.red_numel, (c + 1) * chunk_pos));
          for (int64_t j = 0; j < n; ++j) tot[j] = op.merge(tot[j], buf[j]);
        }
        for (int64_t j = 0; j < n; ++j) op.write(o0 + j, tot[j]);
      }
    });
    return;
  }

  // Few tiles that do not share out evenly (narrow outputs, a long reduction): items are
  // (chunk, tile) pairs, their partials stored chunk-major (each item writes one contiguous run),
  // then merged per output in chunk order, a block of outputs at a time.
  std::vector<acc_t> partials(static_cast<size_t>(p.num_out * n_chunks));
  const int64_t grain =
      std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(1, std::min(p.red_numel, chunk_pos) * tile));
  parallel_for(0, n_chunks * col_items, grain, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const int64_t c = i / col_items;
      int64_t o0, n;
      tile_of(i % col_items, o0, n);
      accumulate(partials.data() + c * p.num_out + o0, o0, n, c * chunk_pos,
                 std::min(p.red_numel, (c + 1) * chunk_pos));
    }
  });
  const int64_t out_block = kReduceColumnBlock;
  const int64_t n_out_blocks = (p.num_out + out_block - 1) / out_block;
  parallel_for(0, n_out_blocks, std::max<int64_t>(1, kElementwiseGrain / (out_block * n_chunks)),
               [&](int64_t b, int64_t e) {
                 total_t tot[kReduceColumnBlock];
                 for (int64_t blk = b; blk < e; ++blk) {
                   const int64_t o0 = blk * out_block, n = std::min(out_block, p.num_out - o0);
                   std::fill(tot, tot + n, op.total_identity());
                   for (int64_t c = 0; c < n_chunks; ++c) {
                     const acc_t* part = partials.data() + c * p.num_out + o0;
                     for (int64_t j = 0; j < n; ++j) tot[j] = op.merge(tot[j], part[j]);
                   }
                   for (int64_t j = 0; j < n; ++j) op.write(o0 + j, tot[j]);
                 }
               });
}

}  // namespace precis::cpu
