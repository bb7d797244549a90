// scaled_matmul on CUDA devices: cuBLASLt's fp8 GEMM (sm_89 and newer), with the scale-inverses
// read on the device through CUBLASLT_MATMUL_DESC_A/B_SCALE_POINTER, so no step waits for the
// host. fp32 accumulation (CUBLAS_COMPUTE_32F); `fast_accum` sets CUBLASLT_MATMUL_DESC_FAST_ACCUM,
// which Transformer Engine uses for the forward GEMM only.
//
// cuBLASLt's fp8 kernels take only the "TN" form, column-major: A transposed, B not. Row-major
// out (M × N) read column-major is outᵀ (N × M) = bᵀ · aᵀ: cuBLASLt's A is b stored as a
// column-major (K × N) matrix, i.e. b's transpose dense (b.t().contiguous(), row-major (N, K)),
// op T; its B is a row-major (M, K), i.e. column-major (K × M), op N; D is outᵀ with leading
// dimension N. Both fp8 leading dimensions are K; cuBLASLt wants every dimension a multiple of 16
// and 16-byte aligned pointers. Other shapes, devices before sm_89, and problems the heuristic
// offers nothing for run as an f32 GEMM of the exactly widened operands (the same products,
// fp32 accumulation), then the scaling and one rounding, and say so once (precis::warn).
#include <cublasLt.h>

#include <cuda_runtime_api.h>

#include <cstdint>
#include <optional>
#include <string>

#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_context.h"
#include "core/device.h"
#include "core/warning.h"
#include "ops/math/conv_plan.h"
#include "ops/cuda/cublaslt_util.h"
#include "ops/cuda/cuda_backend.h"
#include "ops/contracts/kernels.h"
#include "ops/op_table.h"
#include "tensor/factory.h"

namespace precis::cuda {

namespace {

cudaDataType_t fp8_type(DType t) { return t == DType::f8_e4m3 ? CUDA_R_8F_E4M3 : CUDA_R_8F_E5M2; }

struct Fp8Plan {
  cublasLtMatmulAlgo_t algo{};
  size_t workspace = 0;
};

kernels::PlanCache<Fp8Plan>& plan_cache() {
  static kernels::PlanCache<Fp8Plan> cache;
  return cache;
}

struct Fp8Descs {
  MatmulDesc desc;
  Layout a, b, d;
  Fp8Descs(DType a_dtype, DType b_dtype, DType out_dtype, int64_t m, int64_t k, int64_t n, const void* a_scale,
           const void* b_scale, bool fast_accum)
      : desc(CUBLAS_COMPUTE_32F, CUDA_R_32F),
        a(fp8_type(b_dtype), k, n, k),  // cuBLASLt's A: our b, transposed dense
        b(fp8_type(a_dtype), k, m, k),  // cuBLASLt's B: our a
        d(out_dtype == DType::bf16 ? CUDA_R_16BF : CUDA_R_32F, n, m, n) {
    desc.set(CUBLASLT_MATMUL_DESC_TRANSA, CUBLAS_OP_T);
    desc.set(CUBLASLT_MATMUL_DESC_TRANSB, CUBLAS_OP_N);
    desc.set(CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, b_scale);
    desc.set(CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, a_scale);
    desc.set(CUBLASLT_MATMUL_DESC_FAST_ACCUM, static_cast<int8_t>(fast_accum ? 1 : 0));
  }
};

// `alignment`: the operands' common alignment in bytes. The heuristic otherwise assumes 256, and
// could offer an algorithm that a view at a 16-byte offset makes cublasLtMatmul refuse.
std::optional<Fp8Plan> heuristic(cublasLtHandle_t h, const Fp8Descs& descs, int64_t alignment) {
  Preference pref;
  pref.set(CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, static_cast<uint64_t>(kMaxWorkspace));
  const auto align = static_cast<uint32_t>(alignment);
  for (auto attr : {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES})
    pref.set(attr, align);
  cublasLtMatmulHeuristicResult_t result{};
  int returned = 0;
  const cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(h, descs.desc.d, descs.a.d, descs.b.d, descs.d.d,
                                                               descs.d.d, pref.d, 1, &result, &returned);
  // Only "not supported" means the f32 fallback; another failure (a bad descriptor) is a bug to
  // report, not to hide behind the fallback's exact result.
  if (status == CUBLAS_STATUS_NOT_SUPPORTED) return std::nullopt;
  PRECIS_CUBLAS_CHECK(status, "cuBLASLt heuristic for scaled_matmul");
  if (returned == 0) return std::nullopt;
  return Fp8Plan{result.algo, result.workspaceSize};
}

// The fallback: out = (sa · sb) · (widen(a) · widen(b)) with an f32 GEMM. The widening is exact,
// and so are the products (TF32, if the precision setting picks it, holds every fp8 value too).
void via_f32(const Tensor& out, const Tensor& a, const Tensor& b, const Tensor& sa, const Tensor& sb) {
  const Device dev = out.device();
  const auto copy = kernel<kernels::CopyKernel>(OpId::copy, DeviceType::cuda, DType::f32);
  const auto mul = kernel<kernels::BinaryKernel>(OpId::mul, DeviceType::cuda, DType::f32);
  Tensor a32 = empty({a.size(0), a.size(1)}, {.device = dev});
  Tensor b32 = empty({b.size(0), b.size(1)}, {.device = dev});
  copy(a32, a);
  copy(b32, b);
  Tensor acc = empty({1, a.size(0), b.size(1)}, {.device = dev});
  kernel<kernels::MatmulKernel>(OpId::matmul, DeviceType::cuda, DType::f32)(acc, a32.unsqueeze(0), b32.unsqueeze(0));
  Tensor scale = empty({}, {.device = dev});
  mul(scale, sa, sb, 1.0);
  Tensor acc2 = acc.view({a.size(0), b.size(1)});
  if (out.dtype() == DType::f32) {
    mul(out, acc2, scale.expand(out.sizes()), 1.0);
  } else {
    mul(acc2, acc2, scale.expand(acc2.sizes()), 1.0);
    kernel<kernels::CopyKernel>(OpId::copy, DeviceType::cuda, out.dtype())(out, acc2);
  }
}

void scaled_matmul_kernel(const Tensor& out, const Tensor& a, const Tensor& b, const Tensor& a_scale_inv,
                          const Tensor& b_scale_inv, bool fast_accum) {
  const Device dev = out.device();
  PRECIS_CHECK_DEVICE(dev.is_cuda() && a.device() == dev && b.device() == dev && a_scale_inv.device() == dev &&
                          b_scale_inv.device() == dev,
                      "scaled_matmul: the cuBLASLt kernel needs every operand on one CUDA device; got a ",
                      a.describe(), ", b ", b.describe(), ", out ", out.describe());
  const int64_t m = a.size(0), k = a.size(1), n = b.size(1);
  const int index = dev.index;
  DeviceGuard guard(index);
  const bool shape_ok = m % 16 == 0 && n % 16 == 0 && k % 16 == 0;
  const int capability = cuda_compute_capability(index);
  std::string why;
  if (capability < 89) why = "cuda:" + std::to_string(index) + " is sm_" + std::to_string(capability) + " (fp8 GEMMs need sm_89 or newer)";
  else if (!shape_ok) why = "cuBLASLt's fp8 GEMM needs M, N and K multiples of 16";
  std::optional<Fp8Plan> plan;
  Tensor a_dense, bt_dense;
  if (why.empty()) {
    a_dense = a.contiguous();
    bt_dense = b.t().contiguous();  // (N, K) row-major: cuBLASLt's column-major (K × N) A
    const int64_t alignment = kernels::common_alignment({a_dense.data_ptr(), bt_dense.data_ptr(), out.data_ptr()});
    if (alignment < 16) {
      why = "an operand is not 16-byte aligned";
    } else {
      const kernels::PlanKey key{static_cast<int64_t>(a.dtype()), static_cast<int64_t>(b.dtype()),
                                 static_cast<int64_t>(out.dtype()), m, k, n, fast_accum ? 1 : 0, index, alignment};
      plan = plan_cache().find(key);
      if (!plan) {
        plan = heuristic(lt_handle(index), Fp8Descs(a.dtype(), b.dtype(), out.dtype(), m, k, n, a_scale_inv.data_ptr(),
                                                     b_scale_inv.data_ptr(), fast_accum), alignment);
        if (plan) plan = plan_cache().insert(key, *plan);
      }
      if (!plan) why = "cuBLASLt's heuristic offers no fp8 algorithm for this problem";
    }
  }
  if (!plan) {
    warn("scaled_matmul: (" + std::to_string(m) + ", " + std::to_string(k) + ") x (" + std::to_string(k) + ", " +
         std::to_string(n) + ") on " + dev.str() + " runs as an f32 GEMM of the exactly widened fp8 values, not an fp8 "
         "GEMM: " + why);
    via_f32(out, a, b, a_scale_inv, b_scale_inv);
    return;
  }
  const Fp8Descs descs(a.dtype(), b.dtype(), out.dtype(), m, k, n, a_scale_inv.data_ptr(), b_scale_inv.data_ptr(),
                       fast_accum);
  Tensor workspace;
  if (plan->workspace > 0)
    workspace = empty({static_cast<int64_t>(plan->workspace)}, {.dtype = DType::boolean, .device = dev});
  const float alpha = 1.0f, beta = 0.0f;
  PRECIS_CUBLAS_CHECK(cublasLtMatmul(lt_handle(index), descs.desc.d, &alpha, bt_dense.data_ptr(), descs.a.d,
                                     a_dense.data_ptr(), descs.b.d, &beta, out.data_ptr(), descs.d.d, out.data_ptr(),
                                     descs.d.d, &plan->algo, workspace.defined() ? workspace.data_ptr() : nullptr,
                                     plan->workspace, device_stream(index)),
                      "scaled_matmul: a ", a.describe(), ", b ", b.describe(), " on ", dev.str());
}

}  // namespace

void register_scaled_matmul_kernels() {
  for (DType dt : {DType::f8_e4m3, DType::f8_e5m2})
    register_kernel<kernels::ScaledMatmulKernel>(OpId::scaled_matmul, DeviceType::cuda, dt, &scaled_matmul_kernel);
}

}  // namespace precis::cuda
