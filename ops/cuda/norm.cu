// CUDA kernels of the normalisation family (batch_norm, layer_norm, group_norm), forward and
// backward. The per-element and per-row math is ops/math/norm_math.h, shared with the host tests.
// Statistics in the acc type (fp32 for f32/f16/bf16, f64 for f64), per-row finishes in double as
// on the CPU (ops/cpu/norm.cpp).
//
// Layouts: rows (layer norm, group norm) get one block per row, its threads reading the row
// coalesced, 4 elements per load when the row is 4-aligned; batch-norm channels are cut into
// chunks of one block each with partials combined in chunk order. Deterministic, no atomics
// (ops/cuda/norm_launch.h).
#include <cmath>

#include "ops/cuda/norm_launch.h"
#include "ops/cuda/row_blocks.cuh"
#include "ops/math/norm_math.h"

namespace precis::cuda {

namespace {

using namespace precis::kernels;
using std::exp;
using std::log;

// ---- layer norm / group norm forward ---------------------------------------------------------------

// One block per row of n elements: two-pass mean and variance, then the output. Group mode: row t
// is (sample, group) t of G groups, element j belongs to channel (t % G)·cg + j / s.
template <typename T, bool kGroup>
__global__ void row_norm_kernel(T* out, opmath_t<T>* mean, opmath_t<T>* rstd, const T* __restrict__ x,
                                const opmath_t<T>* w, const opmath_t<T>* b, int64_t rows, int64_t n, int64_t G,
                                int64_t cg, int64_t s, double eps, bool vec) {
  using A = opmath_t<T>;
  __shared__ double shared[32];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* xr = x + r * n;
    A acc = 0;
    row_for_each(xr, n, vec, [&](int64_t, A v) { acc += v; });
    const double sum = block_reduce(static_cast<double>(acc), SumOp{}, shared);
    // An empty row (no spatial elements) has mean 0 and variance 0, as on the CPU.
    const A mu = n > 0 ? static_cast<A>(sum / static_cast<double>(n)) : A(0);
    acc = 0;
    row_for_each(xr, n, vec, [&](int64_t, A v) { acc += (v - mu) * (v - mu); });
    const double q = block_reduce(static_cast<double>(acc), SumOp{}, shared);
    const A rs = norm_rstd<A>(n > 0 ? static_cast<double>(static_cast<A>(q / static_cast<double>(n))) : 0.0, eps);
    if (threadIdx.x == 0) {
      mean[r] = mu;
      rstd[r] = rs;
    }
    if constexpr (kGroup) {
      const int64_t c0 = (r % G) * cg;
      row_map<T>(out + r * n, xr, nullptr, n, vec, [&](int64_t j, A v, A) {
        const int64_t c = c0 + j / s;
        return norm_affine(v, mu, param_or(w, c, A(1)) * rs, param_or(b, c, A(0)));
      });
    } else {
      row_map<T>(out + r * n, xr, nullptr, n, vec, [&](int64_t j, A v, A) {
        return layer_norm_element(v, mu, rs, w != nullptr, param_or(w, j, A(1)), b != nullptr, param_or(b, j, A(0)));
      });
    }
  }
}

// ---- layer norm backward ------------------------------------------------------------------------

// dx per row: x̂ = (x − mean)·rstd, gw = g·w; dx = rstd·(gw − mean(gw) − x̂·mean(gw·x̂)).
template <typename T>
__global__ void layer_norm_dx_kernel(T* dx, const T* __restrict__ g, const T* __restrict__ x, const opmath_t<T>* w,
                                     const opmath_t<T>* mean, const opmath_t<T>* rstd, int64_t M, int64_t D,
                                     bool vec) {
  using A = opmath_t<T>;
  __shared__ A shared[32];
  for (int64_t r = blockIdx.x; r < M; r += gridDim.x) {
    const T* gr = g + r * D;
    const T* xr = x + r * D;
    const A mu = mean[r], rs = rstd[r];
    A s1 = 0, s2 = 0;
    if (vec) {
      const Vec4<T>* vg = reinterpret_cast<const Vec4<T>*>(gr);
      const Vec4<T>* vx = reinterpret_cast<const Vec4<T>*>(xr);
      for (int64_t j = threadIdx.x; j < D / 4; j += blockDim.x) {
        const Vec4<T> qg = vg[j], qx = vx[j];
#pragma unroll
        for (int k = 0; k < 4; ++k) {
          const A gw = load_op(qg.v[k]) * param_or(w, 4 * j + k, A(1));
          s1 += gw;
          s2 += gw * ((load_op(qx.v[k]) - mu) * rs);
        }
      }
    } else {
      for (int64_t j = threadIdx.x; j < D; j += blockDim.x) {
        const A gw = load_op(gr[j]) * param_or(w, j, A(1));
        s1 += gw;
        s2 += gw * ((load_op(xr[j]) - mu) * rs);
      }
    }
    s1 = block_reduce(s1, SumOp{}, shared);
    s2 = block_reduce(s2, SumOp{}, shared);
    const A m1 = s1 / static_cast<A>(D), m2 = s2 / static_cast<A>(D);
    row_map<T>(dx + r * D, gr, xr, D, vec, [&](int64_t j, A gv, A xv) {
      return layer_norm_grad_element(gv * param_or(w, j, A(1)), (xv - mu) * rs, rs, m1, m2);
    });
  }
}

// Column partials of dweight = Σ g·x̂ and dbias = Σ g: block (32 columns × 8 row lanes) per
// (column block, row chunk); partials (chunks, 2, D) in double, summed over the 8 lanes in order.
template <typename T>
__global__ void layer_norm_param_partial_kernel(double* partials, const T* __restrict__ g, const T* __restrict__ x,
                                                const opmath_t<T>* mean, const opmath_t<T>* rstd, int64_t M,
                                                int64_t D, int64_t rows_per_chunk) {
  using A = opmath_t<T>;
  __shared__ A sw[8][32], sb[8][32];
  const int tx = threadIdx.x % 32, ty = threadIdx.x / 32;
  const int64_t j = static_cast<int64_t>(blockIdx.x) * 32 + tx;
  const int64_t chunk = blockIdx.y;
  const int64_t r0 = chunk * rows_per_chunk;
  const int64_t r1 = r0 + rows_per_chunk < M ? r0 + rows_per_chunk : M;
  A pw = 0, pb = 0;
  if (j < D) {
    for (int64_t r = r0 + ty; r < r1; r += 8) {
      const A gv = load_op(g[r * D + j]);
      pw += gv * ((load_op(x[r * D + j]) - mean[r]) * rstd[r]);
      pb += gv;
    }
  }
  sw[ty][tx] = pw;
  sb[ty][tx] = pb;
  __syncthreads();
  if (ty == 0 && j < D) {
    double tw = 0, tb = 0;
    for (int k = 0; k < 8; ++k) {
      tw += static_cast<double>(sw[k][tx]);
      tb += static_cast<double>(sb[k][tx]);
    }
    partials[(chunk * 2) * D + j] = tw;
    partials[(chunk * 2 + 1) * D + j] = tb;
  }
}

template <typename A>
__global__ void layer_norm_param_finish_kernel(A* dw, A* db, const double* partials, int64_t D, int64_t chunks) {
  PRECIS_GRID_STRIDE_LOOP(j, D) {
    double tw = 0, tb = 0;
    for (int64_t c = 0; c < chunks; ++c) {
      tw += partials[(c * 2) * D + j];
      tb += partials[(c * 2 + 1) * D + j];
    }
    if (dw != nullptr) dw[j] = static_cast<A>(tw);
    if (db != nullptr) db[j] = static_cast<A>(tb);
  }
}

// ---- batch norm ------------------------------------------------------------------------------------

// Channel c's element u (of N·S) sits at (n·C + c)·S + s; with vec, u counts groups of 4 (S % 4 == 0).
__device__ __forceinline__ int64_t channel_offset(int64_t u, int64_t c, int64_t C, int64_t S) {
  const int64_t n = u / S;
  return (n * C + c) * S + (u - n * S);
}

// The chunked per-channel sums: each (channel c, chunk k) block stores its two sums, reduced over
// the block in double, at partials[2·(c·chunks + k)] and the next slot; the finishing kernels add
// a channel's chunks in chunk order (a fixed order: the result does not depend on scheduling).
template <typename A>
__device__ void store_pair_partials(double* partials, int64_t blk, A s1, A s2, double* shared) {
  const double t1 = block_reduce(static_cast<double>(s1), SumOp{}, shared);
  const double t2 = block_reduce(static_cast<double>(s2), SumOp{}, shared);
  if (threadIdx.x == 0) {
    partials[2 * blk] = t1;
    partials[2 * blk + 1] = t2;
  }
}

__device__ inline void sum_pair_partials(const double* partials, int64_t c, int64_t chunks, double* s1,
                                         double* s2) {
  for (int64_t k = 0; k < chunks; ++k) {
    *s1 += partials[2 * (c * chunks + k)];
    *s2 += partials[2 * (c * chunks + k) + 1];
  }
}

// Per (channel, chunk) block: the shifted sums Σ(x − k) and Σ(x − k)² (k: the channel's first
// element) of the chunk's elements, two doubles to partials[block].
template <typename T>
__global__ void bn_shifted_sums_kernel(double* partials, const T* __restrict__ x, int64_t N, int64_t C, int64_t S,
                                       NormChunks ch, bool vec) {
  using A = opmath_t<T>;
  __shared__ double shared[32];
  const int64_t M = N * S;
  for (int64_t blk = blockIdx.x; blk < C * ch.chunks; blk += gridDim.x) {
    const int64_t c = blk / ch.chunks, k = blk % ch.chunks;
    const int64_t e0 = k * ch.chunk, e1 = e0 + ch.chunk < M ? e0 + ch.chunk : M;
    const A shift = load_op(x[c * S]);
    A s1 = 0, s2 = 0;
    if (vec) {
      const int64_t S4 = S / 4;
      const Vec4<T>* xv = reinterpret_cast<const Vec4<T>*>(x);
      for (int64_t u = e0 / 4 + threadIdx.x; u < e1 / 4; u += blockDim.x) {
        const Vec4<T> q = xv[channel_offset(u, c, C, S4)];
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const A d = load_op(q.v[i]) - shift;
          s1 += d;
          s2 += d * d;
        }
      }
    } else {
      for (int64_t e = e0 + threadIdx.x; e < e1; e += blockDim.x) {
        const A d = load_op(x[channel_offset(e, c, C, S)]) - shift;
        s1 += d;
        s2 += d * d;
      }
    }
    store_pair_partials(partials, blk, s1, s2, shared);
  }
}

// The same two sums for channels-last rows (element (row e, channel c) at x[e·C + c], e < N·S),
// so that partials[2·(c·chunks + k)] hold what bn_shifted_sums_kernel / bn_grad_sums_kernel store
// and the finishing kernels are shared. One block per (tile of 32 channels, chunk): the 32 lanes
// of a warp read 32 neighbouring channels of one row (coalesced), the 8 warps take every 8th row
// of the chunk; each thread adds 32 rows in A before adding that into a double (the precision of
// the NCHW kernels' 32-element thread sums), and the 8 warps' doubles are added in warp order.
// kGrad: Σ g and Σ g·(x − mean_c); else the shifted Σ (x − k) and Σ (x − k)² (k = x[c], row 0).
constexpr int kClLanes = 32, kClWarps = 8;
inline int64_t bn_cl_tiles(int64_t C) { return (C + kClLanes - 1) / kClLanes; }
template <typename T, bool kGrad>
__global__ void bn_cl_sums_kernel(double* partials, const T* __restrict__ x, const T* __restrict__ g,
                                  const opmath_t<T>* mean, int64_t M, int64_t C, NormChunks ch) {
  using A = opmath_t<T>;
  __shared__ double sh1[kClWarps][kClLanes], sh2[kClWarps][kClLanes];
  const int lane = threadIdx.x % kClLanes, warp = threadIdx.x / kClLanes;
  const int64_t tiles = (C + kClLanes - 1) / kClLanes;
  for (int64_t blk = blockIdx.x; blk < tiles * ch.chunks; blk += gridDim.x) {
    const int64_t c = blk / ch.chunks * kClLanes + lane, k = blk % ch.chunks;
    const int64_t e0 = k * ch.chunk, e1 = e0 + ch.chunk < M ? e0 + ch.chunk : M;
    double d1 = 0, d2 = 0;
    if (c < C) {
      const A ref = kGrad ? mean[c] : load_op(x[c]);
      for (int64_t base = e0 + warp; base < e1; base += kClWarps * 32) {
        A s1 = 0, s2 = 0;
        const int64_t end = base + kClWarps * 32 < e1 ? base + kClWarps * 32 : e1;
        for (int64_t e = base; e < end; e += kClWarps) {
          const A xv = load_op(x[e * C + c]) - ref;
          if constexpr (kGrad) {
            const A gv = load_op(g[e * C + c]);
            s1 += gv;
            s2 += gv * xv;
          } else {
            s1 += xv;
            s2 += xv * xv;
          }
        }
        d1 += static_cast<double>(s1);
        d2 += static_cast<double>(s2);
      }
    }
    sh1[warp][lane] = d1;
    sh2[warp][lane] = d2;
    __syncthreads();
    if (warp == 0 && c < C) {
      double t1 = 0, t2 = 0;
      for (int w = 0; w < kClWarps; ++w) {
        t1 += sh1[w][lane];
        t2 += sh2[w][lane];
      }
      partials[2 * (c * ch.chunks + k)] = t1;
      partials[2 * (c * ch.chunks + k) + 1] = t2;
    }
    __syncthreads();
  }
}

// Per channel: the partials in chunk order → mean, rstd, running statistics.
template <typename T>
__global__ void bn_stats_finish_kernel(opmath_t<T>* save_mean, opmath_t<T>* save_rstd, opmath_t<T>* rm,
                                       opmath_t<T>* rv, const double* partials, const T* __restrict__ x, int64_t N,
                                       int64_t C, int64_t S, int64_t chunks, double momentum, double eps,
                                       bool channels_last) {
  using A = opmath_t<T>;
  const int64_t M = N * S;
  PRECIS_GRID_STRIDE_LOOP(c, C) {
    double s1 = 0, s2 = 0;
    sum_pair_partials(partials, c, chunks, &s1, &s2);
    // The channel's first element, the shift the sums were taken around.
    const double shift = M > 0 ? static_cast<double>(load_op(x[channels_last ? c : c * S])) : 0.0;
    const ShiftedMoments mo = moments_from_shifted_sums(shift, s1, s2, M);
    save_mean[c] = static_cast<A>(mo.mean);
    save_rstd[c] = norm_rstd<A>(mo.var, eps);
    if (rm != nullptr) rm[c] = static_cast<A>(running_update(static_cast<double>(rm[c]), mo.mean, momentum));
    if (rv != nullptr)
      rv[c] = static_cast<A>(running_update(static_cast<double>(rv[c]), unbiased_variance(mo.var, M), momentum));
  }
}

template <typename A>
__global__ void bn_eval_stats_kernel(A* save_mean, A* save_rstd, const A* rm, const A* rv, int64_t C, double eps) {
  PRECIS_GRID_STRIDE_LOOP(c, C) {
    save_mean[c] = rm[c];
    save_rstd[c] = norm_rstd<A>(static_cast<double>(rv[c]), eps);
  }
}

// The channel of element i (memory order) of an (N, C, S) tensor, contiguous or channels-last rows.
__device__ __forceinline__ int64_t bn_channel(int64_t i, int64_t C, int64_t S, bool channels_last) {
  return channels_last ? i % C : (i / S) % C;
}

// out = (x − mean_c)·(w_c·rstd_c) + b_c over (N, C, S); four elements per step when vec (S % 4 == 0
// in NCHW, C % 4 == 0 channels-last).
template <typename T>
__global__ void bn_normalise_kernel(T* out, const T* __restrict__ x, const opmath_t<T>* w, const opmath_t<T>* b,
                                    const opmath_t<T>* mean, const opmath_t<T>* rstd, int64_t total, int64_t C,
                                    int64_t S, bool vec, bool channels_last) {
  using A = opmath_t<T>;
  if (vec) {
    const Vec4<T>* xv = reinterpret_cast<const Vec4<T>*>(x);
    Vec4<T>* ov = reinterpret_cast<Vec4<T>*>(out);
    PRECIS_GRID_STRIDE_LOOP(u, total / 4) {
      const Vec4<T> q = xv[u];
      Vec4<T> r;
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const int64_t c = bn_channel(4 * u + k, C, S, channels_last);
        r.v[k] = store_op<T>(norm_affine(load_op(q.v[k]), mean[c], param_or(w, c, A(1)) * rstd[c], param_or(b, c, A(0))));
      }
      ov[u] = r;
    }
  } else {
    PRECIS_GRID_STRIDE_LOOP(i, total) {
      const int64_t c = bn_channel(i, C, S, channels_last);
      out[i] = store_op<T>(norm_affine(load_op(x[i]), mean[c], param_or(w, c, A(1)) * rstd[c], param_or(b, c, A(0))));
    }
  }
}

// Per (channel, chunk): Σ g and Σ g·(x − mean_c).
template <typename T>
__global__ void bn_grad_sums_kernel(double* partials, const T* __restrict__ g, const T* __restrict__ x,
                                    const opmath_t<T>* mean, int64_t N, int64_t C, int64_t S, NormChunks ch,
                                    bool vec) {
  using A = opmath_t<T>;
  __shared__ double shared[32];
  const int64_t M = N * S;
  for (int64_t blk = blockIdx.x; blk < C * ch.chunks; blk += gridDim.x) {
    const int64_t c = blk / ch.chunks, k = blk % ch.chunks;
    const int64_t e0 = k * ch.chunk, e1 = e0 + ch.chunk < M ? e0 + ch.chunk : M;
    const A mu = mean[c];
    A s1 = 0, s2 = 0;
    if (vec) {
      const int64_t S4 = S / 4;
      const Vec4<T>* xv = reinterpret_cast<const Vec4<T>*>(x);
      const Vec4<T>* gv = reinterpret_cast<const Vec4<T>*>(g);
      for (int64_t u = e0 / 4 + threadIdx.x; u < e1 / 4; u += blockDim.x) {
        const int64_t off = channel_offset(u, c, C, S4);
        const Vec4<T> qx = xv[off], qg = gv[off];
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const A gg = load_op(qg.v[i]);
          s1 += gg;
          s2 += gg * (load_op(qx.v[i]) - mu);
        }
      }
    } else {
      for (int64_t e = e0 + threadIdx.x; e < e1; e += blockDim.x) {
        const int64_t off = channel_offset(e, c, C, S);
        const A gg = load_op(g[off]);
        s1 += gg;
        s2 += gg * (load_op(x[off]) - mu);
      }
    }
    store_pair_partials(partials, blk, s1, s2, shared);
  }
}

// Per channel: dbias, dweight and the dx coefficients (a, b, c) into coefs (C, 3).
template <typename A>
__global__ void bn_grad_finish_kernel(A* dw, A* db, double* coefs, const double* partials, const A* w, const A* rstd,
                                      int64_t C, int64_t M, int64_t chunks, bool have_sums, bool training) {
  PRECIS_GRID_STRIDE_LOOP(c, C) {
    double sg = 0, sgx = 0;
    if (have_sums) sum_pair_partials(partials, c, chunks, &sg, &sgx);
    if (db != nullptr) db[c] = static_cast<A>(sg);
    if (dw != nullptr) dw[c] = static_cast<A>(sgx * static_cast<double>(rstd[c]));
    const NormGradCoefs k = batch_norm_grad_coefs(w != nullptr ? static_cast<double>(w[c]) : 1.0,
                                                  static_cast<double>(rstd[c]), sg, sgx, M, training);
    coefs[3 * c] = k.a;
    coefs[3 * c + 1] = k.b;
    coefs[3 * c + 2] = k.c;
  }
}

// dx = a_c·g + b_c·(x − mean_c) + c_c over (N, C, S) (eval: a_c·g); coefs (C, 3).
template <typename T>
__global__ void bn_dx_kernel(T* dx, const T* __restrict__ g, const T* __restrict__ x, const double* coefs,
                             const opmath_t<T>* mean, int64_t total, int64_t C, int64_t S, bool training,
                             bool channels_last) {
  using A = opmath_t<T>;
  PRECIS_GRID_STRIDE_LOOP(i, total) {
    const int64_t c = bn_channel(i, C, S, channels_last);
    const A ca = static_cast<A>(coefs[3 * c]);
    if (training) {
      const A cb = static_cast<A>(coefs[3 * c + 1]), c0 = static_cast<A>(coefs[3 * c + 2]);
      dx[i] = store_op<T>(ca * load_op(g[i]) + cb * (load_op(x[i]) - mean[c]) + c0);
    } else {
      dx[i] = store_op<T>(ca * load_op(g[i]));
    }
  }
}

// ---- group norm backward ------------------------------------------------------------------------------

// Per (n, c) block: Σ g and rstd·Σ g·(x − mean) over the channel's S elements, in double.
template <typename T>
__global__ void gn_channel_sums_kernel(double* chan_g, double* chan_gx, const T* __restrict__ g,
                                       const T* __restrict__ x, const opmath_t<T>* mean, const opmath_t<T>* rstd,
                                       int64_t N, int64_t C, int64_t S, int64_t G, bool vec) {
  using A = opmath_t<T>;
  __shared__ double shared[32];
  const int64_t cg = C / G;
  for (int64_t t = blockIdx.x; t < N * C; t += gridDim.x) {
    const int64_t n = t / C, c = t % C, grp = n * G + c / cg;
    const A mu = mean[grp];
    const T* gr = g + t * S;
    const T* xr = x + t * S;
    A s1 = 0, s2 = 0;
    if (vec) {
      const Vec4<T>* vg = reinterpret_cast<const Vec4<T>*>(gr);
      const Vec4<T>* vx = reinterpret_cast<const Vec4<T>*>(xr);
      for (int64_t j = threadIdx.x; j < S / 4; j += blockDim.x) {
        const Vec4<T> qg = vg[j], qx = vx[j];
#pragma unroll
        for (int k = 0; k < 4; ++k) {
          const A gg = load_op(qg.v[k]);
          s1 += gg;
          s2 += gg * (load_op(qx.v[k]) - mu);
        }
      }
    } else {
      for (int64_t j = threadIdx.x; j < S; j += blockDim.x) {
        const A gg = load_op(gr[j]);
        s1 += gg;
        s2 += gg * (load_op(xr[j]) - mu);
      }
    }
    const double t1 = block_reduce(static_cast<double>(s1), SumOp{}, shared);
    const double t2 = block_reduce(static_cast<double>(s2), SumOp{}, shared);
    if (threadIdx.x == 0) {
      chan_g[t] = t1;
      chan_gx[t] = t2 * static_cast<double>(rstd[grp]);
    }
  }
}

// Per (n, g): Σ dy and Σ dy·x̂ over its channels in order → the dx coefficients (b, c).
template <typename A>
__global__ void gn_group_coefs_kernel(double* gcoefs, const double* chan_g, const double* chan_gx, const A* w,
                                      const A* rstd, int64_t N, int64_t C, int64_t S, int64_t G) {
  const int64_t cg = C / G;
  PRECIS_GRID_STRIDE_LOOP(t, N * G) {
    const int64_t n = t / G, c0 = (t % G) * cg;
    double sdy = 0, sdyx = 0;
    for (int64_t j = 0; j < cg; ++j) {
      const double wc = w != nullptr ? static_cast<double>(w[c0 + j]) : 1.0;
      sdy += wc * chan_g[n * C + c0 + j];
      sdyx += wc * chan_gx[n * C + c0 + j];
    }
    const NormGradCoefs k = group_norm_grad_coefs(static_cast<double>(rstd[t]), sdy, sdyx, cg * S);
    gcoefs[2 * t] = k.b;
    gcoefs[2 * t + 1] = k.c;
  }
}

template <typename T>
__global__ void gn_dx_kernel(T* dx, const T* __restrict__ g, const T* __restrict__ x, const double* gcoefs,
                             const opmath_t<T>* w, const opmath_t<T>* mean, const opmath_t<T>* rstd, int64_t total,
                             int64_t C, int64_t S, int64_t G) {
  using A = opmath_t<T>;
  const int64_t cg = C / G;
  PRECIS_GRID_STRIDE_LOOP(i, total) {
    const int64_t nc = i / S, n = nc / C, c = nc % C, t = n * G + c / cg;
    const double r = static_cast<double>(rstd[t]);
    const A ca = static_cast<A>((w != nullptr ? static_cast<double>(w[c]) : 1.0) * r);
    const A cb = static_cast<A>(gcoefs[2 * t]), cc = static_cast<A>(gcoefs[2 * t + 1]);
    dx[i] = store_op<T>(ca * load_op(g[i]) + cb * (load_op(x[i]) - mean[t]) + cc);
  }
}

template <typename A>
__global__ void gn_param_kernel(A* dw, A* db, const double* chan_g, const double* chan_gx, int64_t N, int64_t C) {
  PRECIS_GRID_STRIDE_LOOP(c, C) {
    double sw = 0, sb = 0;
    for (int64_t n = 0; n < N; ++n) {
      sw += chan_gx[n * C + c];
      sb += chan_g[n * C + c];
    }
    if (dw != nullptr) dw[c] = static_cast<A>(sw);
    if (db != nullptr) db[c] = static_cast<A>(sb);
  }
}

}  // namespace

void launch_batch_norm(DType dtype, void* out, void* save_mean, void* save_rstd, const void* x, const void* weight,
                       const void* bias, void* running_mean, void* running_var, int64_t N, int64_t C, int64_t S,
                       bool training, double momentum, double eps, double* scratch, cudaStream_t stream,
                       bool channels_last) {
  if (C == 0) return;
  visit_floating(dtype, [&]<typename T>() {
    using A = opmath_t<T>;
    const T* px = static_cast<const T*>(x);
    A* sm = static_cast<A*>(save_mean);
    A* sr = static_cast<A*>(save_rstd);
    const int64_t M = N * S;
    if (training) {
      const NormChunks ch = norm_chunks(M);
      if (M == 0)
        PRECIS_CUDA_CHECK(cudaMemsetAsync(scratch, 0, sizeof(double) * 2 * C * ch.chunks, stream), "batch_norm");
      else if (channels_last)
        bn_cl_sums_kernel<T, false><<<grid_rows(bn_cl_tiles(C) * ch.chunks), kClLanes * kClWarps, 0, stream>>>(
            scratch, px, nullptr, nullptr, M, C, ch);
      else
        bn_shifted_sums_kernel<T><<<grid_rows(C * ch.chunks), kThreads, 0, stream>>>(
            scratch, px, N, C, S, ch, S % 4 == 0 && aligned4(x, sizeof(T)));
      bn_stats_finish_kernel<T><<<grid_for(C), kThreads, 0, stream>>>(
          sm, sr, static_cast<A*>(running_mean), static_cast<A*>(running_var), scratch, px, N, C, S, ch.chunks,
          momentum, eps, channels_last);
    } else {
      bn_eval_stats_kernel<A><<<grid_for(C), kThreads, 0, stream>>>(
          sm, sr, static_cast<const A*>(running_mean), static_cast<const A*>(running_var), C, eps);
    }
    if (M > 0) {
      const bool vec = (channels_last ? C : S) % 4 == 0 && aligned4(x, sizeof(T)) && aligned4(out, sizeof(T));
      const int64_t total = N * C * S;
      bn_normalise_kernel<T><<<grid_for(vec ? total / 4 : total), kThreads, 0, stream>>>(
          static_cast<T*>(out), px, static_cast<const A*>(weight), static_cast<const A*>(bias), sm, sr, total, C, S,
          vec, channels_last);
    }
  });
  check_launch("batch_norm", dtype);
}

void launch_batch_norm_backward(DType dtype, void* dx, void* dweight, void* dbias, const void* grad, const void* x,
                                const void* weight, const void* save_mean, const void* save_rstd, int64_t N,
                                int64_t C, int64_t S, bool training, double* scratch, cudaStream_t stream,
                                bool channels_last) {
  if (C == 0) return;
  visit_floating(dtype, [&]<typename T>() {
    using A = opmath_t<T>;
    const int64_t M = N * S;
    const NormChunks ch = norm_chunks(M);
    const bool need_sums = (training ? dx != nullptr || dweight || dbias : dweight || dbias) && M > 0;
    double* partials = scratch;
    double* coefs = scratch + 2 * C * ch.chunks;
    const T* px = static_cast<const T*>(x);
    const T* pg = static_cast<const T*>(grad);
    const A* mean = static_cast<const A*>(save_mean);
    if (need_sums && channels_last) {
      bn_cl_sums_kernel<T, true><<<grid_rows(bn_cl_tiles(C) * ch.chunks), kClLanes * kClWarps, 0, stream>>>(
          partials, px, pg, mean, M, C, ch);
    } else if (need_sums) {
      const bool vec = S % 4 == 0 && aligned4(x, sizeof(T)) && aligned4(grad, sizeof(T));
      bn_grad_sums_kernel<T><<<grid_rows(C * ch.chunks), kThreads, 0, stream>>>(partials, pg, px, mean, N, C, S, ch,
                                                                               vec);
    }
    bn_grad_finish_kernel<A><<<grid_for(C), kThreads, 0, stream>>>(
        static_cast<A*>(dweight), static_cast<A*>(dbias), coefs, partials, static_cast<const A*>(weight),
        static_cast<const A*>(save_rstd), C, M, ch.chunks, need_sums, training);
    if (dx != nullptr && M > 0) {
      const int64_t total = N * C * S;
      bn_dx_kernel<T><<<grid_for(total), kThreads, 0, stream>>>(static_cast<T*>(dx), pg, px, coefs, mean, total, C,
                                                                S, training, channels_last);
    }
  });
  check_launch("batch_norm_backward", dtype);
}

void launch_layer_norm(DType dtype, void* out, void* mean, void* rstd, const void* x, const void* weight,
                       const void* bias, int64_t M, int64_t D, double eps, cudaStream_t stream) {
  if (M == 0) return;
  visit_floating(dtype, [&]<typename T>() {
    using A = opmath_t<T>;
    const bool vec = D % 4 == 0 && aligned4(x, sizeof(T)) && aligned4(out, sizeof(T));
    row_norm_kernel<T, false><<<grid_rows(M), row_threads(vec ? D / 4 : D), 0, stream>>>(
        static_cast<T*>(out), static_cast<A*>(mean), static_cast<A*>(rstd), static_cast<const T*>(x),
        static_cast<const A*>(weight), static_cast<const A*>(bias), M, D, 1, 1, 1, eps, vec);
  });
  check_launch("layer_norm", dtype);
}

void launch_group_norm(DType dtype, void* out, void* mean, void* rstd, const void* x, const void* weight,
                       const void* bias, int64_t N, int64_t C, int64_t S, int64_t G, double eps, cudaStream_t stream) {
  if (N * G == 0) return;
  visit_floating(dtype, [&]<typename T>() {
    using A = opmath_t<T>;
    const int64_t L = C / G * S;
    const bool vec = L % 4 == 0 && aligned4(x, sizeof(T)) && aligned4(out, sizeof(T));
    row_norm_kernel<T, true><<<grid_rows(N * G), row_threads(vec ? L / 4 : L), 0, stream>>>(
        static_cast<T*>(out), static_cast<A*>(mean), static_cast<A*>(rstd), static_cast<const T*>(x),
        static_cast<const A*>(weight), static_cast<const A*>(bias), N * G, L, G, C / G, S > 0 ? S : 1, eps, vec);
  });
  check_launch("group_norm", dtype);
}

void launch_layer_norm_backward(DType dtype, void* dx, void* dweight, void* dbias, const void* grad, const void* x,
                                const void* weight, const void* mean, const void* rstd, int64_t M, int64_t D,
                                double* scratch, cudaStream_t stream) {
  visit_floating(dtype, [&]<typename T>() {
    using A = opmath_t<T>;
    const T* px = static_cast<const T*>(x);
    const T* pg = static_cast<const T*>(grad);
    const A* pm = static_cast<const A*>(mean);
    const A* pr = static_cast<const A*>(rstd);
    if (dx != nullptr && M > 0 && D > 0) {
      const bool vec = D % 4 == 0 && aligned4(x, sizeof(T)) && aligned4(grad, sizeof(T)) && aligned4(dx, sizeof(T));
      layer_norm_dx_kernel<T><<<grid_rows(M), row_threads(vec ? D / 4 : D), 0, stream>>>(
          static_cast<T*>(dx), pg, px, static_cast<const A*>(weight), pm, pr, M, D, vec);
    }
    if ((dweight != nullptr || dbias != nullptr) && D > 0) {
      const NormChunks ch = layer_norm_row_chunks(M);
      if (M > 0) {
        const dim3 grid(static_cast<unsigned int>((D + 31) / 32), static_cast<unsigned int>(ch.chunks));
        layer_norm_param_partial_kernel<T><<<grid, 256, 0, stream>>>(scratch, pg, px, pm, pr, M, D, ch.chunk);
      } else {
        PRECIS_CUDA_CHECK(cudaMemsetAsync(scratch, 0, sizeof(double) * 2 * D * ch.chunks, stream), "layer_norm");
      }
      layer_norm_param_finish_kernel<A><<<grid_for(D), kThreads, 0, stream>>>(
          static_cast<A*>(dweight), static_cast<A*>(dbias), scratch, D, ch.chunks);
    }
  });
  check_launch("layer_norm_backward", dtype);
}

void launch_group_norm_backward(DType dtype, void* dx, void* dweight, void* dbias, const void* grad, const void* x,
                                const void* weight, const void* mean, const void* rstd, int64_t N, int64_t C,
                                int64_t S, int64_t G, double* scratch, cudaStream_t stream) {
  if (N * C == 0) {
    if (C > 0) {
      // No samples: zero parameter gradients, as the CPU kernel's empty sums give.
      visit_floating(dtype, [&]<typename T>() {
        using A = opmath_t<T>;
        if (dweight) PRECIS_CUDA_CHECK(cudaMemsetAsync(dweight, 0, sizeof(A) * C, stream), "group_norm_backward");
        if (dbias) PRECIS_CUDA_CHECK(cudaMemsetAsync(dbias, 0, sizeof(A) * C, stream), "group_norm_backward");
      });
    }
    return;
  }
  visit_floating(dtype, [&]<typename T>() {
    using A = opmath_t<T>;
    double* chan_g = scratch;
    double* chan_gx = scratch + N * C;
    double* gcoefs = scratch + 2 * N * C;
    const T* px = static_cast<const T*>(x);
    const T* pg = static_cast<const T*>(grad);
    const A* pw = static_cast<const A*>(weight);
    const A* pm = static_cast<const A*>(mean);
    const A* pr = static_cast<const A*>(rstd);
    const bool vec = S % 4 == 0 && aligned4(x, sizeof(T)) && aligned4(grad, sizeof(T));
    gn_channel_sums_kernel<T><<<grid_rows(N * C), row_threads(vec ? S / 4 : S), 0, stream>>>(chan_g, chan_gx, pg, px,
                                                                                            pm, pr, N, C, S, G, vec);
    if (dx != nullptr && S > 0) {
      gn_group_coefs_kernel<A><<<grid_for(N * G), kThreads, 0, stream>>>(gcoefs, chan_g, chan_gx, pw, pr, N, C, S, G);
      const int64_t total = N * C * S;
      gn_dx_kernel<T><<<grid_for(total), kThreads, 0, stream>>>(static_cast<T*>(dx), pg, px, gcoefs, pw, pm, pr, total,
                                                                C, S, G);
    }
    if (dweight != nullptr || dbias != nullptr)
      gn_param_kernel<A><<<grid_for(C), kThreads, 0, stream>>>(static_cast<A*>(dweight), static_cast<A*>(dbias),
                                                               chan_g, chan_gx, N, C);
  });
  check_launch("group_norm_backward", dtype);
}

}  // namespace precis::cuda
