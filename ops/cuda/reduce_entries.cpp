// Tensor unpacking and registration of the CUDA reductions: sum, mean (ReduceKernel over any dims),
// var (VarKernel, two passes) and max along a dim (MaxDimKernel; max() over all elements flattens
// first). The device code is in reduce.cu.
#include "core/cuda/cuda_context.h"
#include "ops/cuda/cuda_backend.h"
#include "ops/cuda/norm_launch.h"
#include "ops/contracts/kernels.h"
#include "ops/op_table.h"
#include "tensor/factory.h"

namespace precis::cuda {

namespace {

// The dims of x with select[d] set, in order, coalesced (size-1 dims dropped; dim d merged into
// the previous kept dim p when stride[p] == stride[d] * size[d]) into operand 0 of c. False when
// more than kMaxKernelDims dims remain.
bool coalesce_into(OffsetCalc& c, const Tensor& x, const std::vector<bool>& select) {
  std::vector<int64_t> sizes, strides;
  for (int64_t d = 0; d < x.dim(); ++d) {
    const int64_t size = x.sizes()[d], stride = x.strides()[d];
    if (!select[d] || size == 1) continue;
    if (!sizes.empty() && strides.back() == stride * size) {
      sizes.back() *= size;
      strides.back() = stride;
    } else {
      sizes.push_back(size);
      strides.push_back(stride);
    }
  }
  if (sizes.size() > static_cast<size_t>(kMaxKernelDims)) return false;
  c = OffsetCalc{};
  c.ndim = static_cast<int>(sizes.size());
  for (size_t d = 0; d < sizes.size(); ++d) {
    c.sizes[d] = sizes[d];
    c.strides[0][d] = strides[d];
  }
  return true;
}

void check_operands(const char* op, std::initializer_list<const Tensor*> ts) {
  const Device dev = (*ts.begin())->device();
  for (const Tensor* t : ts) {
    if (t->device() == dev && dev.is_cuda()) continue;
    std::string all;
    for (const Tensor* u : ts) all += (all.empty() ? "" : ", ") + u->describe();
    throw DeviceError(precis::detail::str_cat(op, ": every operand must be on the same CUDA device; got ", all));
  }
}

// Plans the reduction of x over `dims` into the contiguous keepdim-shaped out: fills l (geometry,
// stream) and returns the tensor to read (x, or a contiguous copy when its dims do not coalesce
// into kMaxKernelDims); an undefined tensor when there is nothing to do.
Tensor plan_reduce(ReduceLaunch& l, const char* name, const Tensor& out, const Tensor& x_in,
                   const std::vector<int64_t>& dims) {
  Tensor x = x_in;
  std::vector<bool> reduced(static_cast<size_t>(x.dim()), false);
  for (int64_t d : dims) reduced[static_cast<size_t>(d)] = true;
  std::vector<bool> kept(reduced.size());
  for (size_t d = 0; d < reduced.size(); ++d) kept[d] = !reduced[d];

  l.red_numel = 1;
  for (int64_t d : dims) l.red_numel *= x.sizes()[d];
  l.num_out = out.numel();
  PRECIS_INTERNAL_ASSERT(out.is_contiguous() && l.num_out * l.red_numel == x.numel(), name, ": out ", out.describe(),
                         " is not the contiguous keepdim result of ", x.describe());
  if (l.num_out == 0) return Tensor();
  if (!coalesce_into(l.kept, x, kept) || !coalesce_into(l.red, x, reduced)) {
    x = x.contiguous();  // fewer runs to describe; still too many is an error below
    PRECIS_CHECK_T(NotImplementedError, coalesce_into(l.kept, x, kept) && coalesce_into(l.red, x, reduced), name,
                   ": the CUDA reductions handle at most ", kMaxKernelDims, " separate kept and reduced dims; ",
                   x_in.describe(), " reduced over ", dims.size(), " dims needs more. Reshape the input first");
  }
  reduce_geometry(l);
  l.stream = device_stream(x.device().index);
  return x;
}

// Device scratch of at least `bytes` bytes (undefined for 0). Freed by the caller right after the
// launch: the stream-ordered allocator hands the block out only to work queued after the kernels.
Tensor scratch_bytes(size_t bytes, Device device) {
  if (bytes == 0) return Tensor();
  return empty({static_cast<int64_t>((bytes + 7) / 8)}, {.dtype = DType::i64, .device = device});
}

// Reduces x over `dims` into the contiguous keepdim-shaped out (and indices for max).
void run_reduce(ReduceOp op, const char* name, const Tensor& out, const Tensor* indices, const Tensor& x_in,
                const std::vector<int64_t>& dims) {
  DeviceGuard guard(x_in.device().index);
  ReduceLaunch l;
  const Tensor x = plan_reduce(l, name, out, x_in, dims);
  if (!x.defined()) return;
  const size_t bytes = reduce_scratch_bytes(l);
  const Tensor scratch = scratch_bytes(bytes, x.device());
  launch_reduce(op, x.dtype(), out.data_ptr(), indices ? static_cast<int64_t*>(indices->data_ptr()) : nullptr,
                x.data_ptr(), bytes > 0 ? scratch.data_ptr() : nullptr, l);
}

// var: out (x's dtype, keepdim shape, contiguous) = Σ (x − mean)² / (N − correction), two passes.
void var_kernel(const Tensor& out, const Tensor& x_in, const std::vector<int64_t>& dims, int64_t correction) {
  check_operands("var", {&out, &x_in});
  PRECIS_CHECK_DTYPE(out.dtype() == x_in.dtype() && is_floating(x_in.dtype()),
                     "var: CUDA kernel expects floating x and out of its dtype; got out ", out.describe(), ", x ",
                     x_in.describe());
  DeviceGuard guard(x_in.device().index);
  ReduceLaunch l;
  const Tensor x = plan_reduce(l, "var", out, x_in, dims);
  if (!x.defined()) return;
  const DType acc = x.dtype() == DType::f64 ? DType::f64 : DType::f32;
  const Tensor means = empty({l.num_out}, {.dtype = acc, .device = x.device()});
  const size_t bytes = reduce_scratch_bytes(l);
  const Tensor scratch = scratch_bytes(bytes, x.device());
  launch_var(x.dtype(), out.data_ptr(), x.data_ptr(), means.data_ptr(), bytes > 0 ? scratch.data_ptr() : nullptr, l,
             correction);
}

// out: x's shape with `dims` set to 1, contiguous; i64 for integer/bool x, x's dtype otherwise.
void sum_kernel(const Tensor& out, const Tensor& x, const std::vector<int64_t>& dims) {
  check_operands("sum", {&out, &x});
  const DType want = is_floating(x.dtype()) ? x.dtype() : DType::i64;
  PRECIS_CHECK_DTYPE(out.dtype() == want, "sum: CUDA kernel expects out of dtype ", dtype_name(want), " for x ",
                     x.describe(), "; got out ", out.describe());
  run_reduce(ReduceOp::sum, "sum", out, nullptr, x, dims);
}

void mean_kernel(const Tensor& out, const Tensor& x, const std::vector<int64_t>& dims) {
  check_operands("mean", {&out, &x});
  PRECIS_CHECK_DTYPE(out.dtype() == x.dtype() && is_floating(x.dtype()), "mean: CUDA kernel expects floating x and out "
                     "of its dtype; got out ", out.describe(), ", x ", x.describe());
  run_reduce(ReduceOp::mean, "mean", out, nullptr, x, dims);
}

// values (x's dtype), indices (i64): x's shape with dim set to 1, contiguous.
void max_dim_kernel(const Tensor& values, const Tensor& indices, const Tensor& x, int64_t dim) {
  check_operands("max", {&values, &indices, &x});
  PRECIS_CHECK_DTYPE(values.dtype() == x.dtype() && indices.dtype() == DType::i64,
                     "max: CUDA kernel expects values of x's dtype and i64 indices; got values ", values.describe(),
                     ", indices ", indices.describe(), ", x ", x.describe());
  PRECIS_INTERNAL_ASSERT(indices.is_contiguous() && indices.sizes() == values.sizes(), "max: indices ",
                         indices.describe(), " do not match values ", values.describe());
  run_reduce(ReduceOp::max, "max", values, &indices, x, {dim});
}

}  // namespace

void register_reduce_kernels() {
  for (int i = 0; i < kNumDTypes; ++i) {
    const DType dt = static_cast<DType>(i);
    if (is_float8(dt)) continue;  // a storage format: no reductions
    register_kernel<kernels::ReduceKernel>(OpId::sum, DeviceType::cuda, dt, &sum_kernel);
    register_kernel<kernels::MaxDimKernel>(OpId::max, DeviceType::cuda, dt, &max_dim_kernel);
    if (is_floating(dt)) {
      register_kernel<kernels::ReduceKernel>(OpId::mean, DeviceType::cuda, dt, &mean_kernel);
      register_kernel<kernels::VarKernel>(OpId::var, DeviceType::cuda, dt, &var_kernel);
    }
  }
}

}  // namespace precis::cuda
