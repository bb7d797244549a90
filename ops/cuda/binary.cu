// Binary element-wise kernels on CUDA devices: add, sub, mul, div, maximum, minimum (out has the
// inputs' dtype) and eq, ne, lt, le, gt, ge (out bool). f16/bf16 are computed in fp32, f64 in
// f64, integers in their own type.
#include "ops/cuda/device_math.cuh"

namespace precis::cuda {

namespace {

// M: the compute type (opmath). alpha only matters for add/sub. Integer add, sub and mul wrap
// around on overflow, as on the CPU (core/opmath.h wrapping_*).
template <BinaryOp Op, typename M>
__device__ __forceinline__ auto apply(M a, M b, M alpha) {
  if constexpr (Op == BinaryOp::add) return wrapping_add(a, wrapping_mul(alpha, b));
  else if constexpr (Op == BinaryOp::sub) return wrapping_sub(a, wrapping_mul(alpha, b));
  else if constexpr (Op == BinaryOp::mul) return wrapping_mul(a, b);
  else if constexpr (Op == BinaryOp::div) return a / b;
  else if constexpr (Op == BinaryOp::maximum || Op == BinaryOp::minimum) {
    if constexpr (std::is_floating_point_v<M>) {
      if (a != a) return a;  // NaN propagates, as in PyTorch
      if (b != b) return b;
    }
    if constexpr (Op == BinaryOp::maximum) return a > b ? a : b;
    else return a < b ? a : b;
  } else if constexpr (Op == BinaryOp::eq) return a == b;
  else if constexpr (Op == BinaryOp::ne) return a != b;
  else if constexpr (Op == BinaryOp::lt) return a < b;
  else if constexpr (Op == BinaryOp::le) return a <= b;
  else if constexpr (Op == BinaryOp::gt) return a > b;
  else return a >= b;
}

template <BinaryOp Op, typename T>
using out_t = std::conditional_t<is_comparison(Op), bool, T>;

// out, a, b: (numel) contiguous.
template <BinaryOp Op, typename T>
__global__ void binary_contiguous_kernel(out_t<Op, T>* __restrict__ out, const T* __restrict__ a,
                                         const T* __restrict__ b, opmath_t<T> alpha, int64_t n) {
  PRECIS_GRID_STRIDE_LOOP(i, n) {
    out[i] = store_op<out_t<Op, T>>(apply<Op>(load_op(a[i]), load_op(b[i]), alpha));
  }
}

// out: contiguous or strided, a, b: any strides (0 = broadcast) over calc's shape;
// operands 0, 1, 2 = out, a, b.
template <BinaryOp Op, typename T>
__global__ void binary_strided_kernel(out_t<Op, T>* __restrict__ out, const T* __restrict__ a,
                                      const T* __restrict__ b, opmath_t<T> alpha, int64_t n, const OffsetCalc calc) {
  PRECIS_GRID_STRIDE_LOOP(i, n) {
    int64_t off[3];
    compute_offsets<3>(calc, i, off);
    out[off[0]] = store_op<out_t<Op, T>>(apply<Op>(load_op(a[off[1]]), load_op(b[off[2]]), alpha));
  }
}

template <BinaryOp Op, typename T>
void launch_typed(void* out, const void* a, const void* b, double alpha, const ElementwiseLaunch& l) {
  auto* o = static_cast<out_t<Op, T>*>(out);
  const T* pa = static_cast<const T*>(a);
  const T* pb = static_cast<const T*>(b);
  const auto al = store_op<opmath_t<T>>(alpha);  // saturating into integers; add/sub checked the range
  if (l.contiguous) {
    binary_contiguous_kernel<Op, T><<<grid_for(l.numel), kThreads, 0, l.stream>>>(o, pa, pb, al, l.numel);
  } else {
    binary_strided_kernel<Op, T><<<grid_for(l.numel), kThreads, 0, l.stream>>>(o, pa, pb, al, l.numel, l.calc);
  }
}

constexpr bool supported(BinaryOp op, DType t) {
  if (is_float8(t)) return false;  // a storage format (docs/fp8.md)
  if (is_comparison(op)) return true;
  if (t == DType::boolean) return false;
  if (op == BinaryOp::div) return t == DType::f32 || t == DType::f64 || t == DType::f16 || t == DType::bf16;
  return true;
}

template <BinaryOp Op>
void launch_op(DType dtype, void* out, const void* a, const void* b, double alpha, const ElementwiseLaunch& l) {
  visit_device_dtype(dtype, [&]<typename T>() {
    // Instantiate only the supported (op, dtype) pairs; the caller checked binary_supported.
    if constexpr (is_comparison(Op) || (!std::is_same_v<T, bool> &&
                                        (Op != BinaryOp::div || !std::is_integral_v<T>))) {
      launch_typed<Op, T>(out, a, b, alpha, l);
    }
  });
}

}  // namespace

bool binary_supported(BinaryOp op, DType dtype) { return supported(op, dtype); }

void launch_binary(BinaryOp op, DType dtype, void* out, const void* a, const void* b, double alpha,
                   const ElementwiseLaunch& l) {
  PRECIS_INTERNAL_ASSERT(supported(op, dtype), "launch_binary: unsupported dtype ", dtype_name(dtype));
  if (l.numel == 0) return;
  switch (op) {
    case BinaryOp::add: launch_op<BinaryOp::add>(dtype, out, a, b, alpha, l); break;
    case BinaryOp::sub: launch_op<BinaryOp::sub>(dtype, out, a, b, alpha, l); break;
    case BinaryOp::mul: launch_op<BinaryOp::mul>(dtype, out, a, b, alpha, l); break;
    case BinaryOp::div: launch_op<BinaryOp::div>(dtype, out, a, b, alpha, l); break;
    case BinaryOp::maximum: launch_op<BinaryOp::maximum>(dtype, out, a, b, alpha, l); break;
    case BinaryOp::minimum: launch_op<BinaryOp::minimum>(dtype, out, a, b, alpha, l); break;
    case BinaryOp::eq: launch_op<BinaryOp::eq>(dtype, out, a, b, alpha, l); break;
    case BinaryOp::ne: launch_op<BinaryOp::ne>(dtype, out, a, b, alpha, l); break;
    case BinaryOp::lt: launch_op<BinaryOp::lt>(dtype, out, a, b, alpha, l); break;
    case BinaryOp::le: launch_op<BinaryOp::le>(dtype, out, a, b, alpha, l); break;
    case BinaryOp::gt: launch_op<BinaryOp::gt>(dtype, out, a, b, alpha, l); break;
    case BinaryOp::ge: launch_op<BinaryOp::ge>(dtype, out, a, b, alpha, l); break;
  }
  PRECIS_CUDA_CHECK(cudaGetLastError(), "launching the binary kernel (", dtype_name(dtype), ", ", l.numel,
                    " elements)");
}

}  // namespace precis::cuda
