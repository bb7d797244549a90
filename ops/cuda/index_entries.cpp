// Tensor unpacking and registration of the CUDA joining and indexing kernels: cat (copies into
// slabs of out), index_select and gather (index.cu's gather), index_add and scatter_add
// (deterministic, no atomics: index.cu). Indices arrive i64 and range-checked by ops/index.cpp;
// index_add's grouping checks them again on the host, and gather never reads outside x.
#include <string>
#include <vector>

#include "core/cuda/cuda_context.h"
#include "ops/cuda/cuda_backend.h"
#include "ops/cuda/index_pool_kernels.h"
#include "ops/detail/cat_by_copy.h"
#include "ops/math/index_math.h"
#include "ops/contracts/kernels.h"
#include "ops/op_table.h"
#include "tensor/factory.h"

namespace precis::cuda {

namespace {

void check_index(const char* op, const Tensor& out, const Tensor& index) {
  PRECIS_CHECK_DEVICE(index.device() == out.device() && out.device().is_cuda(), op,
                      ": index must be on out's CUDA device; got out ", out.describe(), ", index ", index.describe());
  PRECIS_CHECK_DTYPE(index.dtype() == DType::i64, op, ": the CUDA kernel expects an i64 index; got ", index.describe());
}

// t's strides with the one along dim set to 0, viewed with `sizes`.
Tensor zero_dim_stride(const Tensor& t, const Shape& sizes, int64_t dim) {
  Shape strides = t.strides();
  strides[dim] = 0;
  return detail::make_alias(t, sizes, strides, t.storage_offset());
}

// out = x.gather(dim, index) where index has out's shape (any strides, stride 0 allowed).
void run_gather(const char* op, const Tensor& out, const Tensor& x, int64_t dim, const Tensor& index) {
  check_index(op, out, index);
  PRECIS_CHECK_DTYPE(out.dtype() == x.dtype(), op, ": out ", out.describe(), " and x ", x.describe(),
                     " must have one dtype");
  if (out.numel() == 0) return;
  const Tensor xa = zero_dim_stride(x, out.sizes(), dim);
  const ElementwiseLaunch l = make_elementwise_launch(op, {&out, &index, &xa});
  DeviceGuard guard(out.device().index);
  launch_gather(out.element_size(), out.data_ptr(), static_cast<const int64_t*>(index.data_ptr()), xa.data_ptr(),
                x.strides()[dim], x.sizes()[dim], l);
}

void gather_kernel(const Tensor& out, const Tensor& x, int64_t dim, const Tensor& index) {
  run_gather("gather", out, x, dim, index);
}

// index: 1-D, broadcast over out's other dims.
void index_select_kernel(const Tensor& out, const Tensor& x, int64_t dim, const Tensor& index) {
  Shape strides(out.sizes().size(), 0);
  strides[dim] = index.strides().empty() ? 1 : index.strides()[0];
  run_gather("index_select", out, x, dim, detail::make_alias(index, out.sizes(), strides, index.storage_offset()));
}

// Device scratch of at least `bytes` (8-byte aligned) for the grouping sort, freed by the caller
// after its launches: the stream-ordered allocator reuses it only for work queued later.
Tensor scratch_of(size_t bytes, Device device) {
  return empty({static_cast<int64_t>((bytes + 7) / 8)}, {.dtype = DType::i64, .device = device});
}

// out (contiguous, holding x) += src's slices at rows index along dim. The index is grouped by
// row on the device (a stable sort of its positions, ops/cuda/index.cu), so the host never reads
// it back (embedding's backward runs this every step); each output element then adds its row's
// slices in position order. An index out of range lands in no row: ops/index.cpp's device-side
// check reports it at the next host read.
void index_add_kernel(const Tensor& out, int64_t dim, const Tensor& index, const Tensor& src) {
  check_index("index_add", out, index);
  PRECIS_CHECK_DTYPE(out.dtype() == src.dtype() && out.dtype() != DType::boolean,
                     "index_add: the CUDA kernel expects src of out's (non-bool) dtype; got out ", out.describe(),
                     ", src ", src.describe());
  PRECIS_INTERNAL_ASSERT(out.is_contiguous() && index.dim() == 1, "index_add: out ", out.describe(), ", index ",
                         index.describe());
  const int64_t k = index.numel(), rows = out.sizes()[dim];
  if (k == 0 || out.numel() == 0) return;
  const Tensor sa = zero_dim_stride(src, out.sizes(), dim);
  IndexAddLaunch a;
  a.l = make_elementwise_launch("index_add", {&out, &sa});
  a.rows = rows;
  for (size_t d = static_cast<size_t>(dim) + 1; d < out.sizes().size(); ++d) a.inner *= out.sizes()[d];
  a.src_dim_stride = src.strides()[dim];
  // Freed after the launches: the stream-ordered allocator reuses them only for work queued later.
  DeviceGuard guard(out.device().index);  // first: CUB sizes its sort's scratch for the current device
  const Tensor idx = index.contiguous();
  const Tensor groups = empty({rows + 1 + k}, {.dtype = DType::i64, .device = out.device()});
  const size_t scratch_bytes = group_index_scratch_bytes(k, rows);
  const Tensor scratch = scratch_of(scratch_bytes, out.device());
  launch_group_index_rows(static_cast<const int64_t*>(idx.data_ptr()), k, rows,
                          static_cast<int64_t*>(groups.data_ptr()), scratch.data_ptr(), scratch_bytes, a.l.stream);
  launch_index_add(out.dtype(), out.data_ptr(), sa.data_ptr(), static_cast<const int64_t*>(groups.data_ptr()), a);
}

// Columns up to this long are scanned whole by each output (no scratch, no sort); longer ones are
// grouped first (launch_scatter_add_grouped), so the work grows as the entries, not their square.
constexpr int64_t kScatterScanMax = 64;

// out (contiguous, holding x): out[index[pos] along dim] += src[pos] over index's positions.
void scatter_add_kernel(const Tensor& out, int64_t dim, const Tensor& index, const Tensor& src) {
  check_index("scatter_add", out, index);
  PRECIS_CHECK_DTYPE(out.dtype() == src.dtype() && out.dtype() != DType::boolean,
                     "scatter_add: the CUDA kernel expects src of out's (non-bool) dtype; got out ", out.describe(),
                     ", src ", src.describe());
  if (index.numel() == 0) return;
  Shape cols = index.sizes();
  cols[dim] = 1;
  const Tensor oa = detail::make_alias(out, cols, out.strides(), out.storage_offset());
  const Tensor ia = detail::make_alias(index, cols, index.strides(), index.storage_offset());
  const Tensor sa = detail::make_alias(src, cols, src.strides(), src.storage_offset());
  ScatterAddLaunch a;
  a.l = make_elementwise_launch("scatter_add", {&oa, &ia, &sa});
  a.rows = out.sizes()[dim];
  a.k = index.sizes()[dim];
  a.out_dim_stride = out.strides()[dim];
  a.index_dim_stride = index.strides()[dim];
  a.src_dim_stride = src.strides()[dim];
  DeviceGuard guard(out.device().index);
  if (a.k <= kScatterScanMax) {
    launch_scatter_add(out.dtype(), oa.data_ptr(), static_cast<const int64_t*>(ia.data_ptr()), sa.data_ptr(), a);
    return;
  }
  // Long columns (a gather's backward along a long dim): group the entries by output first.
  // Freed after the launches: the stream-ordered allocator reuses them only for work queued later.
  const int64_t entries = a.l.numel * a.k, outputs = a.l.numel * a.rows;
  const Tensor flat = empty({entries}, {.dtype = DType::i64, .device = out.device()});
  const Tensor groups = empty({outputs + 1 + entries}, {.dtype = DType::i64, .device = out.device()});
  const size_t scratch_bytes = scatter_add_grouped_scratch_bytes(a);
  const Tensor scratch = scratch_of(scratch_bytes, out.device());
  launch_scatter_add_grouped(out.dtype(), oa.data_ptr(), static_cast<const int64_t*>(ia.data_ptr()), sa.data_ptr(), a,
                             static_cast<int64_t*>(flat.data_ptr()), static_cast<int64_t*>(groups.data_ptr()),
                             scratch.data_ptr(), scratch_bytes);
}

}  // namespace

void register_index_kernels() {
  for (int i = 0; i < kNumDTypes; ++i) {
    const DType dt = static_cast<DType>(i);
    register_kernel<kernels::CatKernel>(OpId::cat, DeviceType::cuda, dt, &kernels::cat_by_copy);
    if (is_float8(dt)) continue;  // fp8 joins by copy only, as on the CPU
    register_kernel<kernels::IndexSelectKernel>(OpId::index_select, DeviceType::cuda, dt, &index_select_kernel);
    register_kernel<kernels::GatherKernel>(OpId::gather, DeviceType::cuda, dt, &gather_kernel);
    if (dt == DType::boolean) continue;  // nothing to add
    register_kernel<kernels::IndexAddKernel>(OpId::index_add, DeviceType::cuda, dt, &index_add_kernel);
    register_kernel<kernels::ScatterAddKernel>(OpId::scatter_add, DeviceType::cuda, dt, &scatter_add_kernel);
  }
}

}  // namespace precis::cuda
