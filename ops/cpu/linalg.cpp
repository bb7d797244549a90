// matmul and linear on the CPU. These kernels describe their operands to a GEMM back end
// (ops/cpu/gemm.h) without copying when the strides allow it, and pick the back end per dtype:
//   f32   oneDNN matmul primitive (Eigen without oneDNN)
//   bf16  oneDNN with bf16 inputs, fp32 accumulation and one rounding of the result; where
//         oneDNN has no bf16 kernel (or is absent), converted to f32 like f16
//   f16   converted to f32 (bulk conversion), f32 GEMM, rounded back once
//   f64   Eigen (oneDNN has no f64)
#include <cstring>

#include "ops/cpu/cpu_backend.h"
#include "ops/cpu/gemm.h"
#include "ops/contracts/kernels.h"
#include "ops/op_table.h"
#include "tensor/factory.h"

namespace precis::cpu {

bool normalize_matrix(int64_t rows, int64_t cols, int64_t& rs, int64_t& cs) {
  if (rows <= 1 && cols <= 1) {
    rs = 1;
    cs = 1;
    return true;
  }
  if (rows <= 1) {  // a row vector: dense row-major, or column-major with leading dim cs
    if (cs == 1) {
      rs = cols;
      return true;
    }
    if (cs > 0) {
      rs = 1;
      return true;
    }
    return false;
  }
  if (cols <= 1) {  // a column vector: row-major with leading dim rs
    if (rs > 0) {
      cs = 1;
      return true;
    }
    return false;
  }
  if (cs == 1 && rs >= cols) return true;
  if (rs == 1 && cs >= rows) return true;
  return false;
}

namespace {

// A dense copy of t converted to `dtype` (the strided, converting copy kernel).
Tensor dense_copy(const Tensor& t, DType dtype) {
  Tensor out = empty(t.sizes(), {.dtype = dtype});
  kernel<kernels::CopyKernel>(OpId::copy, DeviceType::cpu, dtype)(out, t);
  return out;
}

// t: (B, rows, cols) with B == 1 or the GEMM's batch. Describes t for a GEMM; when its matrices
// are in neither GEMM layout, `holder` receives a dense copy and the result describes that.
GemmMatrix gemm_matrix(const Tensor& t, Tensor& holder) {
  const Tensor* src = &t;
  int64_t rs = t.stride(1), cs = t.stride(2);
  if (!normalize_matrix(t.size(1), t.size(2), rs, cs)) {
    holder = dense_copy(t, t.dtype());
    src = &holder;
    rs = holder.stride(1);
    cs = holder.stride(2);
    normalize_matrix(t.size(1), t.size(2), rs, cs);
  }
  GemmMatrix m;
  m.data = src->data_ptr();
  m.batch_stride = src->size(0) == 1 ? 0 : src->stride(0);
  m.row_stride = rs;
  m.col_stride = cs;
  return m;
}

void run_gemm(const GemmArgs& g) {
#ifdef PRECIS_HAS_ONEDNN
  if (onednn_gemm(g)) return;
#endif
  eigen_gemm(g);
}

GemmArgs make_args(DType dtype, const Tensor& out, const Tensor& a, const Tensor& b, const Tensor& bias,
                   Tensor& a_holder, Tensor& b_holder) {
  GemmArgs g;
  g.dtype = dtype;
  g.batch = out.size(0);
  g.m = out.size(1);
  g.k = a.size(2);
  g.n = out.size(2);
  g.a = gemm_matrix(a, a_holder);
  g.b = gemm_matrix(b, b_holder);
  g.c = out.data_ptr();
  g.bias = bias.defined() ? bias.data_ptr() : nullptr;
  return g;
}

// f16, and bf16 where oneDNN has no bf16 kernel: operands converted to dense f32, an f32 GEMM
// (fp32 accumulation), the result rounded to out's dtype once.
void gemm_via_f32(const Tensor& out, const Tensor& a, const Tensor& b, const Tensor& bias) {
  Tensor af = dense_copy(a, DType::f32), bf = dense_copy(b, DType::f32);
  Tensor bias_f = bias.defined() ? dense_copy(bias, DType::f32) : Tensor();
  Tensor cf = empty(out.sizes(), {.dtype = DType::f32});
  Tensor a_holder, b_holder;
  run_gemm(make_args(DType::f32, cf, af, bf, bias_f, a_holder, b_holder));
  kernel<kernels::CopyKernel>(OpId::copy, DeviceType::cpu, out.dtype())(out, cf);
}

// out: (batch, m, n) contiguous = a: (Ba, m, k) · b: (Bb, k, n) (+ bias: (n) contiguous, or
// undefined), Ba and Bb each 1 or batch.
template <typename T>
void gemm_kernel(const Tensor& out, const Tensor& a, const Tensor& b, const Tensor& bias) {
  if (out.numel() == 0) return;
  if (a.size(2) == 0) {  // an empty sum: zeros, plus the bias
    std::memset(out.data_ptr(), 0, out.numel() * out.element_size());
    if (bias.defined())
      kernel<kernels::CopyKernel>(OpId::copy, DeviceType::cpu, out.dtype())(
          out, detail::make_alias(bias, out.sizes(), {0, 0, bias.stride(0)}, bias.storage_offset()));
    return;
  }
  auto single = [](const Tensor& t) { return t.size(0) == 1 || t.stride(0) == 0; };
  if (out.size(0) > 1 && single(a) && single(b)) {
    // One matrix product broadcast over the whole batch (e.g. an expanded input times a
    // batch-less one): compute it once and replicate it.
    auto first = [](const Tensor& t) {
      return detail::make_alias(t, {1, t.size(1), t.size(2)}, t.strides(), t.storage_offset());
    };
    gemm_kernel<T>(first(out), first(a), first(b), bias);
    for (int64_t i = 1; i < out.size(0); ++i)
      std::memcpy(static_cast<char*>(out.data_ptr()) + i * out.stride(0) * out.element_size(), out.data_ptr(),
                  out.stride(0) * out.element_size());
    return;
  }
  constexpr DType dtype = dtype_of<T>();
  if constexpr (dtype == DType::f16) {
    gemm_via_f32(out, a, b, bias);
  } else {
    Tensor a_holder, b_holder;
    const GemmArgs g = make_args(dtype, out, a, b, bias, a_holder, b_holder);
    if constexpr (dtype == DType::bf16) {
#ifdef PRECIS_HAS_ONEDNN
      if (onednn_gemm(g)) return;
#endif
      gemm_via_f32(out, a, b, bias);
    } else {
      run_gemm(g);
    }
  }
}

// Entry i of t's outer batch dim (entry 0 when that dim broadcasts), as a 3-D view.
Tensor outer_entry(const Tensor& t, int64_t i) {
  const int64_t offset = t.storage_offset() + (t.size(0) == 1 ? 0 : i * t.stride(0));
  return detail::make_alias(t, {t.size(1), t.size(2), t.size(3)}, {t.stride(1), t.stride(2), t.stride(3)}, offset);
}

// The 4-D form (ops/contracts/kernels.h MatmulKernel): out (B1, B2, n, m) contiguous, a (Ba1, Ba2, n, k),
// b (Bb1, Bb2, k, m). One oneDNN GEMM over both batch dims reads the operands where they lie;
// where oneDNN cannot take them (f16, f64, a matrix in neither GEMM layout, no fast kernel) each
// outer entry runs as a 3-D GEMM, which copies only what that needs.
template <typename T>
void matmul_kernel_4d(const Tensor& out, const Tensor& a, const Tensor& b) {
  if (out.numel() == 0) return;
#ifdef PRECIS_HAS_ONEDNN
  constexpr DType dtype = dtype_of<T>();
  if constexpr (dtype == DType::f32 || dtype == DType::bf16) {
    auto describe = [](const Tensor& t, GemmMatrix& m) {
      int64_t rs = t.stride(2), cs = t.stride(3);
      if (!normalize_matrix(t.size(2), t.size(3), rs, cs)) return false;
      m.data = t.data_ptr();
      m.batch_stride = t.size(0) == 1 ? 0 : t.stride(0);
      m.batch_stride2 = t.size(1) == 1 ? 0 : t.stride(1);
      m.row_stride = rs;
      m.col_stride = cs;
      return true;
    };
    GemmArgs g;
    g.dtype = dtype;
    g.batch = out.size(0);
    g.batch2 = out.size(1);
    g.m = out.size(2);
    g.k = a.size(3);
    g.n = out.size(3);
    g.c = out.data_ptr();
    if (g.k > 0 && describe(a, g.a) && describe(b, g.b) && onednn_gemm(g)) return;
  }
#endif
  for (int64_t i = 0; i < out.size(0); ++i)
    gemm_kernel<T>(outer_entry(out, i), outer_entry(a, i), outer_entry(b, i), Tensor());
}

// out: (B, n, m) = a: (Ba, n, k) · b: (Bb, k, m), or the 4-D form with two batch dims.
// Accumulates in fp32 (f64 for f64).
template <typename T>
void matmul_kernel(const Tensor& out, const Tensor& a, const Tensor& b) {
  if (out.dim() == 4) return matmul_kernel_4d<T>(out, a, b);
  gemm_kernel<T>(out, a, b, Tensor());
}

// out: (M, out) = x: (M, in) · wᵀ + bias. w: (out, in) is read as a column-major (in, out)
// matrix, so oneDNN fuses the bias and nothing is transposed in memory.
template <typename T>
void linear_kernel(const Tensor& out, const Tensor& x, const Tensor& w, const Tensor& bias) {
  const int64_t rows = x.size(0), in = x.size(1), outs = w.size(0);
  gemm_kernel<T>(detail::make_alias(out, {1, rows, outs}, {rows * outs, outs, 1}, out.storage_offset()),
                 detail::make_alias(x, {1, rows, in}, {rows * in, in, 1}, x.storage_offset()),
                 detail::make_alias(w, {1, in, outs}, {in * outs, 1, in}, w.storage_offset()), bias);
}

template <typename T>
void register_for() {
  register_kernel<kernels::MatmulKernel>(OpId::matmul, DeviceType::cpu, dtype_of<T>(), &matmul_kernel<T>);
  register_kernel<kernels::LinearKernel>(OpId::linear, DeviceType::cpu, dtype_of<T>(), &linear_kernel<T>);
}

}  // namespace

void register_linalg_kernels() {
  register_for<float>();
  register_for<double>();
  register_for<Half>();
  register_for<BFloat16>();
}

}  // namespace precis::cpu
