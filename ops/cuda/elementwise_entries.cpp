// Tensor unpacking and registration of the CUDA element-wise kernels (copy, fill, binary ops,
// where, masked_fill). The device code is in copy.cu and binary.cu.
#include <algorithm>
#include <cstring>
#include <vector>

#include "core/cuda/cuda_context.h"
#include "core/float8.h"
#include "ops/cuda/cuda_backend.h"
#include "ops/contracts/kernels.h"
#include "ops/op_table.h"

#include <cuda_runtime_api.h>

#include "core/cuda/cuda_check.h"

namespace precis::cuda {

namespace {

// Whether every operand has operand 0's strides (over the dims of more than one element) and
// operand 0 is dense (no gaps, no overlap) in its memory order.
bool same_dense_layout(std::initializer_list<const Tensor*> operands) {
  const Tensor& out = **operands.begin();
  const Shape& sizes = out.sizes();
  for (const Tensor* t : operands)
    for (size_t d = 0; d < sizes.size(); ++d)
      if (sizes[d] > 1 && t->strides()[d] != out.strides()[d]) return false;
  std::vector<size_t> dims;
  for (size_t d = 0; d < sizes.size(); ++d)
    if (sizes[d] > 1) dims.push_back(d);
  std::sort(dims.begin(), dims.end(), [&](size_t a, size_t b) { return out.strides()[a] < out.strides()[b]; });
  int64_t expected = 1;
  for (size_t d : dims) {
    if (out.strides()[d] != expected) return false;
    expected *= sizes[d];
  }
  return true;
}

// out's dims from outermost to innermost in memory; row-major order when out has a zero or
// negative stride (no single memory order). Ties keep their order.
std::vector<size_t> output_order(const Tensor& out) {
  std::vector<size_t> order(out.sizes().size());
  for (size_t d = 0; d < order.size(); ++d) order[d] = d;
  for (size_t d = 0; d < order.size(); ++d)
    if (out.sizes()[d] > 1 && out.strides()[d] <= 0) return order;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return out.strides()[a] > out.strides()[b]; });
  return order;
}

}  // namespace

ElementwiseLaunch make_elementwise_launch(const char* op, std::initializer_list<const Tensor*> operands) {
  PRECIS_INTERNAL_ASSERT(operands.size() >= 1 && operands.size() <= static_cast<size_t>(kMaxOperands), op,
                         ": bad operand count");
  const Tensor& out = **operands.begin();
  const Device dev = out.device();
  bool contiguous = true;
  for (const Tensor* t : operands) {
    if (t->device() != dev || !dev.is_cuda()) {
      std::string all;
      for (const Tensor* u : operands) all += (all.empty() ? "" : ", ") + u->describe();
      throw DeviceError(precis::detail::str_cat(op, ": every operand must be on the same CUDA device; got ", all));
    }
    PRECIS_INTERNAL_ASSERT(t->sizes() == out.sizes(), op, ": operand ", t->describe(), " not expanded to ",
                           out.describe());
    contiguous = contiguous && t->is_contiguous();
  }

  ElementwiseLaunch l;
  l.numel = out.numel();
  // Operands that all share one dense layout (an output given its inputs' transposed or
  // channels-last layout, ops/detail/broadcast.h empty_elementwise) are flat arrays in the same order:
  // element i of each sits at offset i from its data pointer.
  l.contiguous = contiguous || same_dense_layout(operands);
  l.stream = device_stream(dev.index);
  if (l.contiguous || l.numel == 0) return l;

  // Dims in the output's memory order (outermost first), so a permuted dense output is written
  // in order; then coalesce from the outermost dim inwards: dim d merges into the previous kept
  // dim p when stride[p] == stride[d] * size[d] for every operand.
  const int nops = static_cast<int>(operands.size());
  const std::vector<size_t> order = output_order(out);
  Shape sizes(order.size());
  std::vector<Shape> op_strides;
  for (size_t k = 0; k < order.size(); ++k) sizes[k] = out.sizes()[order[k]];
  for (const Tensor* t : operands) {
    Shape st(order.size());
    for (size_t k = 0; k < order.size(); ++k) st[k] = t->strides()[order[k]];
    op_strides.push_back(std::move(st));
  }
  std::vector<int64_t> csizes;
  std::vector<std::vector<int64_t>> cstrides(static_cast<size_t>(nops));
  for (size_t d = 0; d < sizes.size(); ++d) {
    if (sizes[d] == 1) continue;
    bool merge = !csizes.empty();
    int k = 0;
    for (k = 0; k < nops; ++k) merge = merge && cstrides[k].back() == op_strides[k][d] * sizes[d];
    if (merge) {
      csizes.back() *= sizes[d];
      for (k = 0; k < nops; ++k) cstrides[k].back() = op_strides[k][d];
    } else {
      csizes.push_back(sizes[d]);
      for (k = 0; k < nops; ++k) cstrides[k].push_back(op_strides[k][d]);
    }
  }
  if (csizes.empty()) {  // every dim has size 1
    csizes.push_back(1);
    for (auto& s : cstrides) s.push_back(0);
  }
  if (csizes.size() > static_cast<size_t>(kMaxKernelDims)) {
    throw NotImplementedError(precis::detail::str_cat(op, ": the CUDA element-wise kernels handle at most ", kMaxKernelDims,
                                              " non-coalescable dims; ", out.describe(),
                                              " needs ", csizes.size(), ". Make the operands contiguous first"));
  }
  l.calc.ndim = static_cast<int>(csizes.size());
  for (size_t d = 0; d < csizes.size(); ++d) {
    l.calc.sizes[d] = csizes[d];
    for (int k = 0; k < nops; ++k) l.calc.strides[k][d] = cstrides[k][d];
  }
  return l;
}

namespace {

// dst (any strides) = src converted to dst's dtype; src expanded to dst's shape.
void copy_kernel(const Tensor& dst, const Tensor& src) {
  ElementwiseLaunch l = make_elementwise_launch("copy", {&dst, &src});
  if (l.numel == 0) return;
  DeviceGuard guard(dst.device().index);
  if (l.contiguous && dst.dtype() == src.dtype()) {
    PRECIS_CUDA_CHECK(cudaMemcpyAsync(dst.data_ptr(), src.data_ptr(), static_cast<size_t>(l.numel) * dst.element_size(),
                                      cudaMemcpyDeviceToDevice, l.stream),
                      "copy ", src.describe(), " -> ", dst.describe());
    return;
  }
  launch_copy(dst.dtype(), dst.data_ptr(), src.dtype(), src.data_ptr(), l);
}

// The element bits of `value` in dtype t, converted exactly as the CPU fill does.
uint64_t fill_bits(DType t, Scalar value) {
  uint64_t bits = 0;
  auto put = [&bits](auto x) { std::memcpy(&bits, &x, sizeof(x)); };
  switch (t) {
    case DType::f32: put(static_cast<float>(value.to_double())); break;
    case DType::f64: put(value.to_double()); break;
    case DType::f16: put(Half(static_cast<float>(value.to_double())).bits); break;
    case DType::bf16: put(BFloat16(static_cast<float>(value.to_double())).bits); break;
    case DType::i64: put(value.to_int64()); break;
    case DType::i32: put(static_cast<int32_t>(value.to_int64())); break;
    case DType::boolean: put(static_cast<uint8_t>(value.to_bool() ? 1 : 0)); break;
    case DType::f8_e4m3: put(Float8E4M3(static_cast<float>(value.to_double())).bits); break;
    case DType::f8_e5m2: put(Float8E5M2(static_cast<float>(value.to_double())).bits); break;
  }
  return bits;
}

void fill_kernel(const Tensor& dst, Scalar value) {
  ElementwiseLaunch l = make_elementwise_launch("fill", {&dst});
  if (l.numel == 0) return;
  DeviceGuard guard(dst.device().index);
  launch_fill(dst.element_size(), dst.data_ptr(), fill_bits(dst.dtype(), value), l);
}

// out = cond ? a : b; cond (bool), a, b expanded to out's shape; out contiguous, a's dtype.
void where_kernel(const Tensor& out, const Tensor& cond, const Tensor& a, const Tensor& b) {
  PRECIS_CHECK_DTYPE(cond.dtype() == DType::boolean && a.dtype() == b.dtype() && out.dtype() == a.dtype(),
                     "where: CUDA kernel expects a bool cond and a, b, out of one dtype; got out ", out.describe(),
                     ", cond ", cond.describe(), ", a ", a.describe(), ", b ", b.describe());
  ElementwiseLaunch l = make_elementwise_launch("where", {&out, &cond, &a, &b});
  if (l.numel == 0) return;
  DeviceGuard guard(out.device().index);
  launch_where(out.element_size(), out.data_ptr(), static_cast<const bool*>(cond.data_ptr()), a.data_ptr(),
               b.data_ptr(), l);
}

// out = mask ? value : x; x and mask (bool) expanded to out's shape; out contiguous, x's dtype.
void masked_fill_kernel(const Tensor& out, const Tensor& x, const Tensor& mask, Scalar value) {
  PRECIS_CHECK_DTYPE(mask.dtype() == DType::boolean && out.dtype() == x.dtype(),
                     "masked_fill: CUDA kernel expects a bool mask and out of x's dtype; got out ", out.describe(),
                     ", x ", x.describe(), ", mask ", mask.describe());
  ElementwiseLaunch l = make_elementwise_launch("masked_fill", {&out, &x, &mask});
  if (l.numel == 0) return;
  DeviceGuard guard(out.device().index);
  launch_masked_fill(out.element_size(), out.data_ptr(), x.data_ptr(), static_cast<const bool*>(mask.data_ptr()),
                     fill_bits(out.dtype(), value), l);
}

constexpr OpId kBinaryOpIds[kNumBinaryOps] = {OpId::add, OpId::sub, OpId::mul, OpId::div,
                                               OpId::maximum, OpId::minimum, OpId::eq, OpId::ne,
                                               OpId::lt, OpId::le, OpId::gt, OpId::ge};

// out = op(a, b): a, b expanded to out's shape, same dtype; out contiguous (bool for comparisons).
template <BinaryOp Op>
void binary_kernel(const Tensor& out, const Tensor& a, const Tensor& b, double alpha) {
  const char* name = op_name(kBinaryOpIds[static_cast<int>(Op)]);
  PRECIS_CHECK_DTYPE(a.dtype() == b.dtype() && out.dtype() == (is_comparison(Op) ? DType::boolean : a.dtype()),
                     name, ": CUDA kernel expects a and b of one dtype and out of ",
                     is_comparison(Op) ? "bool" : "that dtype", "; got out ", out.describe(), ", a ", a.describe(),
                     ", b ", b.describe());
  ElementwiseLaunch l = make_elementwise_launch(name, {&out, &a, &b});
  if (l.numel == 0) return;
  DeviceGuard guard(out.device().index);
  launch_binary(Op, a.dtype(), out.data_ptr(), a.data_ptr(), b.data_ptr(), alpha, l);
}

template <BinaryOp Op>
void register_binary() {
  for (int i = 0; i < kNumDTypes; ++i) {
    const DType dt = static_cast<DType>(i);
    if (binary_supported(Op, dt))
      register_kernel<kernels::BinaryKernel>(kBinaryOpIds[static_cast<int>(Op)], DeviceType::cuda, dt,
                                             &binary_kernel<Op>);
  }
}

}  // namespace

void register_elementwise_kernels() {
  for (int i = 0; i < kNumDTypes; ++i) {
    const DType dt = static_cast<DType>(i);
    register_kernel<kernels::CopyKernel>(OpId::copy, DeviceType::cuda, dt, &copy_kernel);
    register_kernel<kernels::FillKernel>(OpId::fill, DeviceType::cuda, dt, &fill_kernel);
    if (is_float8(dt)) continue;  // a storage format: copies and fills only, as on the CPU
    register_kernel<kernels::WhereKernel>(OpId::where, DeviceType::cuda, dt, &where_kernel);
    register_kernel<kernels::MaskedFillKernel>(OpId::masked_fill, DeviceType::cuda, dt, &masked_fill_kernel);
  }
  register_binary<BinaryOp::add>();
  register_binary<BinaryOp::sub>();
  register_binary<BinaryOp::mul>();
  register_binary<BinaryOp::div>();
  register_binary<BinaryOp::maximum>();
  register_binary<BinaryOp::minimum>();
  register_binary<BinaryOp::eq>();
  register_binary<BinaryOp::ne>();
  register_binary<BinaryOp::lt>();
  register_binary<BinaryOp::le>();
  register_binary<BinaryOp::gt>();
  register_binary<BinaryOp::ge>();
}

}  // namespace precis::cuda
