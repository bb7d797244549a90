// Convolution as im2col + oneDNN matmul, for channels-last (NHWC) activations: the passes where
// oneDNN 2.6's convolution kernels fall far short of its matmul (small spatial maps, and the
// weight gradient broadly; docs/design/cpu-conv.md has the probe figures behind
// gemm_conv_preferred). With M = N·Ho·Wo and K = C·kh·kw (ops/cpu/conv_gemm_cols.h):
//   forward          out (M, O)   = cols (M, K) · Wᵀ (K, O)   [+ bias]   out is NHWC as it lies
//   backward input   dcols (M, K) = dY (M, O) · W (O, K);  dX = col2im(dcols)
//   backward weight  dW (O, K)    = dYᵀ (O, M) · cols (M, K)             dW is OIHW as it lies
// W (O, C, kh, kw) is the (O, K) matrix as it lies, so no weight is reordered; a 1×1 stride-1
// unpadded conv uses the activation itself as the column matrix (no im2col/col2im). The GEMM is the
// project's oneDNN matmul (ops/cpu/gemm.h): bf16 operands accumulate in fp32 inside it and are
// rounded once on output; dcols is kept in fp32 (GemmArgs::c_f32) and col2im sums its (at most
// kh·kw) terms per element in fp32 and rounds once. Every split (im2col, col2im, the bias sum) has
// a fixed order: the results do not depend on the thread count beyond what oneDNN's matmul does.
#ifdef PRECIS_HAS_ONEDNN

#include <algorithm>
#include <atomic>
#include <vector>

#include <oneapi/dnnl/dnnl.hpp>

#include "core/half.h"
#include "core/thread_pool.h"
#include "ops/cpu/conv_gemm_cols.h"
#include "ops/cpu/conv_impl.h"
#include "ops/cpu/gemm.h"
#include "tensor/factory.h"

namespace precis::cpu {

namespace {

std::atomic<int64_t> passes_run{0};

// Counts a pass that computed its result.
bool counted(bool ran) {
  if (ran) passes_run.fetch_add(1, std::memory_order_relaxed);
  return ran;
}

ColsShape cols_shape(const ConvShape& s) {
  return {s.n, s.h, s.w, s.c, s.ho, s.wo, s.kh, s.kw, s.p.stride[0], s.p.stride[1], s.p.padding[0], s.p.padding[1]};
}

// A row-major (rows, cols) matrix, and the same read transposed (column-major).
GemmMatrix row_major(const void* data, int64_t cols) { return {data, 0, 0, cols, 1}; }
GemmMatrix col_major(const void* data, int64_t rows) { return {data, 0, 0, 1, rows}; }

// A (M, K) column matrix of the dtype in scratch memory from precis's caching allocator.
Tensor cols_buffer(DType dtype, const ColsShape& cs) { return empty({cs.m(), cs.k()}, {.dtype = dtype}); }

// Rows per chunk of the copy loops: at least ~32 Ki column elements per chunk.
int64_t row_grain(int64_t row_elems) {
  return std::max<int64_t>(1, (int64_t{1} << 15) / std::max<int64_t>(row_elems, 1));
}

template <typename T>
void im2col(const ColsShape& cs, const void* x, void* cols) {
  parallel_for(0, cs.m(), row_grain(cs.k()), [&](int64_t b, int64_t e) {
    im2col_nhwc(cs, static_cast<const T*>(x), static_cast<T*>(cols), b, e);
  });
}

// cols in float (the GEMM's fp32 sums, for f32 and bf16 alike), dx in T.
template <typename T>
void col2im(const ColsShape& cs, const void* cols, void* dx) {
  parallel_for(0, cs.n * cs.h * cs.w, row_grain(cs.k()), [&](int64_t b, int64_t e) {
    std::vector<float> acc(static_cast<size_t>(cs.c));
    col2im_nhwc(cs, static_cast<const float*>(cols), static_cast<T*>(dx), acc.data(), b, e);
  });
}

// grad_bias (O) = the column sums of dY (M, O), in fp32, rows in order.
template <typename T>
void bias_grad(const T* dy, int64_t m, int64_t o, T* grad_bias) {
  std::vector<float> acc(static_cast<size_t>(o), 0.0f);
  for (int64_t r = 0; r < m; ++r)
    for (int64_t c = 0; c < o; ++c) acc[c] += static_cast<float>(dy[r * o + c]);
  for (int64_t c = 0; c < o; ++c) grad_bias[c] = T(acc[c]);
}

bool gemm(DType dtype, int64_t m, int64_t k, int64_t n, GemmMatrix a, GemmMatrix b, void* c,
          const void* bias = nullptr, bool c_f32 = false) {
  GemmArgs g;
  g.c_f32 = c_f32;
  g.dtype = dtype;
  g.m = m;
  g.k = k;
  g.n = n;
  g.a = a;
  g.b = b;
  g.c = c;
  g.bias = bias;
  return onednn_gemm(g);
}

// A 1×1 kernel with stride 1 and no padding: the NHWC activation is its own column matrix (M = N·H·W,
// K = C), so no im2col / col2im.
bool is_pointwise(const ConvShape& s) {
  return s.kh == 1 && s.kw == 1 && s.p.stride[0] == 1 && s.p.stride[1] == 1 && s.p.padding[0] == 0 &&
         s.p.padding[1] == 0;
}

// The column matrix of x: x itself for a pointwise conv, else im2col into `holder`.
template <typename T>
const void* columns(DType dtype, const ConvShape& s, const void* x, Tensor& holder) {
  if (is_pointwise(s)) return x;
  const ColsShape cs = cols_shape(s);
  holder = cols_buffer(dtype, cs);
  im2col<T>(cs, x, holder.data_ptr());
  return holder.data_ptr();
}

template <typename T>
bool forward(DType dtype, const ConvShape& s, const void* x, const void* w, const void* bias, void* out) {
  const ColsShape cs = cols_shape(s);
  Tensor holder;
  const void* cols = columns<T>(dtype, s, x, holder);
  return gemm(dtype, cs.m(), cs.k(), s.o, row_major(cols, cs.k()), col_major(w, cs.k()), out, bias);
}

template <typename T>
bool backward_input(DType dtype, const ConvShape& s, const void* grad_out, const void* w, void* grad_x) {
  const ColsShape cs = cols_shape(s);
  if (is_pointwise(s))  // dX is dcols: one GEMM, one rounding
    return gemm(dtype, cs.m(), s.o, cs.k(), row_major(grad_out, s.o), row_major(w, cs.k()), grad_x);
  // dcols stays in fp32 (bf16 included): col2im adds up to kh·kw of its entries per element, and
  // rounding each to bf16 first loses the small sums of cancelling terms.
  const Tensor cols = cols_buffer(DType::f32, cs);
  if (!gemm(dtype, cs.m(), s.o, cs.k(), row_major(grad_out, s.o), row_major(w, cs.k()), cols.data_ptr(), nullptr,
            dtype == DType::bf16))
    return false;
  col2im<T>(cs, cols.data_ptr(), grad_x);
  return true;
}

template <typename T>
bool backward_weight(DType dtype, const ConvShape& s, const void* grad_out, const void* x, void* grad_w,
                     void* grad_bias) {
  const ColsShape cs = cols_shape(s);
  Tensor holder;
  const void* cols = columns<T>(dtype, s, x, holder);
  if (!gemm(dtype, s.o, cs.m(), cs.k(), col_major(grad_out, s.o), row_major(cols, cs.k()), grad_w)) return false;
  if (grad_bias != nullptr) bias_grad(static_cast<const T*>(grad_out), cs.m(), s.o, static_cast<T*>(grad_bias));
  return true;
}

}  // namespace

bool gemm_conv_applies(DType dtype, const ConvShape& s) {
  return (dtype == DType::f32 || dtype == DType::bf16) && s.nhwc && s.p.groups == 1 && s.p.dilation[0] == 1 &&
         s.p.dilation[1] == 1 && s.n > 0 && s.c > 0 && s.o > 0 && s.ho > 0 && s.wo > 0;
}

bool gemm_conv_forward(DType dtype, const ConvShape& s, const void* x, const void* w, const void* bias, void* out) {
  if (!gemm_conv_applies(dtype, s)) return false;
  return counted(dtype == DType::bf16 ? forward<BFloat16>(dtype, s, x, w, bias, out)
                                      : forward<float>(dtype, s, x, w, bias, out));
}

bool gemm_conv_backward_input(DType dtype, const ConvShape& s, const void* grad_out, const void* w, void* grad_x) {
  if (!gemm_conv_applies(dtype, s)) return false;
  return counted(dtype == DType::bf16 ? backward_input<BFloat16>(dtype, s, grad_out, w, grad_x)
                              : backward_input<float>(dtype, s, grad_out, w, grad_x));
}

bool gemm_conv_backward_weight(DType dtype, const ConvShape& s, const void* grad_out, const void* x, void* grad_w,
                               void* grad_bias) {
  if (!gemm_conv_applies(dtype, s)) return false;
  return counted(dtype == DType::bf16 ? backward_weight<BFloat16>(dtype, s, grad_out, x, grad_w, grad_bias)
                              : backward_weight<float>(dtype, s, grad_out, x, grad_w, grad_bias));
}

int64_t gemm_conv_passes_run() { return passes_run.load(std::memory_order_relaxed); }

bool gemm_conv_rule_active() {
  static const bool amx = dnnl::get_effective_cpu_isa() == dnnl::cpu_isa::avx512_core_amx;
  return amx;
}

// Per pass, the probe's ratios (oneDNN conv / GEMM route, bf16, one thread, CPU time, two runs;
// the design doc has the table): at 4×4 outputs the GEMM wins the 3×3 convs' forward by 1.1-1.7x,
// input gradient 1.8-3.0x, weight gradient 3.7-5.6x (the 1×1 projection's forward loses, 0.67-0.82x,
// 0.1 ms; kept for one simple rule); at 8×8 outputs it wins the weight gradient (1.1-3.7x) but loses
// forward and input gradient; at 16×16 and 32×32 it loses everything but the 1×1 weight gradient
// (1.6-1.9x). f32 has no clear win (<= 1.3x at one shape, losses up to 3x elsewhere), so f32 keeps
// the convolution primitives.
bool gemm_conv_preferred(DType dtype, const ConvShape& s, ConvPass pass) {
  if (dtype != DType::bf16 || !gemm_conv_applies(dtype, s) || !gemm_conv_rule_active()) return false;
  const int64_t out_map = s.ho * s.wo;
  if (out_map <= 16) return true;
  return pass == ConvPass::backward_weight && (out_map <= 64 || (s.kh == 1 && s.kw == 1));
}

}  // namespace precis::cpu

#endif  // PRECIS_HAS_ONEDNN
