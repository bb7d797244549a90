// Batched matmul on CUDA devices through cuBLAS. f32, f16 and bf16 use cublasGemmStridedBatchedEx
// with CUBLAS_COMPUTE_32F (fp32 accumulation; f16/bf16 inputs and outputs, never fp16
// accumulation), f32 with CUBLAS_COMPUTE_32F_FAST_TF32 instead where the precision setting says
// TF32 (ops/float32_precision.h; the handle's math mode stays CUBLAS_DEFAULT_MATH, so the compute
// type alone decides); f64 uses cublasDgemmStridedBatched.
//
// cuBLAS is column-major and precis row-major. A row-major (r × c) matrix read as column-major is
// its transpose, so out = a·b is computed as outᵀ = bᵀ·aᵀ: cuBLAS gets b as its first operand and
// a as its second, with m and n swapped, and writes out in row-major order directly.
#include <climits>

#include <cublas_v2.h>

#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_context.h"
#include "core/cuda/handle_pool.h"
#include "ops/cuda/cuda_backend.h"
#include "ops/float32_precision.h"
#include "ops/contracts/kernels.h"
#include "ops/op_table.h"
#include "tensor/factory.h"

namespace precis::cuda {

namespace {

/// The calling thread's cuBLAS handle of the device (core/cuda/handle_pool.h: one per thread and
/// device), bound to the thread's current stream at every call (a StreamGuard may have made
/// another stream current).
cublasHandle_t cublas_handle(int index) {
  static HandlePool<cublasHandle_t>* const pool = new HandlePool<cublasHandle_t>([](int device) {  // never freed
    DeviceGuard guard(device);
    cublasHandle_t h = nullptr;
    PRECIS_CUBLAS_CHECK(cublasCreate(&h), "creating a cuBLAS handle of cuda:", device);
    return h;
  });
  check_device_index(index, "cublas_handle");
  cublasHandle_t h = pool->get(index);
  PRECIS_CUBLAS_CHECK(cublasSetStream(h, device_stream(index)), "binding cuBLAS to the current stream of cuda:", index);
  return h;
}

/// One matmul operand as cuBLAS sees it: a batch of (rows × cols) row-major matrices, passed so
/// that op(X) is the column-major (cols × rows) matrix, i.e. its transpose.
struct GemmOperand {
  Tensor storage;  // keeps a contiguous copy alive when one was needed
  const void* data = nullptr;
  cublasOperation_t op = CUBLAS_OP_N;
  int64_t ld = 0;
  long long batch_stride = 0;  // 0: one matrix broadcast over the batch
};

/// x: (Bx, rows, cols) with Bx 1 or the batch; any strides.
GemmOperand gemm_operand(const Tensor& x) {
  const int64_t rows = x.size(1), cols = x.size(2);
  int64_t sr = x.stride(1), sc = x.stride(2);
  // The stride of a size-1 dim is arbitrary; pick the one that makes the layout valid.
  if (cols == 1) sc = 1;
  if (rows == 1) sr = sc == 1 ? std::max<int64_t>(cols, 1) : 1;
  GemmOperand g;
  g.batch_stride = x.size(0) == 1 ? 0 : x.stride(0);
  if (sc == 1 && sr >= std::max<int64_t>(cols, 1)) {  // row-major: read as column-major it is xᵀ
    g.storage = x;
    g.op = CUBLAS_OP_N;
    g.ld = sr;
  } else if (sr == 1 && sc >= std::max<int64_t>(rows, 1)) {  // transposed-contiguous: it is x
    g.storage = x;
    g.op = CUBLAS_OP_T;
    g.ld = sc;
  } else {  // broadcast or sliced inner dims: copy to row-major
    Tensor c = empty(x.sizes(), {.dtype = x.dtype(), .device = x.device()});
    kernel<kernels::CopyKernel>(OpId::copy, DeviceType::cuda, x.dtype())(c, x);
    g.storage = c;
    g.op = CUBLAS_OP_N;
    g.ld = std::max<int64_t>(cols, 1);
    g.batch_stride = x.size(0) == 1 ? 0 : c.stride(0);
  }
  g.data = g.storage.data_ptr();
  return g;
}

cudaDataType_t cuda_type(DType t) {
  switch (t) {
    case DType::f32: return CUDA_R_32F;
    case DType::f16: return CUDA_R_16F;
    case DType::bf16: return CUDA_R_16BF;
    default: break;
  }
  throw InternalError("cuda_type: no cuBLAS Ex type for this dtype");
}

// a: (Ba, n, k), b: (Bb, k, m), Ba and Bb each 1 or B; any strides.
// out: (B, n, m) contiguous. Accumulates in fp32 (f64 for f64).
void matmul_kernel(const Tensor& out, const Tensor& a, const Tensor& b) {
  PRECIS_CHECK_SHAPE(out.dim() == 3 && a.dim() == 3 && b.dim() == 3 && out.is_contiguous() &&
                         a.size(2) == b.size(1) && out.size(1) == a.size(1) && out.size(2) == b.size(2) &&
                         (a.size(0) == 1 || a.size(0) == out.size(0)) && (b.size(0) == 1 || b.size(0) == out.size(0)),
                     "matmul: CUDA kernel expects a (B|1, n, k), b (B|1, k, m), out (B, n, m) contiguous; got out ",
                     out.describe(), ", a ", a.describe(), ", b ", b.describe());
  PRECIS_CHECK_DTYPE(a.dtype() == out.dtype() && b.dtype() == out.dtype(), "matmul: CUDA kernel expects one dtype; got out ",
                     out.describe(), ", a ", a.describe(), ", b ", b.describe());
  PRECIS_CHECK_DEVICE(a.device() == out.device() && b.device() == out.device() && out.device().is_cuda(),
                      "matmul: operands must be on one CUDA device; got out ", out.describe(), ", a ", a.describe(),
                      ", b ", b.describe());
  const int64_t batch = out.size(0), n = out.size(1), m = out.size(2), k = a.size(2);
  if (batch == 0 || n == 0 || m == 0) return;
  const int index = out.device().index;
  DeviceGuard guard(index);
  cudaStream_t stream = device_stream(index);
  if (k == 0) {  // empty sum: zeros
    PRECIS_CUDA_CHECK(cudaMemsetAsync(out.data_ptr(), 0, static_cast<size_t>(out.numel()) * out.element_size(), stream),
                      "matmul: zeroing ", out.describe());
    return;
  }
  const GemmOperand ga = gemm_operand(a);  // aᵀ: (k × n) column-major
  const GemmOperand gb = gemm_operand(b);  // bᵀ: (m × k) column-major
  PRECIS_CHECK_T(NotImplementedError, n <= INT_MAX && m <= INT_MAX && k <= INT_MAX && batch <= INT_MAX &&
                                          ga.ld <= INT_MAX && gb.ld <= INT_MAX,
                 "matmul: sizes beyond 2^31-1 are not supported by the cuBLAS path; got a ", a.describe(), ", b ",
                 b.describe());
  const int im = static_cast<int>(m), in = static_cast<int>(n), ik = static_cast<int>(k);
  const long long stride_out = static_cast<long long>(n) * m;
  cublasHandle_t h = cublas_handle(index);

  if (out.dtype() == DType::f64) {
    const double alpha = 1.0, beta = 0.0;
    PRECIS_CUBLAS_CHECK(cublasDgemmStridedBatched(h, gb.op, ga.op, im, in, ik, &alpha,
                                                  static_cast<const double*>(gb.data), static_cast<int>(gb.ld),
                                                  gb.batch_stride, static_cast<const double*>(ga.data),
                                                  static_cast<int>(ga.ld), ga.batch_stride, &beta,
                                                  static_cast<double*>(out.data_ptr()), im, stride_out,
                                                  static_cast<int>(batch)),
                        "matmul ", a.describe(), " x ", b.describe());
    return;
  }
  const float alpha = 1.0f, beta = 0.0f;  // both compute types take fp32 scalars
  const cudaDataType_t t = cuda_type(out.dtype());
  const cublasComputeType_t compute = uses_tf32(OpId::matmul, DeviceType::cuda, out.dtype())
                                          ? CUBLAS_COMPUTE_32F_FAST_TF32
                                          : CUBLAS_COMPUTE_32F;
  PRECIS_CUBLAS_CHECK(cublasGemmStridedBatchedEx(h, gb.op, ga.op, im, in, ik, &alpha, gb.data, t,
                                                 static_cast<int>(gb.ld), gb.batch_stride, ga.data, t,
                                                 static_cast<int>(ga.ld), ga.batch_stride, &beta, out.data_ptr(), t,
                                                 im, stride_out, static_cast<int>(batch), compute, CUBLAS_GEMM_DEFAULT),
                      "matmul ", a.describe(), " x ", b.describe());
}

}  // namespace

void register_matmul_kernels() {
  for (DType dt : {DType::f32, DType::f64, DType::f16, DType::bf16})
    register_kernel<kernels::MatmulKernel>(OpId::matmul, DeviceType::cuda, dt, &matmul_kernel);
}

}  // namespace precis::cuda
