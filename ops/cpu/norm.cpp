// CPU normalisation kernels: batch_norm, layer_norm, group_norm, forward and fused backward.
// Inputs are contiguous (the functional code sees to it), or for batch_norm channels-last rows
// (strides (S·C, 1, C)). Statistics, parameters and parameter gradients are in A = opmath_t<T>
// (fp32 for f32/f16/bf16, f64 for f64); f16/bf16 rows are widened to fp32 row buffers. Each
// NCHW / row kernel parallelises over the unit its statistics belong to (channel, row,
// sample·group) and finishes that unit while its data is still in cache, so every forward reads
// its input from memory once and every backward reads grad and x once. Channels-last batch_norm
// cannot (a channel's statistics need every row): it makes two passes over per-thread row blocks
// that stay in cache when they fit; its section states the statistics' accuracy contract.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <tuple>
#include <utility>
#include <vector>

#include "core/thread_pool.h"
#include "ops/cpu/cpu_backend.h"
#include "core/dtype_visit.h"
#include "core/opmath.h"
#include "ops/cpu/elementwise_util.h"
#include "ops/cpu/lanes.h"
#include "ops/cpu/optional_operand.h"
#include "ops/cpu/softmax_rows.h"
#include "ops/cpu/vec_exp.h"
#include "ops/contracts/kernels_norm.h"
#include "ops/op_table.h"

namespace precis::cpu {

namespace {

// The data of a norm backward's operands: x, grad and dx in T; weight, the saved statistics and the
// parameter gradients in the compute type. dx, weight, dweight and dbias are null when undefined.
// A tuple, taken apart with std::tie by the kernels: clang 14 (the sanitizer build) cannot capture
// a structured binding in a lambda.
template <typename T>
using NormBackwardPtrs = std::tuple<const T*, const T*, T*, const opmath_t<T>*, const opmath_t<T>*,
                                    const opmath_t<T>*, opmath_t<T>*, opmath_t<T>*>;

template <typename T>
NormBackwardPtrs<T> norm_backward_ptrs(const Tensor& dx, const Tensor& dweight, const Tensor& dbias, const Tensor& grad,
                                       const Tensor& x, const Tensor& weight, const Tensor& mean, const Tensor& rstd) {
  using A = opmath_t<T>;
  return {x.data_ptr<T>(),    grad.data_ptr<T>(), mut_ptr_or_null<T>(dx),      ptr_or_null<A>(weight),
          mean.data_ptr<A>(), rstd.data_ptr<A>(), mut_ptr_or_null<A>(dweight), mut_ptr_or_null<A>(dbias)};
}

// Elements per parallel chunk: normalisation costs a few cheap passes per element.
constexpr int64_t kNormGrain = 32768;
// fp32 partial sums run over at most this many elements before being folded into f64, so the
// rounding error of a long reduction stays that of a short one.
constexpr int64_t kFoldBlock = 4096;

// A contiguous row (or a slab of rows) as compute-type values: the elements themselves for
// f32/f64, a widened copy in a reusable buffer for f16/bf16. out()/store() give a compute-type
// destination and write it back.
template <typename T>
class RowBuf {
  using A = opmath_t<T>;
  static constexpr bool kDirect = std::is_same_v<T, A>;

 public:
  explicit RowBuf(int64_t n) {
    if constexpr (!kDirect) buf_.resize(static_cast<size_t>(n));
  }
  const A* load(const T* p, int64_t n) {
    if constexpr (kDirect) {
      return p;
    } else {
      load_block<A>(p, 1, buf_.data(), n);
      return buf_.data();
    }
  }
  A* out(T* p) {
    if constexpr (kDirect) return p;
    else return buf_.data();
  }
  void store(T* p, int64_t n) {
    if constexpr (!kDirect) store_block<T>(buf_.data(), p, 1, n);
  }
  // R rows of W elements, `stride` apart: the rows in place (row stride `stride`), or widened into
  // the buffer (row stride W); out() is then the destination at the same row stride.
  int64_t load_rows(const T* p, int64_t R, int64_t W, int64_t stride, const A*& rows) {
    if constexpr (kDirect) {
      rows = p;
      return stride;
    } else {
      for (int64_t r = 0; r < R; ++r) load_block<A>(p + r * stride, 1, buf_.data() + r * W, W);
      rows = buf_.data();
      return W;
    }
  }
  void store_rows(T* p, int64_t R, int64_t W, int64_t stride) {
    if constexpr (!kDirect)
      for (int64_t r = 0; r < R; ++r) store_block<T>(buf_.data() + r * W, p + r * stride, 1, W);
  }

 private:
  std::vector<A> buf_;
};

// Mean and biased variance of a row, two passes (the row is in cache for the second).
template <typename A>
void row_moments(const A* x, int64_t n, A& mean, A& var) {
  double s = 0;
  for (int64_t b = 0; b < n; b += kFoldBlock) {
    const int64_t m = std::min(kFoldBlock, n - b);
    s += lanes_sum<A>(m, [&](int64_t i) { return x[b + i]; });
  }
  mean = static_cast<A>(s / static_cast<double>(n));
  double q = 0;
  const A mu = mean;
  for (int64_t b = 0; b < n; b += kFoldBlock) {
    const int64_t m = std::min(kFoldBlock, n - b);
    q += lanes_sum<A>(m, [&](int64_t i) { return (x[b + i] - mu) * (x[b + i] - mu); });
  }
  var = static_cast<A>(q / static_cast<double>(n));
}

// The rows a layer / group norm forward normalises: x and out as (rows, n) contiguous, and the
// per-row mean and rstd it writes (statistics type A).
template <typename T>
struct NormRows {
  using A = opmath_t<T>;
  struct Row {
    const A* x;  // the row in A (RowBuf's view)
    A mean, rstd;
  };
  NormRows(const Tensor& out_t, const Tensor& mean_t, const Tensor& rstd_t, const Tensor& x_t, int64_t n, double eps)
      : x(x_t.data_ptr<T>()), out(out_t.data_ptr<T>()), mean(mean_t.data_ptr<A>()), rstd(rstd_t.data_ptr<A>()),
        n(n), eps(eps) {}
  // Loads row r, computes its mean and 1/sqrt(var + eps) and stores them.
  Row normalise_stats(int64_t r, RowBuf<T>& buf) const {
    const A* xr = buf.load(x + r * n, n);
    A mu = 0, var = 0;
    if (n > 0) row_moments(xr, n, mu, var);
    const A rs = static_cast<A>(1.0 / std::sqrt(static_cast<double>(var) + eps));
    mean[r] = mu;
    rstd[r] = rs;
    return {xr, mu, rs};
  }
  const T* x;
  T* out;
  A* mean;
  A* rstd;
  int64_t n;
  double eps;
};

// y = (x − mean)·scale + shift over a row. Centring first keeps the result exact to a few ulps
// of itself when |mean| or scale is large (x·scale + (shift − mean·scale) would cancel).
template <typename A>
inline void affine_row(const A* x, A* y, int64_t n, A mean, A scale, A shift) {
  for (int64_t i = 0; i < n; ++i) y[i] = (x[i] - mean) * scale + shift;
}

// One channel's batch statistics from its sums s1 = Σ(x − k), s2 = Σ(x − k)² over M elements
// shifted by k: the saved mean and 1/sqrt(var + eps), and the running statistics (the unbiased
// variance) where rm / rv are non-null.
template <typename A>
void channel_statistics(double s1, double s2, A k, int64_t M, double momentum, double eps, A& mean_out,
                        A& rstd_out, A* rm, A* rv) {
  const double dm = s1 / static_cast<double>(M);
  const double var = std::max(0.0, s2 / static_cast<double>(M) - dm * dm);
  const double mean = static_cast<double>(k) + dm;
  mean_out = static_cast<A>(mean);
  rstd_out = static_cast<A>(1.0 / std::sqrt(var + eps));
  if (rm) *rm = static_cast<A>((1.0 - momentum) * static_cast<double>(*rm) + momentum * mean);
  if (rv) {
    const double unbiased = var * static_cast<double>(M) / static_cast<double>(M - 1);
    *rv = static_cast<A>((1.0 - momentum) * static_cast<double>(*rv) + momentum * unbiased);
  }
}

// dx = ca·g + cb·(x − mean) + c0 for one channel, from Σg and Σg·(x − mean) over its M elements:
// training, w·rstd·(g − Σg/M − (x − mean)·rstd²·Σg(x − mean)/M); eval, g·w·rstd (cb = c0 = 0).
template <typename A>
struct BackwardCoefficients {
  A ca, cb, c0;
  BackwardCoefficients(double sg, double sgx, const A* w, int64_t c, A rstd, int64_t M, bool training) {
    const double wc = w ? static_cast<double>(w[c]) : 1.0, r = rstd;
    ca = static_cast<A>(wc * r);
    cb = training ? static_cast<A>(-wc * r * r * r * sgx / static_cast<double>(M)) : A(0);
    c0 = training ? static_cast<A>(-wc * r * sg / static_cast<double>(M)) : A(0);
  }
};

// ---- batch norm, channels-last ------------------------------------------------------------------
//
// Rows of C contiguous channels (an (N, H, W, C) tensor in memory). Both directions are two
// passes over the rows: sums, then the element-wise map. The rows are cut into one block per
// worker, the same cut in both passes, so a tensor that fits a core's cache is read from memory
// once. Inside a block, rows are taken in slabs of at most kSlab elements: f16/bf16 slabs are
// widened with one bulk conversion (load_block) into a per-worker buffer, and each pass walks the
// slab channel-chunk by channel-chunk (kChunkVecs vectors of channels), keeping that chunk's
// accumulators or per-channel coefficients in vector registers across the slab's rows.
//
// Accuracy contract (unchanged by the blocking): every channel's sums run in A (fp32 for
// f32/f16/bf16) over at most kFoldRows consecutive rows of one worker's block, in row order, and
// are then folded into f64; the blocks' f64 partials are added in block order. The forward sums
// are shifted by each channel's first element, so a large mean costs no precision. The result
// depends on the shape and the thread count only.

// Rows of contiguous channels: x (N, C, S) with strides (S·C, 1, C), a channels-last (N, C, H, W)
// tensor seen through the kernel shape (ops/norm.cpp passes it so, with out, grad and dx alike).
bool channels_last_rows(const Tensor& x) { return x.size(1) > 1 && x.size(2) > 1 && x.stride(1) == 1; }

// Rows summed in A per channel before being folded into f64 (the fold bound of kFoldBlock).
constexpr int64_t kFoldRows = 256;
// Elements per slab: the f16/bf16 buffers (two in the backward) stay in L1 next to the data.
constexpr int64_t kSlab = 4096;
// Vectors of channels per chunk: 4 × 8 fp32 lanes; the backward map holds 3 coefficient vectors
// per vector of channels, 12 of the 16 AVX2 registers. The AVX-512 walk takes twice as many
// 16-lane vectors (its 32 registers), and chunks fall back by halves, so a 64-channel row is one
// chunk in every pass and a 128-channel one in the sums and the forward map: the walk goes down the
// rows linearly, which made the kernels 1.6-1.9x faster than the AVX2 chunk walk on AMD Zen 4
// (benchmarks/results/norm-2026-12-06-zen4.md).
constexpr int kChunkVecs = 4;

// A 32-byte vector of A (8 floats or 4 doubles), in the compiler's generic vector extension so
// the code is the same on every target (AVX2 on x86-64 with the library's flags); the 64-byte
// float vector of the AVX-512 walk.
typedef float Vec32f __attribute__((vector_size(32)));
typedef double Vec32d __attribute__((vector_size(32)));
typedef float Vec64f __attribute__((vector_size(64)));
template <typename A>
using Vec32 = std::conditional_t<std::is_same_v<A, float>, Vec32f, Vec32d>;

// Everything a chunk walk calls is inlined into sum_rows / map_rows (or their AVX-512 entry
// points), so it is compiled for that entry point's instruction set; vectors travel by reference
// (passing a 64-byte vector by value from code not compiled for AVX-512 would change the ABI). The
// per-element formulas (the f arguments) are lambdas marked PRECIS_NORM_INLINE for the same reason.
#define PRECIS_NORM_INLINE __attribute__((always_inline))

// Loads and stores a V (a vector or a plain A) from unaligned memory.
template <typename V, typename A>
[[gnu::always_inline]] inline void vload(const A* p, V& v) {
  std::memcpy(&v, p, sizeof(V));
}
template <typename V, typename A>
[[gnu::always_inline]] inline void vstore(A* p, const V& v) {
  std::memcpy(p, &v, sizeof(V));
}

// Channels [c0, c0 + NV·L) of the R rows at x (and g when kG; row stride ld): two accumulators per
// channel, loaded from a1/a2, updated by f(x, g, p, s1, s2) row by row, stored back. p is the
// per-channel parameter (the shift or the mean). Each channel's sums run in row order whatever the
// vector width, so the AVX2 and AVX-512 walks give the same bits.
template <typename V, int NV, bool kG, typename A, typename F>
[[gnu::always_inline]] inline void sum_chunk(int64_t R, int64_t ld, int64_t c0, const A* x, const A* g, const A* p,
                                             A* a1, A* a2, F& f) {
  constexpr int64_t L = sizeof(V) / sizeof(A);
  V s1[NV], s2[NV], pv[NV];
  for (int v = 0; v < NV; ++v) {
    vload(a1 + c0 + v * L, s1[v]);
    vload(a2 + c0 + v * L, s2[v]);
    vload(p + c0 + v * L, pv[v]);
  }
  for (int64_t r = 0; r < R; ++r) {
    const A* xr = x + r * ld + c0;
    const A* gr = kG ? g + r * ld + c0 : xr;
    for (int v = 0; v < NV; ++v) {
      V xv, gv{};
      vload(xr + v * L, xv);
      if (kG) vload(gr + v * L, gv);
      f(xv, gv, pv[v], s1[v], s2[v]);
    }
  }
  for (int v = 0; v < NV; ++v) {
    vstore(a1 + c0 + v * L, s1[v]);
    vstore(a2 + c0 + v * L, s2[v]);
  }
}

// The channels from c on in chunks of NV vectors of V, then of NV/2, ... 1 (so that 64 channels
// are one chunk of 4 AVX-512 vectors, not four walks of one); returns where it stopped.
template <typename V, int NV, bool kG, typename A, typename F>
[[gnu::always_inline]] inline int64_t sum_vectors(int64_t R, int64_t C, int64_t ld, int64_t c, const A* x,
                                                  const A* g, const A* p, A* a1, A* a2, F& f) {
  constexpr int64_t L = sizeof(V) / sizeof(A);
  for (; c + NV * L <= C; c += NV * L) sum_chunk<V, NV, kG>(R, ld, c, x, g, p, a1, a2, f);
  if constexpr (NV > 1) return sum_vectors<V, NV / 2, kG>(R, C, ld, c, x, g, p, a1, a2, f);
  return c;
}

// The AVX-512 entry points exist where vec_exp.h's run-time switch does (GCC/Clang on x86-64).
#define PRECIS_NORM_AVX512 PRECIS_VEC_EXP_AVX512
#if PRECIS_NORM_AVX512
template <bool kG, typename F>
[[gnu::target("avx512f")]] void sum_rows_avx512(int64_t R, int64_t C, int64_t ld, const float* x, const float* g,
                                                 const float* p, float* a1, float* a2, F& f) {
  int64_t c = sum_vectors<Vec64f, 2 * kChunkVecs, kG>(R, C, ld, 0, x, g, p, a1, a2, f);
  c = sum_vectors<Vec32f, 1, kG>(R, C, ld, c, x, g, p, a1, a2, f);
  for (; c < C; ++c) sum_chunk<float, 1, kG>(R, ld, c, x, g, p, a1, a2, f);
}
#endif

// sum_chunk over all C channels of R rows ld apart: chunks of kChunkVecs vectors, then halves of
// that, then scalars (fp32 on an AVX-512 CPU: the AVX-512 walk).
template <bool kG, typename A, typename F>
void sum_rows(int64_t R, int64_t C, int64_t ld, const A* x, const A* g, const A* p, A* a1, A* a2, F&& f) {
#if PRECIS_NORM_AVX512
  if constexpr (std::is_same_v<A, float>)
    if (vec_detail::use_avx512()) return sum_rows_avx512<kG>(R, C, ld, x, g, p, a1, a2, f);
#endif
  int64_t c = sum_vectors<Vec32<A>, kChunkVecs, kG>(R, C, ld, 0, x, g, p, a1, a2, f);
  for (; c < C; ++c) sum_chunk<A, 1, kG>(R, ld, c, x, g, p, a1, a2, f);
}

// Channels [c0, c0 + NV·L) of R rows (row stride ld in x, g and o): o = f(x, g, q0, q1, q2, q3)
// with four per-channel coefficients p[0..3] held in registers (those f ignores are dropped when it
// is inlined). o may alias x (each element is read before it is written).
template <typename V, int NV, bool kG, typename A, typename F>
[[gnu::always_inline]] inline void map_chunk(int64_t R, int64_t ld, int64_t c0, const A* x, const A* g, A* o,
                                             const A* const* p, F& f) {
  constexpr int64_t L = sizeof(V) / sizeof(A);
  V q[4][NV];
  for (int k = 0; k < 4; ++k)
    for (int v = 0; v < NV; ++v) vload(p[k] + c0 + v * L, q[k][v]);
  for (int64_t r = 0; r < R; ++r) {
    const A* xr = x + r * ld + c0;
    const A* gr = kG ? g + r * ld + c0 : xr;
    A* orow = o + r * ld + c0;
    for (int v = 0; v < NV; ++v) {
      V xv, gv{}, ov;
      vload(xr + v * L, xv);
      if (kG) vload(gr + v * L, gv);
      f(xv, gv, q[0][v], q[1][v], q[2][v], q[3][v], ov);
      vstore(orow + v * L, ov);
    }
  }
}

// The channels from c on in chunks of NV vectors of V, then of NV/2, ... 1; returns where it stopped.
template <typename V, int NV, bool kG, typename A, typename F>
[[gnu::always_inline]] inline int64_t map_vectors(int64_t R, int64_t C, int64_t ld, int64_t c, const A* x,
                                                  const A* g, A* o, const A* const* p, F& f) {
  constexpr int64_t L = sizeof(V) / sizeof(A);
  for (; c + NV * L <= C; c += NV * L) map_chunk<V, NV, kG>(R, ld, c, x, g, o, p, f);
  if constexpr (NV > 1) return map_vectors<V, NV / 2, kG>(R, C, ld, c, x, g, o, p, f);
  return c;
}

#if PRECIS_NORM_AVX512
template <int NV, bool kG, typename F>
[[gnu::target("avx512f")]] void map_rows_avx512(int64_t R, int64_t C, int64_t ld, const float* x, const float* g,
                                                 float* o, const float* const* p, F& f) {
  int64_t c = map_vectors<Vec64f, 2 * NV, kG>(R, C, ld, 0, x, g, o, p, f);
  c = map_vectors<Vec32f, 1, kG>(R, C, ld, c, x, g, o, p, f);
  for (; c < C; ++c) map_chunk<float, 1, kG>(R, ld, c, x, g, o, p, f);
}
#endif

// map_chunk over all C channels of R rows ld apart: chunks of NV vectors (fewer when f uses more
// coefficients, so they stay in registers), then halves of that, then scalars (fp32 on an AVX-512
// CPU: the AVX-512 walk, chunks of 2·NV 16-lane vectors).
template <int NV, bool kG, typename A, typename F>
void map_rows(int64_t R, int64_t C, int64_t ld, const A* x, const A* g, A* o, const A* const* p, F& f) {
#if PRECIS_NORM_AVX512
  if constexpr (std::is_same_v<A, float>)
    if (vec_detail::use_avx512()) return map_rows_avx512<NV, kG>(R, C, ld, x, g, o, p, f);
#endif
  int64_t c = map_vectors<Vec32<A>, NV, kG>(R, C, ld, 0, x, g, o, p, f);
  for (; c < C; ++c) map_chunk<A, 1, kG>(R, ld, c, x, g, o, p, f);
}

// The row split both passes share: nb blocks, block i = rows [i·M/nb, (i+1)·M/nb).
int64_t channels_last_blocks(int64_t M, int64_t C) {
  const int64_t work = std::max<int64_t>(1, (M * C + kNormGrain - 1) / kNormGrain);
  return std::max<int64_t>(1, std::min<int64_t>(get_num_threads(), std::min(work, M)));
}

// Rows per slab for C channels.
int64_t slab_rows(int64_t C) { return std::max<int64_t>(1, std::min(kFoldRows, kSlab / C)); }

// Asks for the n elements at p (one prefetch per 64-byte line, into L2) ahead of their use. The
// chunk walks go down a slab's rows one channel chunk at a time, a strided pattern that left f32
// slabs, read in place, slower than a plain row loop (measured: f32 backward +15-25 % CPU time); fetching the next slab
// linearly while this one is walked brings it back to the row loop's time.
// f16/bf16 slabs are read linearly by their bulk conversion already; prefetching them as well
// measured slower (bf16 backward +15 % CPU time), so only the types read in place prefetch, unless
// kAll: the NCHW walk's slabs are rows C·S apart, and prefetching them made its bf16 passes
// 1.1-1.4x faster too (benchmarks/results/bn-nchw-2026-12-07-zen4.md).
template <bool kWrite, bool kAll = false, typename T>
inline void prefetch_span(const T* p, int64_t n) {
  if constexpr (!kAll && !std::is_same_v<T, opmath_t<T>>) return;
  const char* b = reinterpret_cast<const char*>(p);
  const int64_t bytes = n * static_cast<int64_t>(sizeof(T));
  for (int64_t i = 0; i < bytes; i += 64) __builtin_prefetch(b + i, kWrite ? 1 : 0, 2);
}

// Per channel, Σ u and Σ v over the M rows (the accuracy contract above): add(R, xs, gs, a1, a2)
// adds R rows of slabs xs (and gs when kG) into the A accumulators a1, a2 (length C).
template <typename T, bool kG, typename Add>
void channels_last_sums(int64_t M, int64_t C, int64_t nb, const T* xp, const T* gp, std::vector<double>& s1,
                        std::vector<double>& s2, Add&& add) {
  using A = opmath_t<T>;
  std::vector<double> partial(static_cast<size_t>(nb * 2 * C), 0.0);
  const int64_t rs = slab_rows(C);
  parallel_for(0, nb, 1, [&](int64_t blo, int64_t bhi) {
    RowBuf<T> xb(rs * C), gb(kG ? rs * C : 0);
    std::vector<A> a1(static_cast<size_t>(C)), a2(static_cast<size_t>(C));
    for (int64_t blk = blo; blk < bhi; ++blk) {
      double* p1 = partial.data() + blk * 2 * C;
      double* p2 = p1 + C;
      const int64_t r1 = (blk + 1) * M / nb;
      for (int64_t r = blk * M / nb; r < r1; r += kFoldRows) {
        std::fill(a1.begin(), a1.end(), A(0));
        std::fill(a2.begin(), a2.end(), A(0));
        const int64_t fold_end = std::min(r + kFoldRows, r1);
        for (int64_t q = r; q < fold_end; q += rs) {
          const int64_t R = std::min(rs, fold_end - q);
          const int64_t next = std::min(rs, r1 - q - R) * C;
          prefetch_span<false>(xp + (q + R) * C, next);
          if (kG) prefetch_span<false>(gp + (q + R) * C, next);
          const A* xs = xb.load(xp + q * C, R * C);
          const A* gs = kG ? gb.load(gp + q * C, R * C) : nullptr;
          add(R, xs, gs, a1.data(), a2.data());
        }
        for (int64_t c = 0; c < C; ++c) {
          p1[c] += static_cast<double>(a1[c]);
          p2[c] += static_cast<double>(a2[c]);
        }
      }
    }
  });
  s1.assign(static_cast<size_t>(C), 0.0);
  s2.assign(static_cast<size_t>(C), 0.0);
  for (int64_t blk = 0; blk < nb; ++blk)
    for (int64_t c = 0; c < C; ++c) {
      s1[c] += partial[blk * 2 * C + c];
      s2[c] += partial[blk * 2 * C + C + c];
    }
}

// out = f(x, g, coefficients) over the M rows, in the blocks of the sums pass, slab by slab.
template <typename T, int NV, bool kG, typename F>
void channels_last_map(int64_t M, int64_t C, int64_t nb, const T* xp, const T* gp, T* op,
                       const opmath_t<T>* const* coef, F&& f) {
  using A = opmath_t<T>;
  const int64_t rs = slab_rows(C);
  parallel_for(0, nb, 1, [&](int64_t blo, int64_t bhi) {
    RowBuf<T> xb(rs * C), gb(kG ? rs * C : 0);
    for (int64_t blk = blo; blk < bhi; ++blk) {
      const int64_t r1 = (blk + 1) * M / nb;
      for (int64_t q = blk * M / nb; q < r1; q += rs) {
        const int64_t R = std::min(rs, r1 - q);
        const int64_t next = std::min(rs, r1 - q - R) * C;
        prefetch_span<false>(xp + (q + R) * C, next);
        if (kG) prefetch_span<false>(gp + (q + R) * C, next);
        prefetch_span<true>(op + (q + R) * C, next);
        const A* xs = xb.load(xp + q * C, R * C);
        const A* gs = kG ? gb.load(gp + q * C, R * C) : nullptr;
        // f16/bf16: the result overwrites the widened x slab, then is rounded out in one call.
        A* os = xb.out(op + q * C);
        map_rows<NV, kG>(R, C, C, xs, gs, os, coef, f);
        xb.store(op + q * C, R * C);
      }
    }
  });
}

// batch_norm_kernel on channels-last rows: the statistics as the NCHW kernel's (sums shifted by
// each channel's first element), then one affine pass over the rows.
template <typename T>
void batch_norm_channels_last(const Tensor& out, const Tensor& save_mean, const Tensor& save_rstd, const Tensor& x,
                              const Tensor& weight, const Tensor& bias, const Tensor& running_mean,
                              const Tensor& running_var, bool training, double momentum, double eps) {
  using A = opmath_t<T>;
  const int64_t N = x.size(0), C = x.size(1), S = x.size(2);
  const int64_t M = N * S;
  PRECIS_INTERNAL_ASSERT(channels_last_rows(out), "batch_norm: a channels-last input needs a channels-last output");
  const T* xp = x.data_ptr<T>();
  T* op = out.data_ptr<T>();
  const A* w = ptr_or_null<A>(weight);
  const A* b = ptr_or_null<A>(bias);
  A* rm = mut_ptr_or_null<A>(running_mean);
  A* rv = mut_ptr_or_null<A>(running_var);
  A* sm = save_mean.data_ptr<A>();
  A* sr = save_rstd.data_ptr<A>();
  const int64_t nb = channels_last_blocks(M, C);
  if (!training) {
    for (int64_t c = 0; c < C; ++c) {
      sm[c] = rm[c];
      sr[c] = static_cast<A>(1.0 / std::sqrt(static_cast<double>(rv[c]) + eps));
    }
  } else {
    RowBuf<T> first(C);
    const A* x0 = first.load(xp, C);
    const std::vector<A> k(x0, x0 + C);
    std::vector<double> s1, s2;
    channels_last_sums<T, false>(M, C, nb, xp, nullptr, s1, s2,
                                 [&](int64_t R, const A* xs, const A*, A* a1, A* a2) {
                                   sum_rows<false>(R, C, C, xs, static_cast<const A*>(nullptr), k.data(), a1, a2,
                                                   [](const auto& xv, const auto&, const auto& kv, auto& u,
                                                      auto& q) PRECIS_NORM_INLINE {
                                                     const auto d = xv - kv;
                                                     u += d;
                                                     q += d * d;
                                                   });
                                 });
    for (int64_t c = 0; c < C; ++c)
      channel_statistics(s1[c], s2[c], k[c], M, momentum, eps, sm[c], sr[c], rm ? rm + c : nullptr,
                         rv ? rv + c : nullptr);
  }
  std::vector<A> scale(static_cast<size_t>(C)), shift(static_cast<size_t>(C));
  for (int64_t c = 0; c < C; ++c) {
    scale[c] = (w ? w[c] : A(1)) * sr[c];
    shift[c] = b ? b[c] : A(0);
  }
  // (x − mean)·scale + shift: centring first keeps the result a few ulps from exact when |mean|
  // or scale is large.
  const A* coef[4] = {sm, scale.data(), shift.data(), sm};
  channels_last_map<T, kChunkVecs, false>(
      M, C, nb, xp, nullptr, op, coef,
      [](const auto& xv, const auto&, const auto& mu, const auto& sc, const auto& sh, const auto&, auto& o)
          PRECIS_NORM_INLINE { o = (xv - mu) * sc + sh; });
}

// batch_norm_backward_kernel on channels-last rows (the same formula, per-channel coefficients).
template <typename T>
void batch_norm_backward_channels_last(const Tensor& dx, const Tensor& dweight, const Tensor& dbias,
                                       const Tensor& grad, const Tensor& x, const Tensor& weight,
                                       const Tensor& save_mean, const Tensor& save_rstd, bool training) {
  using A = opmath_t<T>;
  const int64_t N = x.size(0), C = x.size(1), S = x.size(2);
  const int64_t M = N * S;
  PRECIS_INTERNAL_ASSERT(channels_last_rows(grad) && (!dx.defined() || channels_last_rows(dx)),
                         "batch_norm backward: a channels-last input needs channels-last gradients");
  const T *xp, *gp;
  T* dp;
  const A *w, *sm, *sr;
  A *dw, *db;
  std::tie(xp, gp, dp, w, sm, sr, dw, db) =
      norm_backward_ptrs<T>(dx, dweight, dbias, grad, x, weight, save_mean, save_rstd);
  const int64_t nb = channels_last_blocks(M, C);
  const bool need_sums = training ? dp != nullptr || dw || db : dw || db;
  std::vector<double> sg(static_cast<size_t>(C), 0.0), sgx(static_cast<size_t>(C), 0.0);
  if (need_sums)
    // Σ g and Σ g·(x − mean), both from one read of x and grad.
    channels_last_sums<T, true>(M, C, nb, xp, gp, sg, sgx, [&](int64_t R, const A* xs, const A* gs, A* a1, A* a2) {
      sum_rows<true>(R, C, C, xs, gs, sm, a1, a2,
                     [](const auto& xv, const auto& gv, const auto& mu, auto& u, auto& q) PRECIS_NORM_INLINE {
        u += gv;
        q += gv * (xv - mu);
      });
    });
  for (int64_t c = 0; c < C; ++c) {
    if (db) db[c] = static_cast<A>(sg[c]);
    if (dw) dw[c] = static_cast<A>(sgx[c] * static_cast<double>(sr[c]));
  }
  if (!dp) return;
  std::vector<A> ca(static_cast<size_t>(C)), cb(static_cast<size_t>(C)), c0(static_cast<size_t>(C));
  for (int64_t c = 0; c < C; ++c) {
    const BackwardCoefficients<A> k(sg[c], sgx[c], w, c, sr[c], M, training);
    ca[c] = k.ca;
    cb[c] = k.cb;
    c0[c] = k.c0;
  }
  const A* coef[4] = {ca.data(), cb.data(), sm, c0.data()};
  if (training) {
    // ca·g + cb·(x − mean) + c0, centred first as the NCHW kernel; four coefficient vectors per
    // 8 channels, so chunks of 2 vectors keep them in registers.
    channels_last_map<T, 2, true>(M, C, nb, xp, gp, dp, coef,
                                  [](const auto& xv, const auto& gv, const auto& a, const auto& bb, const auto& mu,
                                     const auto& k0, auto& o) PRECIS_NORM_INLINE { o = a * gv + bb * (xv - mu) + k0; });
  } else {
    channels_last_map<T, kChunkVecs, true>(M, C, nb, xp, gp, dp, coef,
                                           [](const auto&, const auto& gv, const auto& a, const auto&, const auto&,
                                              const auto&, auto& o) PRECIS_NORM_INLINE { o = a * gv; });
  }
}

// ---- batch norm, NCHW -----------------------------------------------------------------------------
//
// x, out: (N, C, S) contiguous. A channel is N rows of S elements C·S apart, rows too short in
// late ResNet stages (4×4 = 16 elements) for a walk per row: each was a call to widen, one to sum
// and one to store, for 16 elements, and the NCHW kernels ran 2-4x slower than the channels-last
// ones there. The kernels walk a channel's elements as the columns of the channels-last chunk walks
// (per-column accumulators and coefficients in registers), in windows of at most kColumns columns
// taken down all N rows:
//  - S < kColumns: B channels at a time, whose elements in row n are one contiguous run of B·S ≤
//    kColumns, one window (column j belongs to channel c0 + j / S);
//  - S ≥ kColumns: one channel at a time, in windows of kColumns columns of its rows (the last
//    one narrower).
// A block's sums, statistics and map run in one task while its elements are in cache; a window
// is taken in slabs of at most kSlab elements (f16/bf16 widened, f32/f64 read in place), the next
// slab prefetched (the walk goes down rows C·S apart, which the hardware prefetcher misses).
//
// Accuracy: each column's sums run in A over at most kFoldRows rows in order and are folded into
// f64, and a channel's columns are then added in f64 in column order: a channel's result depends
// on the shape only, not on the thread count. The forward sums are shifted by each channel's first
// element, so a large mean costs no precision.

// Columns of a walk: two chunks of the AVX-512 sum walk (8 vectors of 16 lanes each).
constexpr int64_t kColumns = 256;

// Channels [c0, c0 + nc) of (N, C, S); one channel when S ≥ kColumns.
struct NchwBlock {
  int64_t c0, nc;
};

// Channels per block: whole channels up to kColumns columns, and at least one block per thread.
int64_t nchw_block_channels(int64_t C, int64_t S) {
  const int64_t threads = std::max<int64_t>(1, get_num_threads());
  return std::max<int64_t>(1, std::min(kColumns / S, (C + threads - 1) / threads));
}

// A task's buffers and the walk over one block, window by window: a window is up to kColumns
// consecutive columns of the block's run (nc·S elements in each row: the whole run when S <
// kColumns), taken over the N rows C·S apart. visit(R, width, ld, x, g, o) is called on R rows of
// the window (row stride ld) of x (and g when kG) in the compute type, with o the destination of a
// map at the same stride (written back after the call).
template <typename T>
struct NchwWalk {
  using A = opmath_t<T>;
  NchwWalk(int64_t N, int64_t C, int64_t S, int64_t B, bool with_grad)
      : N(N), C(C), S(S), width(std::min(B * S, kColumns)), xb(kSlab), gb(with_grad ? kSlab : 0) {
    for (auto& c : q) c.resize(static_cast<size_t>(width));
    a1.resize(static_cast<size_t>(width));
    a2.resize(static_cast<size_t>(width));
    p1.resize(static_cast<size_t>(width));
    p2.resize(static_cast<size_t>(width));
  }

  // Rows [n0, n1) of the window of block b at column col0, `cols` wide; f16/bf16 in slabs of at
  // most kSlab elements, f32/f64 read in place.
  template <bool kG, bool kOut, typename V>
  void rows(const NchwBlock& b, int64_t col0, int64_t cols, int64_t n0, int64_t n1, const T* xp, const T* gp,
            T* op, V&& visit) {
    const int64_t stride = C * S;
    const int64_t slab = std::max<int64_t>(1, kSlab / cols);
    for (int64_t n = n0; n < n1; n += slab) {
      const int64_t R = std::min(slab, n1 - n), off = (n * C + b.c0) * S + col0;
      // The chunk walks go down the slab's rows, which lie C·S apart: the next slab is fetched
      // row by row meanwhile.
      for (int64_t r = R; r < R + std::min(slab, n1 - n - R); ++r) {
        prefetch_span<false, true>(xp + off + r * stride, cols);
        if (kG) prefetch_span<false, true>(gp + off + r * stride, cols);
        if (kOut) prefetch_span<true, true>(op + off + r * stride, cols);
      }
      const A* xs = nullptr;
      const A* gs = nullptr;
      const int64_t ld = xb.load_rows(xp + off, R, cols, stride, xs);
      if (kG) gb.load_rows(gp + off, R, cols, stride, gs);
      A* os = kOut ? xb.out(op + off) : nullptr;
      visit(R, cols, ld, xs, gs, os);
      if (kOut) xb.store_rows(op + off, R, cols, stride);
    }
  }

  // Every window of block b in order: f(col0, cols).
  template <typename F>
  void windows(const NchwBlock& b, F&& f) const {
    const int64_t run = b.nc * S;
    for (int64_t col0 = 0; col0 < run; col0 += width) f(col0, std::min(width, run - col0));
  }

  // q[k][j] = value(c) for each column j of a window, of channel c (windows are whole channels
  // or parts of one).
  template <typename F>
  void expand(int k, const NchwBlock& b, F&& value) {
    const int64_t n = std::min(b.nc * S, width);
    for (int64_t j = 0; j < n; j += S) std::fill_n(q[k].begin() + j, std::min(S, n - j), value(b.c0 + j / S));
  }
  const A* coef(int k) const { return q[k].data(); }

  int64_t N, C, S, width;
  RowBuf<T> xb, gb;
  std::vector<A> a1, a2, q[4];
  std::vector<double> p1, p2;
};

// s1[j], s2[j] = Σ u, Σ v over the elements of the block's channel c0 + j (the accuracy rule
// above), where sum(R, width, ld, xs, gs, a1, a2) adds R rows into the column accumulators.
template <bool kG, typename T, typename Sum>
void nchw_block_sums(NchwWalk<T>& w, const NchwBlock& b, const T* xp, const T* gp, double* s1, double* s2,
                     Sum&& sum) {
  using A = opmath_t<T>;
  std::fill_n(s1, b.nc, 0.0);
  std::fill_n(s2, b.nc, 0.0);
  w.windows(b, [&](int64_t col0, int64_t cols) {
    std::fill_n(w.p1.begin(), cols, 0.0);
    std::fill_n(w.p2.begin(), cols, 0.0);
    for (int64_t n = 0; n < w.N; n += kFoldRows) {
      std::fill_n(w.a1.begin(), cols, A(0));
      std::fill_n(w.a2.begin(), cols, A(0));
      w.template rows<kG, false>(b, col0, cols, n, std::min(w.N, n + kFoldRows), xp, gp, static_cast<T*>(nullptr),
                                 [&](int64_t R, int64_t width, int64_t ld, const A* xs, const A* gs, A*) {
                                   sum(R, width, ld, xs, gs, w.a1.data(), w.a2.data());
                                 });
      for (int64_t j = 0; j < cols; ++j) {
        w.p1[j] += static_cast<double>(w.a1[j]);
        w.p2[j] += static_cast<double>(w.a2[j]);
      }
    }
    for (int64_t j = 0; j < cols; ++j) {
      s1[(col0 + j) / w.S] += w.p1[j];
      s2[(col0 + j) / w.S] += w.p2[j];
    }
  });
}

// out = map(R, width, ld, xs, gs, os) over every window of block b.
template <bool kG, typename T, typename Map>
void nchw_block_map(NchwWalk<T>& w, const NchwBlock& b, const T* xp, const T* gp, T* op, Map&& map) {
  w.windows(b, [&](int64_t col0, int64_t cols) { w.template rows<kG, true>(b, col0, cols, 0, w.N, xp, gp, op, map); });
}

// Runs body(walk, block) over the channel blocks of (N, C, S), one walk (buffers) per task.
template <typename T, typename F>
void for_nchw_blocks(int64_t N, int64_t C, int64_t S, bool with_grad, F&& body) {
  const int64_t B = nchw_block_channels(C, S);
  parallel_for(0, (C + B - 1) / B, 1, [&](int64_t lo, int64_t hi) {
    NchwWalk<T> w(N, C, S, B, with_grad);
    for (int64_t i = lo; i < hi; ++i) body(w, NchwBlock{i * B, std::min(B, C - i * B)});
  });
}

template <typename T>
void batch_norm_kernel(const Tensor& out, const Tensor& save_mean, const Tensor& save_rstd, const Tensor& x,
                       const Tensor& weight, const Tensor& bias, const Tensor& running_mean,
                       const Tensor& running_var, bool training, double momentum, double eps) {
  if (channels_last_rows(x))
    return batch_norm_channels_last<T>(out, save_mean, save_rstd, x, weight, bias, running_mean, running_var,
                                       training, momentum, eps);
  using A = opmath_t<T>;
  const int64_t N = x.size(0), C = x.size(1), S = x.size(2);
  const int64_t M = N * S;
  const T* xp = x.data_ptr<T>();
  T* op = out.data_ptr<T>();
  const A* w = ptr_or_null<A>(weight);
  const A* b = ptr_or_null<A>(bias);
  A* rm = mut_ptr_or_null<A>(running_mean);
  A* rv = mut_ptr_or_null<A>(running_var);
  A* sm = save_mean.data_ptr<A>();
  A* sr = save_rstd.data_ptr<A>();
  if (!training)
    for (int64_t c = 0; c < C; ++c) {
      sm[c] = rm[c];
      sr[c] = static_cast<A>(1.0 / std::sqrt(static_cast<double>(rv[c]) + eps));
    }
  if (C == 0) return;
  if (M == 0) {
    // No batch statistics (the op refuses training on fewer than two values per channel).
    if (training) {
      std::fill_n(sm, C, std::numeric_limits<A>::quiet_NaN());
      std::fill_n(sr, C, std::numeric_limits<A>::quiet_NaN());
    }
    return;
  }
  for_nchw_blocks<T>(N, C, S, false, [&](NchwWalk<T>& walk, const NchwBlock& blk) {
    if (training) {
      auto first = [&](int64_t c) { return convert<A>(xp[c * S]); };  // the shift
      walk.expand(0, blk, first);
      auto shifted = [](const auto& xv, const auto&, const auto& kv, auto& u, auto& q) PRECIS_NORM_INLINE {
        const auto d = xv - kv;
        u += d;
        q += d * d;
      };
      double s1[kColumns], s2[kColumns];
      nchw_block_sums<false>(walk, blk, xp, static_cast<const T*>(nullptr), s1, s2,
                             [&](int64_t R, int64_t width, int64_t ld, const A* xs, const A*, A* a1, A* a2) {
                               sum_rows<false>(R, width, ld, xs, static_cast<const A*>(nullptr), walk.coef(0), a1, a2,
                                               shifted);
                             });
      for (int64_t j = 0; j < blk.nc; ++j) {
        const int64_t c = blk.c0 + j;
        channel_statistics(s1[j], s2[j], first(c), M, momentum, eps, sm[c], sr[c], rm ? rm + c : nullptr,
                           rv ? rv + c : nullptr);
      }
    }
    // (x − mean)·scale + shift, centred first as the channels-last map.
    walk.expand(0, blk, [&](int64_t c) { return sm[c]; });
    walk.expand(1, blk, [&](int64_t c) { return (w ? w[c] : A(1)) * sr[c]; });
    walk.expand(2, blk, [&](int64_t c) { return b ? b[c] : A(0); });
    const A* coef[4] = {walk.coef(0), walk.coef(1), walk.coef(2), walk.coef(0)};
    auto affine = [](const auto& xv, const auto&, const auto& mu, const auto& sc, const auto& sh, const auto&,
                     auto& o) PRECIS_NORM_INLINE { o = (xv - mu) * sc + sh; };
    nchw_block_map<false>(walk, blk, xp, static_cast<const T*>(nullptr), op,
                                    [&](int64_t R, int64_t width, int64_t ld, const A* xs, const A*, A* os) {
                                      map_rows<kChunkVecs, false>(R, width, ld, xs, static_cast<const A*>(nullptr),
                                                                  os, coef, affine);
                                    });
  });
}

// grad, x, dx: (N, C, S). Per channel: Σg and Σg·(x − mean) in one pass, then dx = ca·g +
// cb·(x − mean) + c0 (BackwardCoefficients).
template <typename T>
void batch_norm_backward_kernel(const Tensor& dx, const Tensor& dweight, const Tensor& dbias, const Tensor& grad,
                                const Tensor& x, const Tensor& weight, const Tensor& save_mean,
                                const Tensor& save_rstd, bool training) {
  if (channels_last_rows(x))
    return batch_norm_backward_channels_last<T>(dx, dweight, dbias, grad, x, weight, save_mean, save_rstd,
                                                training);
  using A = opmath_t<T>;
  const int64_t N = x.size(0), C = x.size(1), S = x.size(2);
  const int64_t M = N * S;
  const T *xp, *gp;
  T* dp;
  const A *w, *sm, *sr;
  A *dw, *db;
  std::tie(xp, gp, dp, w, sm, sr, dw, db) =
      norm_backward_ptrs<T>(dx, dweight, dbias, grad, x, weight, save_mean, save_rstd);
  const bool need_sums = training ? dp != nullptr || dw || db : dw || db;
  if (M == 0) {
    for (int64_t c = 0; c < C; ++c) {
      if (db) db[c] = A(0);
      if (dw) dw[c] = A(0);
    }
    return;
  }
  for_nchw_blocks<T>(N, C, S, true, [&](NchwWalk<T>& walk, const NchwBlock& blk) {
    double sg[kColumns] = {}, sgx[kColumns] = {};  // Σ g, Σ g·(x − mean)
    if (need_sums) {
      auto centred = [](const auto& xv, const auto& gv, const auto& mu, auto& u, auto& q) PRECIS_NORM_INLINE {
        u += gv;
        q += gv * (xv - mu);
      };
      walk.expand(0, blk, [&](int64_t c) { return sm[c]; });
      nchw_block_sums<true>(walk, blk, xp, gp, sg, sgx,
                            [&](int64_t R, int64_t width, int64_t ld, const A* xs, const A* gs, A* a1, A* a2) {
                              sum_rows<true>(R, width, ld, xs, gs, walk.coef(0), a1, a2, centred);
                            });
    }
    for (int64_t j = 0; j < blk.nc; ++j) {
      const int64_t c = blk.c0 + j;
      if (db) db[c] = static_cast<A>(sg[j]);
      if (dw) dw[c] = static_cast<A>(sgx[j] * static_cast<double>(sr[c]));
    }
    if (!dp) return;
    auto k = [&](int64_t c) {
      return BackwardCoefficients<A>(sg[c - blk.c0], sgx[c - blk.c0], w, c, sr[c], M, training);
    };
    walk.expand(0, blk, [&](int64_t c) { return k(c).ca; });
    walk.expand(1, blk, [&](int64_t c) { return k(c).cb; });
    walk.expand(2, blk, [&](int64_t c) { return sm[c]; });
    walk.expand(3, blk, [&](int64_t c) { return k(c).c0; });
    const A* coef[4] = {walk.coef(0), walk.coef(1), walk.coef(2), walk.coef(3)};
    auto train_map = [](const auto& xv, const auto& gv, const auto& a, const auto& bb, const auto& mu,
                        const auto& k0, auto& o) PRECIS_NORM_INLINE { o = a * gv + bb * (xv - mu) + k0; };
    auto eval_map = [](const auto&, const auto& gv, const auto& a, const auto&, const auto&, const auto&,
                       auto& o) PRECIS_NORM_INLINE { o = a * gv; };
    nchw_block_map<true>(walk, blk, xp, gp, dp,
                                   [&](int64_t R, int64_t width, int64_t ld, const A* xs, const A* gs, A* os) {
                                     if (training) map_rows<2, true>(R, width, ld, xs, gs, os, coef, train_map);
                                     else map_rows<kChunkVecs, true>(R, width, ld, xs, gs, os, coef, eval_map);
                                   });
  });
}

// ---- layer norm -------------------------------------------------------------------------------
//
// fp32 rows of a multiple of 16 elements (up to kFoldBlock) take a row-group walk: kLnRows rows at
// once, each row summed as lanes_sum sums it (16 lanes in element order, combined pairwise), so the
// rows' sums are independent dependency chains (one row's is D/16 dependent adds: latency, not
// throughput, bounded the one-row loop). The forward's three passes and the backward's two run on
// 16-lane vectors (Vec64f): one AVX-512 register, or two AVX2 ones where the compiler splits it (it
// fuses multiply-adds only on the AVX-512 form, so the two differ in the last bits; both are
// checked against f64 in tests/ops/norm_test.cpp). The backward's parameter partials are added row
// by row as before; x̂ is recomputed in its second pass instead of kept in a buffer.
constexpr int kLnRows = 4;

// The 16 lanes of v, each lanes_sum's lane k, combined as lanes_sum combines them.
static_assert(kLanes == 16, "a Vec64f holds lanes_sum's lanes");
[[gnu::always_inline]] inline float lanes16_sum(const Vec64f& v) {
  float a[16];
  std::memcpy(a, &v, sizeof a);
  return lanes_sum<float>(16, [&](int64_t k) { return a[k]; });
}

// Rows [r, r + G) of the forward (x, y: rows of D, D % 16 == 0).
template <int G>
[[gnu::always_inline]] inline void ln_forward_group(const float* x, float* y, float* mean, float* rstd, int64_t r,
                                                    int64_t D, const float* w, const float* b, double eps) {
  const float* xr[G];
  float mu[G], rs[G];
  Vec64f acc[G];
  for (int g = 0; g < G; ++g) {
    xr[g] = x + (r + g) * D;
    acc[g] = Vec64f{};
  }
  for (int64_t i = 0; i < D; i += 16)
    for (int g = 0; g < G; ++g) {
      Vec64f v;
      vload(xr[g] + i, v);
      acc[g] += v;
    }
  for (int g = 0; g < G; ++g) {
    mu[g] = static_cast<float>(static_cast<double>(lanes16_sum(acc[g])) / static_cast<double>(D));
    acc[g] = Vec64f{};
  }
  for (int64_t i = 0; i < D; i += 16)
    for (int g = 0; g < G; ++g) {
      Vec64f v;
      vload(xr[g] + i, v);
      const Vec64f d = v - mu[g];
      acc[g] += d * d;
    }
  for (int g = 0; g < G; ++g) {
    // The variance rounded to fp32 first, as the row loop (NormRows) and the CUDA kernel do.
    const float var = static_cast<float>(static_cast<double>(lanes16_sum(acc[g])) / static_cast<double>(D));
    rs[g] = static_cast<float>(1.0 / std::sqrt(static_cast<double>(var) + eps));
    mean[r + g] = mu[g];
    rstd[r + g] = rs[g];
  }
  // (x − mean)·rstd·w + b.
  for (int64_t i = 0; i < D; i += 16) {
    Vec64f wv{}, bv{};
    if (w) vload(w + i, wv);
    if (b) vload(b + i, bv);
    for (int g = 0; g < G; ++g) {
      Vec64f v;
      vload(xr[g] + i, v);
      Vec64f o = (v - mu[g]) * rs[g];
      if (w) o = o * wv;
      if (b) o = o + bv;
      vstore(y + (r + g) * D + i, o);
    }
  }
}

// Rows [r, r + G) of the backward: dx (when dx), and the rows' products added into the parameter
// partials pw, pb (when given), row by row.
template <int G>
[[gnu::always_inline]] inline void ln_backward_group(const float* x, const float* gr, float* dx, const float* mean,
                                                     const float* rstd, int64_t r, int64_t D, const float* w,
                                                     float* pw, float* pb) {
  float mu[G], rs[G], m1[G], m2[G];
  Vec64f s1[G], s2[G];
  for (int g = 0; g < G; ++g) {
    mu[g] = mean[r + g];
    rs[g] = rstd[r + g];
    s1[g] = s2[g] = Vec64f{};
  }
  for (int64_t i = 0; i < D; i += 16) {
    Vec64f wv{}, pwv{}, pbv{};
    if (w) vload(w + i, wv);
    if (pw) {
      vload(pw + i, pwv);
      vload(pb + i, pbv);
    }
    for (int g = 0; g < G; ++g) {
      Vec64f xv, gv;
      vload(x + (r + g) * D + i, xv);
      vload(gr + (r + g) * D + i, gv);
      const Vec64f xh = (xv - mu[g]) * rs[g];
      if (pw) {
        pwv += gv * xh;
        pbv += gv;
      }
      const Vec64f dn = w ? gv * wv : gv;
      s1[g] += dn;
      s2[g] += dn * xh;
    }
    if (pw) {
      vstore(pw + i, pwv);
      vstore(pb + i, pbv);
    }
  }
  if (!dx) return;
  for (int g = 0; g < G; ++g) {
    m1[g] = lanes16_sum(s1[g]) / static_cast<float>(D);
    m2[g] = lanes16_sum(s2[g]) / static_cast<float>(D);
  }
  // rstd·(dn − mean(dn) − x̂·mean(dn·x̂)).
  for (int64_t i = 0; i < D; i += 16) {
    Vec64f wv{};
    if (w) vload(w + i, wv);
    for (int g = 0; g < G; ++g) {
      Vec64f xv, gv;
      vload(x + (r + g) * D + i, xv);
      vload(gr + (r + g) * D + i, gv);
      const Vec64f xh = (xv - mu[g]) * rs[g];
      const Vec64f dn = w ? gv * wv : gv;
      vstore(dx + (r + g) * D + i, rs[g] * (dn - m1[g] - xh * m2[g]));
    }
  }
}

// Rows [lo, hi) in groups of kLnRows, then one by one.
[[gnu::always_inline]] inline void ln_forward_rows(const float* x, float* y, float* mean, float* rstd, int64_t lo,
                                                   int64_t hi, int64_t D, const float* w, const float* b, double eps) {
  int64_t r = lo;
  for (; r + kLnRows <= hi; r += kLnRows) ln_forward_group<kLnRows>(x, y, mean, rstd, r, D, w, b, eps);
  for (; r < hi; ++r) ln_forward_group<1>(x, y, mean, rstd, r, D, w, b, eps);
}
[[gnu::always_inline]] inline void ln_backward_rows(const float* x, const float* g, float* dx, const float* mean,
                                                    const float* rstd, int64_t lo, int64_t hi, int64_t D,
                                                    const float* w, float* pw, float* pb) {
  int64_t r = lo;
  for (; r + kLnRows <= hi; r += kLnRows) ln_backward_group<kLnRows>(x, g, dx, mean, rstd, r, D, w, pw, pb);
  for (; r < hi; ++r) ln_backward_group<1>(x, g, dx, mean, rstd, r, D, w, pw, pb);
}

#if PRECIS_NORM_AVX512
[[gnu::target("avx512f")]] void ln_forward_rows_avx512(const float* x, float* y, float* mean, float* rstd,
                                                        int64_t lo, int64_t hi, int64_t D, const float* w,
                                                        const float* b, double eps) {
  ln_forward_rows(x, y, mean, rstd, lo, hi, D, w, b, eps);
}
[[gnu::target("avx512f")]] void ln_backward_rows_avx512(const float* x, const float* g, float* dx, const float* mean,
                                                         const float* rstd, int64_t lo, int64_t hi, int64_t D,
                                                         const float* w, float* pw, float* pb) {
  ln_backward_rows(x, g, dx, mean, rstd, lo, hi, D, w, pw, pb);
}
#endif

// Whether the fp32 row-group walk takes rows of D.
bool ln_row_groups(int64_t D) { return D > 0 && D % 16 == 0 && D <= kFoldBlock; }

void ln_forward_f32(const float* x, float* y, float* mean, float* rstd, int64_t lo, int64_t hi, int64_t D,
                    const float* w, const float* b, double eps) {
#if PRECIS_NORM_AVX512
  if (vec_detail::use_avx512()) return ln_forward_rows_avx512(x, y, mean, rstd, lo, hi, D, w, b, eps);
#endif
  ln_forward_rows(x, y, mean, rstd, lo, hi, D, w, b, eps);
}
void ln_backward_f32(const float* x, const float* g, float* dx, const float* mean, const float* rstd, int64_t lo,
                     int64_t hi, int64_t D, const float* w, float* pw, float* pb) {
#if PRECIS_NORM_AVX512
  if (vec_detail::use_avx512()) return ln_backward_rows_avx512(x, g, dx, mean, rstd, lo, hi, D, w, pw, pb);
#endif
  ln_backward_rows(x, g, dx, mean, rstd, lo, hi, D, w, pw, pb);
}


// x, out: (M, D); per row: two-pass mean/variance, then out = (x − mean)·rstd·w + b.
template <typename T>
void layer_norm_kernel(const Tensor& out, const Tensor& mean, const Tensor& rstd, const Tensor& x,
                       const Tensor& weight, const Tensor& bias, double eps) {
  using A = opmath_t<T>;
  const int64_t M = x.size(0), D = x.size(1);
  const A* w = ptr_or_null<A>(weight);
  const A* b = ptr_or_null<A>(bias);
  if constexpr (std::is_same_v<T, float>) {
    if (ln_row_groups(D)) {
      parallel_for(0, M, std::max<int64_t>(kLnRows, kNormGrain / D), [&](int64_t lo, int64_t hi) {
        ln_forward_f32(x.data_ptr<float>(), out.data_ptr<float>(), mean.data_ptr<float>(), rstd.data_ptr<float>(), lo,
                       hi, D, w, b, eps);
      });
      return;
    }
  }
  const NormRows<T> rows(out, mean, rstd, x, D, eps);
  parallel_for(0, M, std::max<int64_t>(1, kNormGrain / std::max<int64_t>(D, 1)), [&](int64_t lo, int64_t hi) {
    RowBuf<T> xb(D), ob(D);
    for (int64_t r = lo; r < hi; ++r) {
      const auto [xr, mu, rs] = rows.normalise_stats(r, xb);
      A* o = ob.out(rows.out + r * D);
      if (w && b) {
        for (int64_t i = 0; i < D; ++i) o[i] = (xr[i] - mu) * rs * w[i] + b[i];
      } else if (w) {
        for (int64_t i = 0; i < D; ++i) o[i] = (xr[i] - mu) * rs * w[i];
      } else if (b) {
        for (int64_t i = 0; i < D; ++i) o[i] = (xr[i] - mu) * rs + b[i];
      } else {
        for (int64_t i = 0; i < D; ++i) o[i] = (xr[i] - mu) * rs;
      }
      ob.store(rows.out + r * D, D);
    }
  });
}

// grad, x, dx: (M, D). Rows are split into one block per worker; each block accumulates its own
// dweight/dbias partials (fp32 for f32/f16/bf16) that are summed at the end. Per row:
// x̂ = (x − mean)·rstd, dn = g·w, dx = rstd·(dn − mean(dn) − x̂·mean(dn·x̂)).
template <typename T>
void layer_norm_backward_kernel(const Tensor& dx, const Tensor& dweight, const Tensor& dbias, const Tensor& grad,
                                const Tensor& x, const Tensor& weight, const Tensor& mean, const Tensor& rstd) {
  using A = opmath_t<T>;
  const int64_t M = x.size(0), D = x.size(1);
  const T *xp, *gp;
  T* dp;
  const A *w, *mp, *rp;
  A *dw, *db;
  std::tie(xp, gp, dp, w, mp, rp, dw, db) = norm_backward_ptrs<T>(dx, dweight, dbias, grad, x, weight, mean, rstd);
  const bool need_params = dw || db;
  const int64_t rows_per_block = std::max<int64_t>(1, kNormGrain / std::max<int64_t>(D, 1));
  const int64_t nblocks =
      std::max<int64_t>(1, std::min<int64_t>(get_num_threads(), (M + rows_per_block - 1) / rows_per_block));
  std::vector<A> partial(need_params ? static_cast<size_t>(nblocks * 2 * D) : 0, A(0));
  parallel_for(0, nblocks, 1, [&](int64_t blo, int64_t bhi) {
    if constexpr (std::is_same_v<T, float>) {
      if (ln_row_groups(D)) {
        for (int64_t blk = blo; blk < bhi; ++blk) {
          float* pw = need_params ? partial.data() + blk * 2 * D : nullptr;
          ln_backward_f32(xp, gp, dp, mp, rp, blk * M / nblocks, (blk + 1) * M / nblocks, D, w, pw,
                          pw ? pw + D : nullptr);
        }
        return;
      }
    }
    RowBuf<T> xb(D), gb(D), ob(D);
    std::vector<A> xhat(static_cast<size_t>(D));
    for (int64_t blk = blo; blk < bhi; ++blk) {
      A* pw = need_params ? partial.data() + blk * 2 * D : nullptr;
      A* pb = need_params ? pw + D : nullptr;
      for (int64_t r = blk * M / nblocks; r < (blk + 1) * M / nblocks; ++r) {
        const A* xr = xb.load(xp + r * D, D);
        const A* gr = gb.load(gp + r * D, D);
        const A mu = mp[r], rs = rp[r];
        A* xh = xhat.data();
        for (int64_t i = 0; i < D; ++i) xh[i] = (xr[i] - mu) * rs;
        if (need_params) {
          for (int64_t i = 0; i < D; ++i) {
            pw[i] += gr[i] * xh[i];
            pb[i] += gr[i];
          }
        }
        if (!dp) continue;
        A s1, s2;
        if (w) {
          s1 = lanes_sum<A>(D, [&](int64_t i) { return gr[i] * w[i]; });
          s2 = lanes_sum<A>(D, [&](int64_t i) { return gr[i] * w[i] * xh[i]; });
        } else {
          s1 = lanes_sum<A>(D, [&](int64_t i) { return gr[i]; });
          s2 = lanes_sum<A>(D, [&](int64_t i) { return gr[i] * xh[i]; });
        }
        const A m1 = s1 / static_cast<A>(D), m2 = s2 / static_cast<A>(D);
        A* o = ob.out(dp + r * D);
        if (w) {
          for (int64_t i = 0; i < D; ++i) o[i] = rs * (gr[i] * w[i] - m1 - xh[i] * m2);
        } else {
          for (int64_t i = 0; i < D; ++i) o[i] = rs * (gr[i] - m1 - xh[i] * m2);
        }
        ob.store(dp + r * D, D);
      }
    }
  });
  if (!need_params) return;
  for (int64_t i = 0; i < D; ++i) {
    A sw = 0, sb = 0;
    for (int64_t blk = 0; blk < nblocks; ++blk) {
      sw += partial[blk * 2 * D + i];
      sb += partial[blk * 2 * D + D + i];
    }
    if (dw) dw[i] = sw;
    if (db) db[i] = sb;
  }
}

// ---- group norm -------------------------------------------------------------------------------

// x, out: (N, C, S); the (n, g) block of C/G channels is contiguous. Per block: two-pass
// moments, then a per-channel affine.
template <typename T>
void group_norm_kernel(const Tensor& out, const Tensor& mean, const Tensor& rstd, const Tensor& x,
                       const Tensor& weight, const Tensor& bias, int64_t G, double eps) {
  using A = opmath_t<T>;
  const int64_t N = x.size(0), C = x.size(1), S = x.size(2);
  const int64_t Cg = C / G, L = Cg * S;
  const A* w = ptr_or_null<A>(weight);
  const A* b = ptr_or_null<A>(bias);
  const NormRows<T> rows(out, mean, rstd, x, L, eps);
  parallel_for(0, N * G, std::max<int64_t>(1, kNormGrain / std::max<int64_t>(L, 1)), [&](int64_t lo, int64_t hi) {
    RowBuf<T> xb(L), ob(L);
    for (int64_t t = lo; t < hi; ++t) {
      const auto [xr, mu, rs] = rows.normalise_stats(t, xb);
      A* o = ob.out(rows.out + t * L);
      const int64_t c0 = (t % G) * Cg;
      for (int64_t j = 0; j < Cg; ++j) {
        const A scale = (w ? w[c0 + j] : A(1)) * rs;
        affine_row(xr + j * S, o + j * S, S, mu, scale, b ? b[c0 + j] : A(0));
      }
      ob.store(rows.out + t * L, L);
    }
  });
}

// grad, x, dx: (N, C, S). Per (n, g) block of L = C/G·S elements, with dy = g·w_c:
// dx = rstd·(dy − Σdy/L − x̂·Σ(dy·x̂)/L), from the per-channel sums Σg and Σg·(x − mean).
// dweight_c = Σ_n rstd·Σ g(x − mean), dbias_c = Σ_n Σ g, reduced over n after the parallel part.
template <typename T>
void group_norm_backward_kernel(const Tensor& dx, const Tensor& dweight, const Tensor& dbias, const Tensor& grad,
                                const Tensor& x, const Tensor& weight, const Tensor& mean, const Tensor& rstd,
                                int64_t G) {
  using A = opmath_t<T>;
  const int64_t N = x.size(0), C = x.size(1), S = x.size(2);
  const int64_t Cg = C / G, L = Cg * S;
  const T *xp, *gp;
  T* dp;
  const A *w, *mp, *rp;
  A *dw, *db;
  std::tie(xp, gp, dp, w, mp, rp, dw, db) = norm_backward_ptrs<T>(dx, dweight, dbias, grad, x, weight, mean, rstd);
  // Per (n, c): rstd·Σ g(x − mean) and Σ g.
  std::vector<A> chan_gx(static_cast<size_t>(N * C)), chan_g(static_cast<size_t>(N * C));
  parallel_for(0, N * G, std::max<int64_t>(1, kNormGrain / std::max<int64_t>(L, 1)), [&](int64_t lo, int64_t hi) {
    RowBuf<T> xb(L), gb(L), ob(L);
    for (int64_t t = lo; t < hi; ++t) {
      const A* xr = xb.load(xp + t * L, L);
      const A* gr = gb.load(gp + t * L, L);
      const A mu = mp[t], rs = rp[t];
      const int64_t c0 = (t % G) * Cg, n = t / G;
      double sdy = 0, sdyx = 0;  // Σ dy, Σ dy·x̂ over the block
      for (int64_t j = 0; j < Cg; ++j) {
        const A* xs = xr + j * S;
        const A* gs = gr + j * S;
        double sg = 0, sgx = 0;
        for (int64_t s0 = 0; s0 < S; s0 += kFoldBlock) {
          const int64_t m = std::min(kFoldBlock, S - s0);
          sg += lanes_sum<A>(m, [&](int64_t i) { return gs[s0 + i]; });
          sgx += lanes_sum<A>(m, [&](int64_t i) { return gs[s0 + i] * (xs[s0 + i] - mu); });
        }
        const double wc = w ? static_cast<double>(w[c0 + j]) : 1.0;
        sdy += wc * sg;
        sdyx += wc * sgx * static_cast<double>(rs);
        chan_g[n * C + c0 + j] = static_cast<A>(sg);
        chan_gx[n * C + c0 + j] = static_cast<A>(sgx * static_cast<double>(rs));
      }
      if (!dp) continue;
      const double r = rs;
      const double cb = -r * r * sdyx / static_cast<double>(L);  // multiplies (x − mean)
      const double cc = -r * sdy / static_cast<double>(L);
      A* o = ob.out(dp + t * L);
      for (int64_t j = 0; j < Cg; ++j) {
        const A ca = static_cast<A>((w ? static_cast<double>(w[c0 + j]) : 1.0) * r);
        const A cx = static_cast<A>(cb);
        const A c1 = static_cast<A>(cc);
        const A* xs = xr + j * S;
        const A* gs = gr + j * S;
        A* os = o + j * S;
        for (int64_t i = 0; i < S; ++i) os[i] = ca * gs[i] + cx * (xs[i] - mu) + c1;
      }
      ob.store(dp + t * L, L);
    }
  });
  for (int64_t c = 0; c < C; ++c) {
    double sw = 0, sb = 0;
    for (int64_t n = 0; n < N; ++n) {
      sw += chan_gx[n * C + c];
      sb += chan_g[n * C + c];
    }
    if (dw) dw[c] = static_cast<A>(sw);
    if (db) db[c] = static_cast<A>(sb);
  }
}

}  // namespace

void register_norm_kernels() {
  for (DType dt : {DType::f32, DType::f64, DType::f16, DType::bf16}) {
    visit_dtype(dt, [&]<typename T>() {
      if constexpr (std::is_floating_point_v<opmath_t<T>>) {
        register_kernel<kernels::BatchNormKernel>(OpId::batch_norm, DeviceType::cpu, dt, &batch_norm_kernel<T>);
        register_kernel<kernels::BatchNormBackwardKernel>(OpId::batch_norm_backward, DeviceType::cpu, dt,
                                                          &batch_norm_backward_kernel<T>);
        register_kernel<kernels::LayerNormKernel>(OpId::layer_norm, DeviceType::cpu, dt, &layer_norm_kernel<T>);
        register_kernel<kernels::LayerNormBackwardKernel>(OpId::layer_norm_backward, DeviceType::cpu, dt,
                                                          &layer_norm_backward_kernel<T>);
        register_kernel<kernels::GroupNormKernel>(OpId::group_norm, DeviceType::cpu, dt, &group_norm_kernel<T>);
        register_kernel<kernels::GroupNormBackwardKernel>(OpId::group_norm_backward, DeviceType::cpu, dt,
                                                          &group_norm_backward_kernel<T>);
      }
    });
  }
}

}  // namespace precis::cpu
