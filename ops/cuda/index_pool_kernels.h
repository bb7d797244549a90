#pragma once
// The launch interface of the CUDA indexing, pooling and dropout kernels (ops/cuda/index.cu,
// pool.cu, dropout.cu) for their host code (index_entries.cpp, pool_entries.cpp,
// dropout_entries.cpp): raw pointers and plain structs, as ops/cuda/cuda_kernels.h. Kept in its
// own header so that the families added in parallel do not all edit cuda_kernels.h.
#include <cstddef>
#include <cstdint>

#include "ops/cuda/cuda_kernels.h"
#include "ops/math/pool_math.h"

namespace precis::cuda {

// ---- indexing (ops/cuda/index.cu) ----------------------------------------------------------------
/// gather / index_select: out[i] = x[off_x(i) + index[off_index(i)] · dim_stride] for every element
/// of out; `l` describes operands (out, index, x) over out's shape, x's stride along the indexed dim
/// set to 0. Moves element bits (one kernel per element size). An index outside [0, dim_size) (the
/// host checks them first) writes zero bits instead of reading out of bounds.
void launch_gather(size_t elem_size, void* out, const int64_t* index, const void* x, int64_t dim_stride,
                   int64_t dim_size, const ElementwiseLaunch& l);

/// index_add's grouping of a contiguous 1-D index of length k into `groups` (rows + 1 offsets,
/// then k positions, as ops/math/index_math.h describes them) on the device, with no host read: a stable
/// radix sort of the positions by row (kernels::group_key; an index outside [0, rows) lands in no
/// row) and a binary search per row (kernels::group_offset). scratch: device memory of at least
/// group_index_scratch_bytes(k, rows). Queued on `stream`.
size_t group_index_scratch_bytes(int64_t k, int64_t rows);
void launch_group_index_rows(const int64_t* index, int64_t k, int64_t rows, int64_t* groups, void* scratch,
                             size_t scratch_bytes, cudaStream_t stream);

/// index_add over a contiguous out: `l` describes operands (out, src) over out's shape with src's
/// stride along the indexed dim set to 0; out's element t lies in row (t / inner) % rows of the
/// indexed dim. groups: rows + 1 offsets then the positions (launch_group_index_rows).
struct IndexAddLaunch {
  ElementwiseLaunch l;
  int64_t inner = 1, rows = 0, src_dim_stride = 0;
};
void launch_index_add(DType dtype, void* out, const void* src, const int64_t* groups, const IndexAddLaunch& a);

/// scatter_add: `l` describes operands (out, index, src) over index's shape with the indexed dim
/// set to 1 (the columns); each column has `rows` outputs (stride out_dim_stride) and k index and
/// src entries (strides index_dim_stride, src_dim_stride). One thread per output element.
struct ScatterAddLaunch {
  ElementwiseLaunch l;
  int64_t rows = 0, k = 0, out_dim_stride = 0, index_dim_stride = 0, src_dim_stride = 0;
};
void launch_scatter_add(DType dtype, void* out, const int64_t* index, const void* src, const ScatterAddLaunch& a);
/// scatter_add for long columns, where launch_scatter_add's scan of the whole column per output
/// (columns · rows · k reads) would be quadratic: each entry's output is found once
/// (kernels::scatter_flat_index), the entries are grouped by output as index_add's index is, and
/// each output adds its group in increasing position — the scan's order and result, bit for bit.
/// Device buffers: flat (columns · k i64), groups (columns · rows + 1 + columns · k i64), scratch
/// of scatter_add_grouped_scratch_bytes(a) bytes.
size_t scatter_add_grouped_scratch_bytes(const ScatterAddLaunch& a);
void launch_scatter_add_grouped(DType dtype, void* out, const int64_t* index, const void* src,
                                const ScatterAddLaunch& a, int64_t* flat, int64_t* groups, void* scratch,
                                size_t scratch_bytes);

// ---- pooling (ops/cuda/pool.cu) ------------------------------------------------------------------
enum class PoolOp : uint8_t { max, max_backward, avg, avg_backward, adaptive_avg, adaptive_avg_backward };

/// One pooling pass over `planes` contiguous (N·C) planes of geometry g, floating dtypes. Forward
/// passes: out (planes, ho, wo) from in (planes, h, w), out_indices (max only; may be null).
/// Backward passes: out = grad_x (planes, h, w) from in = grad_out (planes, ho, wo), in_indices
/// (max_backward only). One thread per output element; backward gathers (no atomics).
void launch_pool2d(PoolOp op, DType dtype, void* out, int64_t* out_indices, const void* in, const int64_t* in_indices,
                   int64_t planes, const kernels::PoolGeometry& g, cudaStream_t stream);

// ---- dropout (ops/cuda/dropout.cu) ---------------------------------------------------------------
/// out = keep ? x · scale : 0 with the mask of ops/math/dropout_math.h (the CPU's): `l` describes
/// (out, x) with out contiguous, so out's offset is the element's row-major index. The stream
/// offset is `offset` plus, when offset_base is set (a kernel captured in a CUDA graph), the device
/// value there when the kernel runs.
void launch_dropout(DType dtype, void* out, const void* x, uint32_t threshold, double scale, uint64_t seed,
                    uint64_t offset, const uint64_t* offset_base, const ElementwiseLaunch& l);

}  // namespace precis::cuda
