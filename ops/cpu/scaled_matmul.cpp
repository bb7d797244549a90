// scaled_matmul on the CPU: the fp8 GEMM emulated exactly. Every E4M3 and E5M2 value is a bf16
// value, so the operands are widened to bf16 without rounding and multiplied by oneDNN's bf16
// GEMM with fp32 accumulation (each product of two fp8 values is exact in fp32); the fp32 result
// is scaled by a_scale_inv · b_scale_inv and rounded once to out's dtype. Where oneDNN has no bf16
// kernel the operands go to f32 instead (the same exact values, Eigen's f32 GEMM). Only the
// summation order can differ from a GPU's fp8 GEMM without fast accumulation.
#include <algorithm>
#include <cstring>
#include <vector>

#include "core/float8.h"
#include "core/half.h"
#include "core/thread_pool.h"
#include "ops/cpu/cpu_backend.h"
#include "ops/cpu/gemm.h"
#include "ops/contracts/kernels.h"
#include "ops/op_table.h"
#include "tensor/factory.h"

namespace precis::cpu {

namespace {

// The widened value of every code of `dtype`, as float.
const float* code_table(DType dtype) {
  static const auto tables = [] {
    std::vector<float> t(512);
    for (int c = 0; c < 256; ++c) {
      t[c] = detail::f8e4m3_bits_to_float(static_cast<uint8_t>(c));
      t[256 + c] = detail::f8e5m2_bits_to_float(static_cast<uint8_t>(c));
    }
    return t;
  }();
  return tables.data() + (dtype == DType::f8_e4m3 ? 0 : 256);
}

// x (rows, cols), any strides, widened into a dense row-major buffer of T (float or BFloat16).
template <typename T>
void widen(const Tensor& x, T* dst) {
  const float* table = code_table(x.dtype());
  const auto* src = static_cast<const uint8_t*>(x.data_ptr());
  const int64_t rows = x.size(0), cols = x.size(1), rs = x.stride(0), cs = x.stride(1);
  parallel_for(0, rows, std::max<int64_t>(1, 16384 / std::max<int64_t>(cols, 1)), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r)
      for (int64_t c = 0; c < cols; ++c) dst[r * cols + c] = T(table[src[r * rs + c * cs]]);
  });
}

float scalar_f32(const Tensor& t) {
  float v;
  std::memcpy(&v, t.data_ptr(), sizeof v);
  return v;
}

void scaled_matmul_kernel(const Tensor& out, const Tensor& a, const Tensor& b, const Tensor& a_scale_inv,
                          const Tensor& b_scale_inv, bool /*fast_accum: the CPU accumulates exactly*/) {
  const int64_t m = a.size(0), k = a.size(1), n = b.size(1);
  // Scratch from the caching allocator, not std::vector: nothing is zero-filled first.
  const Tensor acc_t = empty({m, n});
  auto* acc = static_cast<float*>(acc_t.data_ptr());
  GemmArgs g;
  g.m = m;
  g.k = k;
  g.n = n;
  g.a.row_stride = k;
  g.a.col_stride = 1;
  g.b.row_stride = n;
  g.b.col_stride = 1;
  g.c = acc;
  bool done = false;
#ifdef PRECIS_HAS_ONEDNN
  {
    const Tensor a16 = empty({m, k}, {.dtype = DType::bf16}), b16 = empty({k, n}, {.dtype = DType::bf16});
    widen(a, static_cast<BFloat16*>(a16.data_ptr()));
    widen(b, static_cast<BFloat16*>(b16.data_ptr()));
    g.dtype = DType::bf16;
    g.c_f32 = true;  // the fp32 accumulator itself, scaled below before the one rounding
    g.a.data = a16.data_ptr();
    g.b.data = b16.data_ptr();
    done = onednn_gemm(g);
  }
#endif
  if (!done) {
    const Tensor a32 = empty({m, k}), b32 = empty({k, n});
    widen(a, static_cast<float*>(a32.data_ptr()));
    widen(b, static_cast<float*>(b32.data_ptr()));
    g.dtype = DType::f32;
    g.c_f32 = false;
    g.a.data = a32.data_ptr();
    g.b.data = b32.data_ptr();
    eigen_gemm(g);
  }
  // One factor, as cuBLASLt applies its scale pointers: (sa · sb) · acc, then one rounding.
  const float scale = scalar_f32(a_scale_inv) * scalar_f32(b_scale_inv);
  const bool f32 = out.dtype() == DType::f32;
  parallel_for(0, m * n, 16384, [&](int64_t i0, int64_t i1) {
    if (f32) {
      auto* o = static_cast<float*>(out.data_ptr());
      for (int64_t i = i0; i < i1; ++i) o[i] = acc[i] * scale;
    } else {
      auto* o = static_cast<BFloat16*>(out.data_ptr());
      for (int64_t i = i0; i < i1; ++i) o[i] = BFloat16(acc[i] * scale);
    }
  });
}

}  // namespace

void register_scaled_matmul_kernels() {
  for (DType dt : {DType::f8_e4m3, DType::f8_e5m2})
    register_kernel<kernels::ScaledMatmulKernel>(OpId::scaled_matmul, DeviceType::cpu, dt, &scaled_matmul_kernel);
}

}  // namespace precis::cpu
