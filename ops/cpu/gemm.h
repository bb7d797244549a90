#pragma once
// The CPU GEMM back ends behind the matmul and linear kernels (ops/cpu/linalg.cpp): oneDNN's
// matmul primitive (ops/cpu/gemm_onednn.cpp) and Eigen (ops/cpu/gemm_eigen.cpp). Internal to
// ops/cpu; includes neither library's headers.
#include <cstdint>

#include "core/dtype.h"

namespace precis::cpu {

/// One operand of a batched GEMM: element (b, r, c) is at data[b·batch_stride + r·row_stride +
/// c·col_stride] (strides in elements). Always in one of the two layouts GEMM libraries take
/// without a copy (see normalize_matrix): row-major (col_stride == 1, row_stride >= cols) or
/// column-major (row_stride == 1, col_stride >= rows). batch_stride 0 broadcasts one matrix over
/// the batch.
struct GemmMatrix {
  const void* data = nullptr;
  int64_t batch_stride = 0;
  int64_t batch_stride2 = 0;  ///< the inner batch dim's stride when GemmArgs::batch2 > 1 (0 broadcasts)
  int64_t row_stride = 0;
  int64_t col_stride = 0;
  bool row_major() const { return col_stride == 1; }
};

/// c[b] = a[b]·b[b] (+ bias broadcast over rows) for b < batch.
/// a: (batch, m, k), b: (batch, k, n), c: (batch, m, n) contiguous, bias: (n) contiguous or null.
/// All of one dtype; m, n, k >= 1.
///
/// batch2 > 1 adds a second, inner batch dim (oneDNN only, onednn_gemm): a: (batch, batch2, m, k)
/// with strides (batch_stride, batch_stride2, ...), likewise b, and c: (batch, batch2, m, n)
/// contiguous. Attention's heads, split from the hidden dim as (B, L, H, D) → (B, H, L, D), have
/// batch dims that merge into no single stride; two let the GEMM read them where they lie.
struct GemmArgs {
  DType dtype = DType::f32;
  int64_t batch = 1, m = 0, k = 0, n = 0;
  int64_t batch2 = 1;
  GemmMatrix a, b;
  void* c = nullptr;
  const void* bias = nullptr;
  /// bf16 only (onednn_gemm): c is written in f32, the fp32 accumulator unrounded (for a caller that
  /// sums the products further, e.g. conv's col2im; ops/cpu/conv_gemm.cpp). No bias with it.
  bool c_f32 = false;
  /// c += a·b (+ bias) instead of c = a·b (+ bias): c's values are read and the product added to
  /// them in c's type (for a caller summing products over blocks of K, e.g. linear_cross_entropy's
  /// weight gradient over chunks of rows; ops/cpu/linear_cross_entropy.cpp).
  bool accumulate = false;
};

/// Rewrites the strides of a (rows, cols) matrix into the canonical form GemmMatrix documents
/// (strides of size-1 dims are free and are set to what a dense layout would have, which lets
/// oneDNN pick its fastest kernels). Returns false when the matrix is in neither layout (e.g. a
/// stride-2 slice along both dims, or an expanded dim): the caller copies it first.
bool normalize_matrix(int64_t rows, int64_t cols, int64_t& row_stride, int64_t& col_stride);

#ifdef PRECIS_HAS_ONEDNN
/// Runs the GEMM with oneDNN's matmul primitive (f32 and bf16, fp32 accumulation). Returns false,
/// computing nothing, when oneDNN has no fast implementation for this dtype/layout on this CPU;
/// the caller then falls back (Eigen, or bf16 converted to f32).
bool onednn_gemm(const GemmArgs& args);
#endif

/// Runs the GEMM with Eigen (batch2 == 1 only; f32 or f64, accumulating in the input type), split over the
/// intra-op pool by batch and row blocks.
void eigen_gemm(const GemmArgs& args);

}  // namespace precis::cpu
