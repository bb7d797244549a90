// linear_cross_entropy's CPU kernel (ops/contracts/kernels_loss.h LinearCrossEntropyKernel): the vocabulary
// in column blocks over all rows, so that no (M, V) tensor is ever made.
//
// Why blocks of columns: a block's logits, L = x · W_blockᵀ + b_block (M × nb), are a dense
// oneDNN GEMM whose result stays in cache, and the block's GEMM runs at the speed of a small one.
// Measured on the 2-vCPU AMX VM (bf16, 2 threads, BERT-mini's 2048 × 256 → 30522): all 30 blocks
// of 1024 columns into one reused buffer 16-22 ms, against 37-43 ms for the whole (M, V) GEMM,
// which is bound by writing its 125 MB result (a memset of 125 MB alone takes ~15 ms there). Row
// chunks, the op's other path, re-read all of W for every chunk.
//
// The price is a second GEMM per block: the loss needs every column of a row (its normaliser)
// before any gradient can be formed, so the kernel makes two passes over the blocks:
//   pass 1  per block: L; per row the running max m and Σ exp(x − m), rescaled when m grows
//           (the online normaliser of row_log_normaliser, ops/cpu/softmax_rows.h), the target's
//           logit, and Σ x for label smoothing. Then each row's loss.
//   pass 2  (gradients wanted) per block: L again; G = g_i·(softmax − (1 − ε)·onehot − ε/V)
//           rounded to x's dtype, as cross_entropy's backward rounds its logit gradient; then
//           grad_w[block] = Gᵀ·x (fp32), grad_x += G·W_block (fp32, oneDNN's sum post-op),
//           grad_b[block] = Σ_rows G (fp32).
// The gradients are those of the whole-matrix pair, accumulated in fp32 and left for the op's
// backward to multiply by the output gradient and round once.
#ifdef PRECIS_HAS_ONEDNN

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "core/thread_pool.h"
#include "ops/cpu/cpu_backend.h"
#include "ops/cpu/gemm.h"
#include "ops/cpu/softmax_rows.h"
#include "ops/contracts/kernels_loss.h"
#include "ops/op_table.h"
#include "tensor/factory.h"

namespace precis::cpu {

namespace {

// Columns per block: about 2 M logits (4 MB in bf16), at least 256 and at most 4096, a multiple of
// 64. BERT-mini's 2048 rows get 1024 (the measured best; 512 and 2048 were no faster).
int64_t block_columns(int64_t rows, int64_t classes) {
  const int64_t target = std::clamp<int64_t>((int64_t{1} << 21) / std::max<int64_t>(rows, 1), 256, 4096);
  return std::min(classes, target / 64 * 64);
}

// A (rows, cols) operand at data with the given strides, in the canonical form GemmMatrix wants.
GemmMatrix matrix(const void* data, int64_t rows, int64_t cols, int64_t row_stride, int64_t col_stride) {
  PRECIS_INTERNAL_ASSERT(normalize_matrix(rows, cols, row_stride, col_stride), "linear_cross_entropy: bad GEMM layout");
  return {data, 0, 0, row_stride, col_stride};
}

// Rows per parallel_for chunk of a row pass over `cols` columns: about 64 K elements.
int64_t row_grain(int64_t cols) { return std::max<int64_t>(1, (int64_t{1} << 16) / std::max<int64_t>(cols, 1)); }

// The running per-row state of pass 1.
struct RowState {
  float max = -std::numeric_limits<float>::infinity();
  float sum = 0;         // Σ exp(x − max) over the columns seen so far
  float target = 0;      // the target's logit, once its block has been seen
  double logit_sum = 0;  // Σ x (label smoothing only)
};

template <typename T>
class Kernel {
 public:
  Kernel(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& target, int64_t ignore_index, double eps)
      : x_(x),
        w_(w),
        b_(b),
        t_(static_cast<const int64_t*>(target.data_ptr())),
        ignore_(ignore_index),
        eps_(static_cast<float>(eps)),
        m_(x.size(0)),
        k_(x.size(1)),
        v_(w.size(0)),
        nb_(block_columns(m_, v_)),
        logits_(empty({m_, nb_}, {.dtype = x.dtype()})) {}

  // Pass 1 and the loss; false (nothing written) when oneDNN has no kernel for the block GEMM.
  bool loss(float* loss_rows, float* weight_rows) {
    state_.assign(static_cast<size_t>(m_), RowState{});
    for (int64_t c0 = 0; c0 < v_; c0 += nb_) {
      const int64_t n = std::min(nb_, v_ - c0);
      if (!block_logits(c0, n)) return false;
      accumulate_rows(c0, n);
    }
    const float smooth = eps_ / static_cast<float>(v_);
    for (int64_t i = 0; i < m_; ++i) {
      const RowState& r = state_[static_cast<size_t>(i)];
      if (t_[i] == ignore_) {
        loss_rows[i] = 0;
        weight_rows[i] = 0;
        continue;
      }
      // −log p_t = log_sum − (x_t − m); Σ_c −log p_c = V·log_sum + Σ_c (m − x_c), as row_loss
      // (ops/cpu/loss.cpp) writes them, so nothing rounds at m's magnitude but the last sum.
      const float log_sum = std::log(r.sum);
      float value = (1.0f - eps_) * (log_sum - (r.target - r.max));
      if (eps_ != 0.0f) {
        const double gap = static_cast<double>(v_) * r.max - r.logit_sum;
        value += smooth * (static_cast<float>(v_) * log_sum + static_cast<float>(gap));
      }
      loss_rows[i] = value;
      weight_rows[i] = 1;
    }
    return true;
  }

  // Pass 2, after loss(): the fp32 gradients for row gradients row_grad (mean: 1/count; ignored
  // rows get none). Any of grad_x (M, K), grad_w (V, K), grad_b (V) may be null.
  void gradients(float row_grad, float* grad_x, float* grad_w, float* grad_b) {
    for (int64_t c0 = 0; c0 < v_; c0 += nb_) {
      const int64_t n = std::min(nb_, v_ - c0);
      PRECIS_INTERNAL_ASSERT(block_logits(c0, n), "linear_cross_entropy: the block GEMM ran in pass 1, not in 2");
      block_gradient(c0, n, row_grad, grad_b != nullptr ? grad_b + c0 : nullptr);
      if (grad_w != nullptr) gemm(/*dx=*/false, c0, n, grad_w + c0 * k_);
      if (grad_x != nullptr) gemm(/*dx=*/true, c0, n, grad_x);
    }
  }

 private:
  T* logits() const { return static_cast<T*>(logits_.data_ptr()); }

  // logits_[:, :n] = x · W[c0 : c0 + n]ᵀ (+ b[c0 : c0 + n]), in x's dtype (fp32 accumulation).
  bool block_logits(int64_t c0, int64_t n) {
    GemmArgs g;
    g.dtype = x_.dtype();
    g.m = m_;
    g.k = k_;
    g.n = n;
    g.a = matrix(x_.data_ptr(), m_, k_, k_, 1);
    g.b = matrix(static_cast<const T*>(w_.data_ptr()) + c0 * k_, k_, n, 1, k_);  // W's rows read as columns
    g.c = logits();
    if (b_.defined()) g.bias = static_cast<const T*>(b_.data_ptr()) + c0;
    return onednn_gemm(g);
  }

  // Pass 1's update of every row's state with the block's columns [c0, c0 + n). Each row's
  // segment is widened to fp32 once (into L1) for its max, its exponentials and its sum.
  void accumulate_rows(int64_t c0, int64_t n) {
    const T* l = logits();
    parallel_for(0, m_, row_grain(n), [&](int64_t begin, int64_t end) {
      std::vector<float> widened(std::is_same_v<T, float> ? 0 : static_cast<size_t>(n));
      for (int64_t i = begin; i < end; ++i) {
        const float* row;
        if constexpr (std::is_same_v<T, float>) {
          row = l + i * n;
        } else {
          load_block<float>(l + i * n, 1, widened.data(), n);
          row = widened.data();
        }
        RowState& r = state_[static_cast<size_t>(i)];
        const float block_max = row_max(row, n);
        if (block_max > r.max) {
          r.sum *= std::exp(r.max - block_max);  // 0 · exp(−inf) = 0 for the first block
          r.max = block_max;
        }
        if (r.max != -std::numeric_limits<float>::infinity())
          r.sum += exp_shift_sum(row, static_cast<float*>(nullptr), n, r.max, 1.0f);
        const int64_t t = t_[i];
        if (t >= c0 && t < c0 + n) r.target = row[t - c0];
        if (eps_ != 0.0f) r.logit_sum += lanes_sum<float>(n, [&](int64_t j) { return row[j]; });
      }
    });
  }

  // The block's logits replaced by their gradient, in x's dtype: for a counted row
  // g·(exp(x − m − log_sum) − ε/V) − [j = t]·g·(1 − ε); 0 for an ignored row. With grad_b, also
  // grad_b[c0 : c0 + n] = Σ_i G[i, :] of the rounded values (what the pair's bias gradient sums):
  // each thread sums its rows in fp32 groups of 64 rows added in fp64, so the error does not grow
  // with M, and the threads' sums are added in a fixed order.
  void block_gradient(int64_t c0, int64_t n, float row_grad, float* grad_b) {
    constexpr int64_t kRowGroup = 64;
    T* l = logits();
    const float smooth = eps_ / static_cast<float>(v_);
    const int64_t parts = std::max<int64_t>(1, std::min<int64_t>(get_num_threads(), m_ / kRowGroup));
    if (grad_b != nullptr) col_sums_.assign(static_cast<size_t>(parts * n), 0.0);
    parallel_for(0, parts, 1, [&](int64_t p_begin, int64_t p_end) {
      std::vector<float> buf(static_cast<size_t>(n)), group(grad_b != nullptr ? static_cast<size_t>(n) : 0);
      for (int64_t p = p_begin; p < p_end; ++p) {
        double* sums = grad_b != nullptr ? col_sums_.data() + p * n : nullptr;
        const int64_t r_begin = m_ * p / parts, r_end = m_ * (p + 1) / parts;
        for (int64_t i = r_begin; i < r_end; ++i) {
          T* row = l + i * n;
          const int64_t t = t_[i];
          if (t == ignore_) {
            std::fill(row, row + n, T(0.0f));
          } else {
            const RowState& r = state_[static_cast<size_t>(i)];
            const float scale = row_grad / r.sum, shift = row_grad * smooth, hit = row_grad * (1.0f - eps_);
            load_block<float>(row, 1, buf.data(), n);
            exp_shift_sum(buf.data(), buf.data(), n, r.max, scale);
            if (shift != 0.0f)
              for (int64_t j = 0; j < n; ++j) buf[j] -= shift;
            if (t >= c0 && t < c0 + n) buf[t - c0] -= hit;
            store_block<T>(buf.data(), row, 1, n);
            if (sums != nullptr) {
              if constexpr (!std::is_same_v<T, float>) load_block<float>(row, 1, buf.data(), n);  // the rounded values
              for (int64_t j = 0; j < n; ++j) group[j] += buf[j];
            }
          }
          if (sums != nullptr && ((i - r_begin) % kRowGroup == kRowGroup - 1 || i + 1 == r_end)) {
            for (int64_t j = 0; j < n; ++j) sums[j] += group[j];
            std::fill(group.begin(), group.end(), 0.0f);
          }
        }
      }
    });
    if (grad_b == nullptr) return;
    for (int64_t j = 0; j < n; ++j) {
      double total = 0;
      for (int64_t p = 0; p < parts; ++p) total += col_sums_[static_cast<size_t>(p * n + j)];
      grad_b[j] = static_cast<float>(total);
    }
  }

  // dx: grad_x (M, K) += G · W[c0 : c0 + n]; else grad_w's rows [c0, c0 + n) = Gᵀ · x. In fp32.
  void gemm(bool dx, int64_t c0, int64_t n, float* out) {
    GemmArgs g;
    g.dtype = x_.dtype();
    g.c_f32 = g.dtype == DType::bf16;
    g.c = out;
    if (dx) {
      g.m = m_;
      g.k = n;
      g.n = k_;
      g.a = matrix(logits(), m_, n, n, 1);
      g.b = matrix(static_cast<const T*>(w_.data_ptr()) + c0 * k_, n, k_, k_, 1);
      g.accumulate = c0 > 0;
    } else {
      g.m = n;
      g.k = m_;
      g.n = k_;
      g.a = matrix(logits(), n, m_, 1, n);  // Gᵀ: G read column by column
      g.b = matrix(x_.data_ptr(), m_, k_, k_, 1);
    }
    PRECIS_INTERNAL_ASSERT(onednn_gemm(g), "linear_cross_entropy: oneDNN refused a gradient GEMM of ", g.m, "x",
                           g.k, "x", g.n);
  }

  const Tensor& x_;
  const Tensor& w_;
  const Tensor& b_;
  const int64_t* t_;
  const int64_t ignore_;
  const float eps_;
  const int64_t m_, k_, v_, nb_;
  Tensor logits_;  // (M, nb): one block's logits, then its gradient
  std::vector<RowState> state_;
  std::vector<double> col_sums_;  // block_gradient's per-thread column sums
};

template <typename T>
bool linear_cross_entropy_kernel(const Tensor& loss_rows, const Tensor& weight_rows, const Tensor& grad_x,
                                 const Tensor& grad_w, const Tensor& grad_b, const Tensor& x, const Tensor& w,
                                 const Tensor& b, const Tensor& target, double row_grad, int64_t ignore_index,
                                 double label_smoothing) {
  Kernel<T> k(x, w, b, target, ignore_index, label_smoothing);
  if (!k.loss(static_cast<float*>(loss_rows.data_ptr()), static_cast<float*>(weight_rows.data_ptr()))) return false;
  auto ptr = [](const Tensor& t) { return t.defined() ? static_cast<float*>(t.data_ptr()) : nullptr; };
  if (grad_x.defined() || grad_w.defined() || grad_b.defined())
    k.gradients(static_cast<float>(row_grad), ptr(grad_x), ptr(grad_w), ptr(grad_b));
  return true;
}

}  // namespace

// bf16 only. In f32 the second GEMM per block costs more than the passes over (M, V) it saves
// (f32 GEMMs run at a third of bf16's rate here): BERT-mini's f32 step took 789 ms with it against
// 669 ms with the op's row-chunk path, so f32 keeps that path.
void register_linear_cross_entropy_kernels() {
  register_kernel<kernels::LinearCrossEntropyKernel>(OpId::linear_cross_entropy, DeviceType::cpu, DType::bf16,
                                                     &linear_cross_entropy_kernel<BFloat16>);
}

}  // namespace precis::cpu

#else

namespace precis::cpu {
void register_linear_cross_entropy_kernels() {}  // the kernel is built on oneDNN's GEMM
}  // namespace precis::cpu

#endif  // PRECIS_HAS_ONEDNN
