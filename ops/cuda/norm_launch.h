#pragma once
// The launch interface of the CUDA normalisation, softmax, class-index loss and var kernels
// (device code: ops/cuda/norm.cu, softmax.cu, loss.cu, var in reduce.cu; host side: the
// op-table entries in norm_entries.cpp, softmax_entries.cpp, loss_entries.cpp, reduce_entries.cpp).
// Raw pointers, dtypes and sizes only, like ops/cuda/cuda_kernels.h. Every operand is contiguous
// unless a stride is passed. "acc" below is the statistics type: f64 for f64 inputs, f32 for
// f32/f16/bf16. Scratch is device memory the host allocates from the caching allocator, in
// doubles, sized by the *_scratch_doubles functions.
//
// Deterministic, no atomics: every sum is taken in an order fixed by the shape (and by whether
// the rows are 4-element aligned, which selects vectorised loads): per-thread strided sums, a
// fixed warp/block tree, and per-chunk partials combined in chunk order by a second kernel.
#include <cstddef>
#include <cstdint>

#include "core/dtype.h"
#include "ops/cuda/cuda_kernels.h"

namespace precis::cuda {

/// How a long reduction of n elements is cut into chunks, one block each: chunks of `chunk`
/// elements (a multiple of 256), at most 1024 of them. Depends on n only.
struct NormChunks {
  int64_t chunk = 1;
  int64_t chunks = 1;
};
inline NormChunks norm_chunks(int64_t n) {
  constexpr int64_t kChunk = 256 * 32, kMaxChunks = 1024;
  NormChunks c;
  c.chunk = kChunk;
  c.chunks = n <= 0 ? 1 : (n + kChunk - 1) / kChunk;
  if (c.chunks > kMaxChunks) {
    const int64_t per = (n + kMaxChunks - 1) / kMaxChunks;
    c.chunk = (per + 255) / 256 * 256;
    c.chunks = (n + c.chunk - 1) / c.chunk;
  }
  return c;
}

/// Rows per chunk of the layer-norm parameter-gradient column sums over m rows (at most 512
/// chunks). Depends on m only.
inline NormChunks layer_norm_row_chunks(int64_t m) {
  constexpr int64_t kRows = 32, kMaxChunks = 512;
  NormChunks c;
  c.chunk = kRows;
  c.chunks = m <= 0 ? 1 : (m + kRows - 1) / kRows;
  if (c.chunks > kMaxChunks) {
    c.chunk = (m + kMaxChunks - 1) / kMaxChunks;
    c.chunks = (m + c.chunk - 1) / c.chunk;
  }
  return c;
}

inline int64_t batch_norm_scratch_doubles(int64_t C, int64_t N, int64_t S) {
  return C * norm_chunks(N * S).chunks * 2 + C * 3;
}
inline int64_t layer_norm_backward_scratch_doubles(int64_t M, int64_t D) {
  return layer_norm_row_chunks(M).chunks * 2 * D;
}
inline int64_t group_norm_backward_scratch_doubles(int64_t N, int64_t C, int64_t G) { return 2 * N * C + 2 * N * G; }

/// Batch norm forward (ops/contracts/kernels_norm.h: BatchNormKernel). x, out: (N, C, S), contiguous or,
/// with channels_last, both channels-last rows (element (n, c, s) at (n·S + s)·C + c); weight, bias,
/// running_mean, running_var: (C) acc or null; save_mean, save_rstd: (C) acc.
void launch_batch_norm(DType dtype, void* out, void* save_mean, void* save_rstd, const void* x, const void* weight,
                       const void* bias, void* running_mean, void* running_var, int64_t N, int64_t C, int64_t S,
                       bool training, double momentum, double eps, double* scratch, cudaStream_t stream,
                       bool channels_last);
/// Batch norm backward; dx, dweight, dbias null when not wanted; grad and dx in x's layout.
void launch_batch_norm_backward(DType dtype, void* dx, void* dweight, void* dbias, const void* grad, const void* x,
                                const void* weight, const void* save_mean, const void* save_rstd, int64_t N,
                                int64_t C, int64_t S, bool training, double* scratch, cudaStream_t stream,
                                bool channels_last);

/// Layer norm forward over M rows of D; group norm forward over N·G rows of C/G·S, the channel of
/// element j of row t being (t % G)·C/G + j / S. weight, bias: acc or null.
void launch_layer_norm(DType dtype, void* out, void* mean, void* rstd, const void* x, const void* weight,
                       const void* bias, int64_t M, int64_t D, double eps, cudaStream_t stream);
void launch_group_norm(DType dtype, void* out, void* mean, void* rstd, const void* x, const void* weight,
                       const void* bias, int64_t N, int64_t C, int64_t S, int64_t G, double eps, cudaStream_t stream);
void launch_layer_norm_backward(DType dtype, void* dx, void* dweight, void* dbias, const void* grad, const void* x,
                                const void* weight, const void* mean, const void* rstd, int64_t M, int64_t D,
                                double* scratch, cudaStream_t stream);
void launch_group_norm_backward(DType dtype, void* dx, void* dweight, void* dbias, const void* grad, const void* x,
                                const void* weight, const void* mean, const void* rstd, int64_t N, int64_t C,
                                int64_t S, int64_t G, double* scratch, cudaStream_t stream);

/// softmax / log_softmax along the middle dim of (outer, D, inner), and their fused backward.
void launch_softmax(DType dtype, bool log, void* y, const void* x, int64_t outer, int64_t D, int64_t inner,
                    cudaStream_t stream);
void launch_softmax_backward(DType dtype, bool log, void* dx, const void* grad, const void* y, int64_t outer,
                             int64_t D, int64_t inner, cudaStream_t stream);

/// Fused cross-entropy (ops/contracts/kernels_loss.h): x (M, C), target (M) i64, weight (C) acc or null;
/// loss_rows, weight_rows (M) and row_stats (M, 2) acc. scratch: 1 double.
void launch_cross_entropy(DType dtype, void* loss_rows, void* weight_rows, void* row_stats, const void* x,
                          const int64_t* target, const void* weight, int64_t M, int64_t C, int64_t ignore_index,
                          double label_smoothing, double* scratch, cudaStream_t stream);
/// grad_rows (acc) has stride grad_rows_stride (0 for one broadcast gradient). scratch: 1 double.
void launch_cross_entropy_backward(DType dtype, void* grad_x, const void* x, const void* row_stats,
                                   const int64_t* target, const void* weight, const void* grad_rows,
                                   int64_t grad_rows_stride, int64_t M, int64_t C, int64_t ignore_index,
                                   double label_smoothing, double* scratch, cudaStream_t stream);
/// NLL: x (M, C) with strides (s0, s1); a target outside [0, C) gives its row a NaN loss and weight
/// (the op's device assert reports it).
void launch_nll_loss(DType dtype, void* loss_rows, void* weight_rows, const void* x, int64_t s0, int64_t s1,
                     const int64_t* target, const void* weight, int64_t M, int64_t C, int64_t ignore_index,
                     cudaStream_t stream);

/// var over the reduced dims of `l` (ops/cuda/reduce.cu): two passes, the mean of each output
/// into `means` (num_out acc values, device), then Σ(x − mean)² / (red_numel − correction) into
/// out (x's dtype). scratch: reduce_scratch_bytes(l) bytes.
void launch_var(DType dtype, void* out, const void* x, void* means, void* scratch, const ReduceLaunch& l,
                int64_t correction);

}  // namespace precis::cuda
