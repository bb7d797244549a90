// linear's forward on CUDA devices: out = x·wᵀ + bias as one cuBLASLt matmul with the bias added
// in its epilogue (CUBLASLT_EPILOGUE_BIAS), so the output is written once. The backward is
// linear's functional code (ops/linalg.cpp): two matmuls (cuBLAS, ops/cuda/matmul.cpp) and a sum
// over the rows for the bias (the deterministic reduction of ops/cuda/reduce.cu).
//
// f32, f16 and bf16 compute in CUBLAS_COMPUTE_32F (fp32 accumulation, no TF32), f32 in
// CUBLAS_COMPUTE_32F_FAST_TF32 instead where the precision setting says TF32
// (ops/float32_precision.h); split-K partial sums, when an algorithm uses them, are kept in the
// compute type (the reduction scheme is restricted to COMPUTE_TYPE: INPLACE and OUTPUT_TYPE would
// round partial sums to f16/bf16). f64 computes in CUBLAS_COMPUTE_64F. The algorithm is chosen by
// cuBLASLt's heuristic once per problem (sizes, dtype, compute type, bias, alignment, device) and
// cached, so a given problem always runs the same algorithm: bit-identical results from run to run;
// the compute type is in the key, as a cuBLASLt algorithm belongs to one compute type (and a TF32
// plan must not serve a call made under "highest"). When the heuristic offers nothing with the
// bias epilogue, the product runs without it and the bias is added by the add kernel.
//
// Row-major out (M × O) read as column-major is outᵀ (O × M) = w · xᵀ: cuBLASLt's A is w, stored
// as a column-major (in × O) matrix and transposed (op T), B is x, a column-major (in × M) matrix
// (op N), and D is outᵀ with leading dimension O; the bias is a column vector of D's O rows.
#include <cublasLt.h>

#include <cstdint>
#include <optional>

#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_context.h"
#include "core/cuda/handle_pool.h"
#include "ops/math/conv_plan.h"
#include "ops/cuda/cublaslt_util.h"
#include "ops/cuda/cuda_backend.h"
#include "ops/float32_precision.h"
#include "ops/contracts/kernels.h"
#include "ops/op_table.h"
#include "tensor/factory.h"

namespace precis::cuda {

cublasLtHandle_t lt_handle(int index) {
  static HandlePool<cublasLtHandle_t>* const pool = new HandlePool<cublasLtHandle_t>([](int device) {  // never freed
    DeviceGuard guard(device);
    cublasLtHandle_t h = nullptr;
    PRECIS_CUBLAS_CHECK(cublasLtCreate(&h), "creating a cuBLASLt handle of cuda:", device);
    return h;
  });
  check_device_index(index, "cublaslt_handle");
  return pool->get(index);
}

namespace {

cudaDataType_t lt_type(DType t) {
  switch (t) {
    case DType::f32: return CUDA_R_32F;
    case DType::f64: return CUDA_R_64F;
    case DType::f16: return CUDA_R_16F;
    case DType::bf16: return CUDA_R_16BF;
    default: break;
  }
  throw InternalError("linear: cuBLASLt has no data type for this dtype");
}

/// The algorithm chosen for one problem, and whether it adds the bias itself.
struct LinearPlan {
  cublasLtMatmulAlgo_t algo{};
  size_t workspace = 0;
  bool fused_bias = false;
};

kernels::PlanCache<LinearPlan>& plan_cache() {
  static kernels::PlanCache<LinearPlan> cache;
  return cache;
}

/// The descriptors of out = x·wᵀ (+ bias in the epilogue when `bias` is non-null).
struct LinearDescs {
  MatmulDesc desc;
  Layout a, b, d;
  LinearDescs(DType dtype, cublasComputeType_t compute, int64_t rows, int64_t in, int64_t outs, const void* bias)
      : desc(compute, dtype == DType::f64 ? CUDA_R_64F : CUDA_R_32F),
        a(lt_type(dtype), in, outs, in),
        b(lt_type(dtype), in, rows, in),
        d(lt_type(dtype), outs, rows, outs) {
    desc.set(CUBLASLT_MATMUL_DESC_TRANSA, CUBLAS_OP_T);
    desc.set(CUBLASLT_MATMUL_DESC_TRANSB, CUBLAS_OP_N);
    if (bias != nullptr) {
      desc.set(CUBLASLT_MATMUL_DESC_EPILOGUE, CUBLASLT_EPILOGUE_BIAS);
      desc.set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias);
    }
  }
};

/// The best algorithm cuBLASLt's heuristic offers for these descriptors, if any.
std::optional<LinearPlan> heuristic(cublasLtHandle_t h, const LinearDescs& descs, int64_t alignment) {
  Preference pref;
  pref.set(CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, static_cast<uint64_t>(kMaxWorkspace));
  pref.set(CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, static_cast<uint32_t>(CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE));
  const auto align = static_cast<uint32_t>(alignment);
  for (auto attr : {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES})
    pref.set(attr, align);
  cublasLtMatmulHeuristicResult_t result{};
  int returned = 0;
  const cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(h, descs.desc.d, descs.a.d, descs.b.d, descs.d.d,
                                                               descs.d.d, pref.d, 1, &result, &returned);
  if (status == CUBLAS_STATUS_NOT_SUPPORTED) return std::nullopt;
  PRECIS_CUBLAS_CHECK(status, "cuBLASLt heuristic for linear");
  if (returned == 0) return std::nullopt;
  return LinearPlan{result.algo, result.workspaceSize, false};
}

void linear_kernel(const Tensor& out, const Tensor& x, const Tensor& w, const Tensor& bias) {
  auto all = [&] {
    return precis::detail::str_cat("out ", out.describe(), ", x ", x.describe(), ", w ", w.describe(),
                                   bias.defined() ? ", bias " + bias.describe() : std::string());
  };
  const Device dev = out.device();
  PRECIS_CHECK_DEVICE(dev.is_cuda() && x.device() == dev && w.device() == dev && (!bias.defined() || bias.device() == dev),
                      "linear: the cuBLASLt kernel needs every operand on one CUDA device; got ", all());
  const DType t = out.dtype();
  PRECIS_CHECK_DTYPE(x.dtype() == t && w.dtype() == t && (!bias.defined() || bias.dtype() == t),
                     "linear: the cuBLASLt kernel expects one dtype; got ", all());
  const int64_t rows = x.dim() == 2 ? x.size(0) : -1, in = x.dim() == 2 ? x.size(1) : -1;
  const int64_t outs = w.dim() == 2 ? w.size(0) : -1;
  PRECIS_CHECK_SHAPE(x.dim() == 2 && w.dim() == 2 && out.dim() == 2 && w.size(1) == in && out.size(0) == rows &&
                         out.size(1) == outs && x.is_contiguous() && w.is_contiguous() && out.is_contiguous() &&
                         (!bias.defined() || (bias.dim() == 1 && bias.size(0) == outs && bias.is_contiguous())),
                     "linear: the cuBLASLt kernel expects x (M, in), w (out, in), bias (out), out (M, out), all "
                     "contiguous; got ", all());
  if (rows == 0 || outs == 0) return;
  const int index = dev.index;
  DeviceGuard guard(index);
  cudaStream_t stream = device_stream(index);
  auto add_bias = [&] {  // out += bias, broadcast over the rows
    kernel<kernels::BinaryKernel>(OpId::add, DeviceType::cuda, t)(out, out, bias.expand({rows, outs}), 1.0);
  };
  if (in == 0) {  // empty sums: zeros, plus the bias
    PRECIS_CUDA_CHECK(cudaMemsetAsync(out.data_ptr(), 0, static_cast<size_t>(out.numel()) * out.element_size(), stream),
                      "linear: zeroing ", out.describe());
    if (bias.defined()) add_bias();
    return;
  }
  cublasLtHandle_t h = lt_handle(index);
  const void* bias_ptr = bias.defined() ? bias.data_ptr() : nullptr;
  const int64_t alignment = kernels::common_alignment({x.data_ptr(), w.data_ptr(), out.data_ptr(), bias_ptr});
  const cublasComputeType_t compute = t == DType::f64                                 ? CUBLAS_COMPUTE_64F
                                      : uses_tf32(OpId::linear, DeviceType::cuda, t) ? CUBLAS_COMPUTE_32F_FAST_TF32
                                                                                     : CUBLAS_COMPUTE_32F;
  const kernels::PlanKey key{static_cast<int64_t>(t), static_cast<int64_t>(compute), rows, in, outs,
                             bias.defined() ? 1 : 0, index, alignment};
  std::optional<LinearPlan> plan = plan_cache().find(key);
  if (!plan) {
    if (bias_ptr != nullptr) {
      const LinearDescs fused(t, compute, rows, in, outs, bias_ptr);
      plan = heuristic(h, fused, alignment);
      if (plan) plan->fused_bias = true;
    }
    if (!plan) plan = heuristic(h, LinearDescs(t, compute, rows, in, outs, nullptr), alignment);
    PRECIS_CHECK_T(NotImplementedError, plan.has_value(), "linear: cuBLASLt offers no algorithm for ", all(),
                   " on ", dev.str(), "; run it on the CPU");
    plan = plan_cache().insert(key, *plan);
  }
  const LinearDescs descs(t, compute, rows, in, outs, plan->fused_bias ? bias_ptr : nullptr);
  Tensor workspace;
  if (plan->workspace > 0)
    workspace = empty({static_cast<int64_t>(plan->workspace)}, {.dtype = DType::boolean, .device = dev});
  const float alpha_f = 1.0f, beta_f = 0.0f;
  const double alpha_d = 1.0, beta_d = 0.0;
  const void* alpha = t == DType::f64 ? static_cast<const void*>(&alpha_d) : &alpha_f;
  const void* beta = t == DType::f64 ? static_cast<const void*>(&beta_d) : &beta_f;
  PRECIS_CUBLAS_CHECK(cublasLtMatmul(h, descs.desc.d, alpha, w.data_ptr(), descs.a.d, x.data_ptr(), descs.b.d, beta,
                                     out.data_ptr(), descs.d.d, out.data_ptr(), descs.d.d, &plan->algo,
                                     workspace.defined() ? workspace.data_ptr() : nullptr, plan->workspace, stream),
                      "linear ", all(), " on ", dev.str());
  if (bias.defined() && !plan->fused_bias) add_bias();
}

}  // namespace

void register_linear_kernels() {
  for (DType dt : {DType::f32, DType::f64, DType::f16, DType::bf16})
    register_kernel<kernels::LinearKernel>(OpId::linear, DeviceType::cuda, dt, &linear_kernel);
}

}  // namespace precis::cuda
