// linear_cross_entropy's CPU kernel (ops/contracts/kernels_loss.h LinearCrossEntropyKernel), f32 and
// bf16: the rows in chunks of about 8 M logits, each chunk's loss and gradient products formed at
// once, so no (M, V) tensor is ever made.
//
// Per chunk of R rows: L = x_chunk · Wᵀ + b (one oneDNN GEMM into a reused (R, V) buffer); then
// cross_entropy_with_grad's row kernel (ops/cpu/loss.cpp) writes each row's loss and its logit
// gradient G = g_i·(softmax − (1 − ε)·onehot − ε/V), rounded to x's dtype as cross_entropy's
// backward rounds it, into a second buffer; then grad_x[chunk] = G·W and grad_w += Gᵀ·x_chunk
// (fp32 results) and grad_b += Σ_rows G. Three GEMMs, as the unfused pair makes: the gradient is
// known in forward for an output gradient of 1, so backward only scales and rounds. The price of
// the chunks is grad_w's fp32 (V, K) result read and written once per chunk, so chunks are large
// (at V = 30522 and 2048 rows: 256 rows, two buffers of 16 MB in bf16, 32 MB in f32).
//
// Measured on AMD Zen 4 (BERT-mini's 2048 × 256 → 30522, forward and backward, 2 threads, wall ms;
// benchmarks/results/lce-2026-12-07-zen4.md): bf16 294-332 against 340-382 for the vocabulary-block
// kernel this one replaced (it made every block's logits twice, a fourth GEMM, to hold only one
// (M, 1024) block; on Zen 4 bf16 GEMMs are compute-bound), and 1.00-1.02× the op's generic path,
// which holds the whole (M, V) logit gradient for backward's GEMMs (125 MB in bf16); f32 the
// generic path's time (0.99-1.01×) without its 250 MB.
#ifdef PRECIS_HAS_ONEDNN

#include <algorithm>
#include <type_traits>
#include <vector>

#include "core/thread_pool.h"
#include "ops/cpu/cpu_backend.h"
#include "ops/cpu/gemm.h"
#include "ops/cpu/cross_entropy_rows.h"
#include "ops/cpu/elementwise_util.h"
#include "ops/contracts/kernels_loss.h"
#include "ops/op_table.h"
#include "tensor/factory.h"

namespace precis::cpu {

namespace {

// Rows per chunk when the caller leaves it to us: about 8 M logits (at least 64 rows: fewer slow
// the GEMMs), the rows cut into equal chunks, and all rows in one chunk up to 1.5 times that: a
// short last chunk runs its GEMMs slowly (BERT-mini's masked head, 307 rows, bf16, one thread:
// chunks of 274 and 33 rows took 88-95 ms a step, two of 154 84-93, one of 307 83). At BERT-mini's
// full 2048 rows, chunks of 4 M logits ran 4-8 % slower than 8 M (bf16, 1 thread) and 8-15 % (f32,
// 2 threads); 16 M gained less than the machine's noise, for twice the buffers.
int64_t rows_per_chunk(int64_t rows, int64_t classes, int64_t asked) {
  if (asked > 0) return std::min(asked, rows);
  const int64_t target = std::max<int64_t>(64, (int64_t{1} << 23) / classes);
  if (rows <= target + target / 2) return rows;
  const int64_t chunks = (rows + target - 1) / target;
  return (rows + chunks - 1) / chunks;
}

// A (rows, cols) operand at data with the given strides, in the canonical form GemmMatrix wants.
GemmMatrix matrix(const void* data, int64_t rows, int64_t cols, int64_t row_stride, int64_t col_stride) {
  PRECIS_INTERNAL_ASSERT(normalize_matrix(rows, cols, row_stride, col_stride), "linear_cross_entropy: bad GEMM layout");
  return {data, 0, 0, row_stride, col_stride};
}

constexpr int64_t kColumnTile = 1024;  // columns per tile of the bias gradient's column sums
constexpr int64_t kRowGroup = 64;     // rows summed in fp32 before each fold into fp64

template <typename T>
class Kernel {
 public:
  Kernel(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& target, int64_t ignore_index, double eps,
         int64_t chunk, bool need_grad)
      : x_(x),
        w_(w),
        b_(b),
        target_(target),
        ignore_(ignore_index),
        eps_(eps),
        m_(x.size(0)),
        k_(x.size(1)),
        v_(w.size(0)),
        rows_(rows_per_chunk(m_, v_, chunk)),
        logits_(empty({rows_, v_}, {.dtype = x.dtype(), .device = x.device()})),
        grad_(need_grad ? empty({rows_, v_}, {.dtype = x.dtype(), .device = x.device()}) : Tensor()),
        stats_(empty({rows_, 2}, {.dtype = DType::f32, .device = x.device()})) {}

  // Every chunk of rows: its logits, loss and (grad_ defined) logit gradient for each row's loss
  // gradient row_grad (one f32 element), and that gradient's products. false, nothing written,
  // when oneDNN has no kernel for the logits' GEMM.
  bool run(const Tensor& loss_rows, const Tensor& weight_rows, const Tensor& row_grad, float* grad_x,
           float* grad_w, float* grad_b) {
    if (grad_b != nullptr) col_sums_.assign(static_cast<size_t>(v_), 0.0);
    const Tensor grad_rows = row_grad.expand({rows_});
    for (int64_t r0 = 0; r0 < m_; r0 += rows_) {
      const int64_t n = std::min(rows_, m_ - r0);
      const Tensor logits = logits_.narrow(0, 0, n), stats = stats_.narrow(0, 0, n), t = target_.narrow(0, r0, n);
      if (!logits_gemm(r0, n)) {
        PRECIS_INTERNAL_ASSERT(r0 == 0, "linear_cross_entropy: the logits' GEMM ran for the first chunk, not later");
        return false;
      }
      const Tensor loss = loss_rows.narrow(0, r0, n), weight = weight_rows.narrow(0, r0, n);
      if (!grad_.defined()) {
        cross_entropy_kernel<T>(loss, weight, stats, logits, t, Tensor(), ignore_, eps_);
        continue;
      }
      const Tensor g = grad_.narrow(0, 0, n);
      cross_entropy_with_grad_kernel<T>(loss, weight, stats, g, logits, t, Tensor(), grad_rows.narrow(0, 0, n),
                                        ignore_, eps_);
      if (grad_b != nullptr) add_column_sums(n);
      if (grad_x != nullptr) gradient_gemm(/*dx=*/true, r0, n, grad_x + r0 * k_);
      if (grad_w != nullptr) gradient_gemm(/*dx=*/false, r0, n, grad_w);
    }
    if (grad_b != nullptr)
      for (int64_t j = 0; j < v_; ++j) grad_b[j] = static_cast<float>(col_sums_[static_cast<size_t>(j)]);
    return true;
  }

 private:
  // logits_[:n] = x[r0 : r0 + n] · Wᵀ (+ b), in x's dtype (fp32 accumulation).
  bool logits_gemm(int64_t r0, int64_t n) {
    GemmArgs g;
    g.dtype = x_.dtype();
    g.m = n;
    g.k = k_;
    g.n = v_;
    g.a = matrix(static_cast<const T*>(x_.data_ptr()) + r0 * k_, n, k_, k_, 1);
    g.b = matrix(w_.data_ptr(), k_, v_, 1, k_);  // W's rows read as columns
    g.c = logits_.data_ptr();
    if (b_.defined()) g.bias = b_.data_ptr();
    return onednn_gemm(g);
  }

  // dx: grad_x's rows [r0, r0 + n) = G · W; else grad_w (+)= Gᵀ · x[r0 : r0 + n]. In fp32.
  void gradient_gemm(bool dx, int64_t r0, int64_t n, float* out) {
    const void* g_data = grad_.data_ptr();
    GemmArgs g;
    g.dtype = x_.dtype();
    g.c_f32 = g.dtype == DType::bf16;
    g.c = out;
    if (dx) {
      g.m = n;
      g.k = v_;
      g.n = k_;
      g.a = matrix(g_data, n, v_, v_, 1);
      g.b = matrix(w_.data_ptr(), v_, k_, k_, 1);
    } else {
      g.m = v_;
      g.k = n;
      g.n = k_;
      g.a = matrix(g_data, v_, n, 1, v_);  // Gᵀ: G read column by column
      g.b = matrix(static_cast<const T*>(x_.data_ptr()) + r0 * k_, n, k_, k_, 1);
      g.accumulate = r0 > 0;
    }
    PRECIS_INTERNAL_ASSERT(onednn_gemm(g), "linear_cross_entropy: oneDNN refused a gradient GEMM of ", g.m, "x",
                           g.k, "x", g.n);
  }

  // col_sums_ += the chunk's column sums of G (the rounded values the pair's bias gradient sums):
  // per column, fp32 sums of kRowGroup rows folded into fp64 in row order, whatever the threads.
  void add_column_sums(int64_t n) {
    const T* g = static_cast<const T*>(grad_.data_ptr());
    parallel_for(0, (v_ + kColumnTile - 1) / kColumnTile, 1, [&](int64_t tb, int64_t te) {
      float group[kColumnTile], buf[kColumnTile];
      for (int64_t tile = tb; tile < te; ++tile) {
        const int64_t c0 = tile * kColumnTile, len = std::min(kColumnTile, v_ - c0);
        double* sums = col_sums_.data() + c0;
        for (int64_t i0 = 0; i0 < n; i0 += kRowGroup) {
          std::fill(group, group + len, 0.0f);
          for (int64_t i = i0; i < std::min(n, i0 + kRowGroup); ++i) {
            const float* row;
            if constexpr (std::is_same_v<T, float>) {
              row = g + i * v_ + c0;
            } else {
              load_block<float>(g + i * v_ + c0, 1, buf, len);
              row = buf;
            }
            for (int64_t j = 0; j < len; ++j) group[j] += row[j];
          }
          for (int64_t j = 0; j < len; ++j) sums[j] += group[j];
        }
      }
    });
  }

  const Tensor& x_;
  const Tensor& w_;
  const Tensor& b_;
  const Tensor& target_;
  const int64_t ignore_;
  const double eps_;
  const int64_t m_, k_, v_, rows_;
  Tensor logits_;  // (rows_, V): a chunk's logits
  Tensor grad_;    // (rows_, V): their gradient, when wanted
  Tensor stats_;   // (rows_, 2): the chunk's row statistics
  std::vector<double> col_sums_;  // grad_b's running sums
};

template <typename T>
bool linear_cross_entropy_kernel(const Tensor& loss_rows, const Tensor& weight_rows, const Tensor& grad_x,
                                 const Tensor& grad_w, const Tensor& grad_b, const Tensor& x, const Tensor& w,
                                 const Tensor& b, const Tensor& target, const Tensor& row_grad,
                                 int64_t ignore_index, double label_smoothing, int64_t chunk_rows) {
  const bool need_grad = grad_x.defined() || grad_w.defined() || grad_b.defined();
  Kernel<T> k(x, w, b, target, ignore_index, label_smoothing, chunk_rows, need_grad);
  auto ptr = [](const Tensor& t) { return t.defined() ? static_cast<float*>(t.data_ptr()) : nullptr; };
  return k.run(loss_rows, weight_rows, row_grad, ptr(grad_x), ptr(grad_w), ptr(grad_b));
}

}  // namespace

void register_linear_cross_entropy_kernels() {
  register_kernel<kernels::LinearCrossEntropyKernel>(OpId::linear_cross_entropy, DeviceType::cpu, DType::bf16,
                                                     &linear_cross_entropy_kernel<BFloat16>);
  register_kernel<kernels::LinearCrossEntropyKernel>(OpId::linear_cross_entropy, DeviceType::cpu, DType::f32,
                                                     &linear_cross_entropy_kernel<float>);
}

}  // namespace precis::cpu

#else

namespace precis::cpu {
void register_linear_cross_entropy_kernels() {}  // the kernel is built on oneDNN's GEMM
}  // namespace precis::cpu

#endif  // PRECIS_HAS_ONEDNN
