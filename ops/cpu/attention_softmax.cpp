// CPU kernels of attention's fused score pass (ops/contracts/kernels_attention.h). Each row of S scores is
// widened, scaled and masked into a row buffer, then run through the same row routines as the
// softmax and dropout kernels (ops/cpu/softmax_rows.h, ops/cpu/dropout_row.h) with the same
// roundings in the same places as the composed ops, so the results are theirs bit for bit: one
// pass over the (..., L, S) scores instead of a cast, a scale, a mask, a softmax, a cast and a
// dropout pass each reading and writing it. The row buffer lives in L1 (S = 128: 512 bytes).
#include <algorithm>
#include <cstring>
#include <type_traits>
#include <limits>
#include <vector>

#include "core/dtype_visit.h"
#include "core/opmath.h"
#include "core/thread_pool.h"
#include "ops/cpu/cpu_backend.h"
#include "ops/cpu/dropout_row.h"
#include "ops/cpu/elementwise_util.h"
#include "ops/cpu/softmax_rows.h"
#include "ops/math/dropout_math.h"
#include "ops/contracts/kernels_attention.h"
#include "ops/op_table.h"

namespace precis::cpu {

namespace {

using kernels::AttentionMask;
using kernels::AttentionSoftmaxArgs;
using kernels::DropoutKeep;

// Elements per parallel chunk: a few passes and an exponential per element, as softmax's.
constexpr int64_t kGrain = 16384;

// Walks the rows of the (..., L, S) scores from row r0 on: the query index i (for causal masks)
// and where the row's mask starts in an expanded mask (its strides over the leading dims), kept
// as a multi-index advanced per row, so no row pays a division.
class RowCursor {
 public:
  RowCursor(const Tensor& mask, int64_t L, int64_t r0) : L_(L), i_(r0 % L) {
    if (!mask.defined()) return;
    const int64_t nd = mask.dim() - 1;
    sizes_.resize(nd);
    strides_.resize(nd);
    idx_.resize(nd);
    for (int64_t d = nd - 1; d >= 0; --d) {
      sizes_[d] = mask.size(d);
      strides_[d] = mask.stride(d);
      idx_[d] = r0 % sizes_[d];
      r0 /= sizes_[d];
      offset_ += idx_[d] * strides_[d];
    }
    step_ = mask.stride(-1);
  }
  int64_t query() const { return i_; }        ///< the row's query index i
  int64_t offset() const { return offset_; }  ///< where its mask row starts
  int64_t step() const { return step_; }      ///< the mask's stride between keys
  void next() {
    if (++i_ == L_) i_ = 0;
    for (int64_t d = static_cast<int64_t>(sizes_.size()) - 1; d >= 0; --d) {
      offset_ += strides_[d];
      if (++idx_[d] < sizes_[d]) return;
      offset_ -= sizes_[d] * strides_[d];
      idx_[d] = 0;
    }
  }

 private:
  int64_t L_, i_;
  std::vector<int64_t> sizes_, strides_, idx_;
  int64_t offset_ = 0, step_ = 0;
};

// x[j] = (keep[j] ? x[j] : masked)·factor over a row (keep contiguous), 32 bytes at a time on
// GCC/Clang vector extensions: the plain loop over bool stays scalar (a branch per key).
template <typename A>
inline void select_kept(const bool* __restrict keep, A* __restrict x, int64_t n, A masked, A factor) {
  constexpr int W = 32 / sizeof(A);
  typedef A V __attribute__((vector_size(32)));
  typedef uint8_t K __attribute__((vector_size(W)));
  typedef std::conditional_t<sizeof(A) == 4, int32_t, int64_t> I1;
  typedef I1 I __attribute__((vector_size(32)));
  const V fill = V{} + masked;
  int64_t j = 0;
  for (; j + W <= n; j += W) {
    V v;
    K k;
    std::memcpy(&v, x + j, sizeof v);
    std::memcpy(&k, keep + j, sizeof k);
    const I kept = __builtin_convertvector(k, I) != 0;
    const V r = (kept ? v : fill) * factor;
    std::memcpy(x + j, &r, sizeof r);
  }
  for (; j < n; ++j) x[j] = (keep[j] ? x[j] : masked) * factor;
}

template <typename T>
void attention_softmax_kernel(const Tensor& p, const Tensor& y, const Tensor& keep, const Tensor& scores,
                              const Tensor& mask, const AttentionSoftmaxArgs& args) {
  using A = opmath_t<T>;
  if (scores.numel() == 0) return;
  const int64_t n = scores.size(-1), rows = scores.numel() / n, L = scores.size(-2);
  const T* sp = scores.data_ptr<T>();
  T* pp = p.data_ptr<T>();
  // y undefined (nothing will read it): each row's softmax stays in the row buffer.
  A* yp = y.defined() ? static_cast<A*>(y.data_ptr()) : nullptr;
  const bool y_is_p = static_cast<void*>(yp) == static_cast<void*>(pp);
  const A scale = static_cast<A>(args.scale);
  const bool drop = args.dropout_p > 0.0;
  const uint32_t threshold = drop ? kernels::dropout_keep_threshold(args.dropout_p) : 0;
  const A drop_scale = static_cast<A>(1.0 / (1.0 - args.dropout_p));
  const uint64_t seed = args.rng.seed, offset = kernels::philox_offset(args.rng.offset, args.rng.offset_base);
  // The packed mask's words: written (draw_store), read (replay), or none (draw).
  uint32_t* kp = drop && args.keep != DropoutKeep::draw ? static_cast<uint32_t*>(keep.data_ptr()) : nullptr;
  const bool replay = drop && args.keep == DropoutKeep::replay;
  const int64_t words = (n + 31) / 32;
  constexpr A kNegInf = -std::numeric_limits<A>::infinity();
  parallel_for(0, rows, std::max<int64_t>(1, kGrain / n), [&](int64_t r0, int64_t r1) {
    // Locals, not the captures: stores through the row pointers could alias a captured scale, and
    // the loops would reload it per element instead of vectorising.
    std::vector<A> buf(static_cast<size_t>(n)), ybuf(yp != nullptr ? 0 : static_cast<size_t>(n));
    A* __restrict t = buf.data();
    const A sc = scale;
    RowCursor cur(mask, L, r0);
    for (int64_t r = r0; r < r1; ++r, cur.next()) {
      const int64_t first = r * n;
      A* yr = yp != nullptr ? yp + first : ybuf.data();
      T* pr = pp + first;
      // t = scores·scale, as mul(scores.to(acc), scale) computes it.
      load_block<A>(sp + first, 1, t, n);
      for (int64_t j = 0; j < n; ++j) t[j] *= sc;
      bool empty = false;
      switch (args.mask) {
        case AttentionMask::none: break;
        case AttentionMask::additive: {
          const A* __restrict m = static_cast<const A*>(mask.data_ptr()) + cur.offset();
          const int64_t ms = cur.step();
          if (ms == 1) {
            for (int64_t j = 0; j < n; ++j) t[j] += m[j];
          } else {
            for (int64_t j = 0; j < n; ++j) t[j] += m[j * ms];
          }
          empty = std::all_of(t, t + n, [](A v) { return v == -std::numeric_limits<A>::infinity(); });  // stops at the first visible key
          break;
        }
        case AttentionMask::keep: {
          const bool* k = static_cast<const bool*>(mask.data_ptr()) + cur.offset();
          const int64_t ms = cur.step();
          int64_t j = 0;
          while (j < n && !k[j * ms]) ++j;  // stops at the first visible key
          empty = j == n;
          if (ms == 1) {
            select_kept(k, t, n, kNegInf, A(1));
          } else {
            for (j = 0; j < n; ++j) t[j] = k[j * ms] ? t[j] : kNegInf;
          }
          break;
        }
        case AttentionMask::causal: std::fill(t + std::min(n, cur.query() + 1), t + n, kNegInf); break;
      }
      if (empty) {
        // No visible key: zero weights (scaled_dot_product_attention's rule), no gradient.
        std::fill(pr, pr + n, T(0));
        if (!y_is_p && yp != nullptr) std::fill(yr, yr + n, A(0));
        continue;
      }
      row_softmax<A, A>(t, yr, n);
      if (!drop) {
        if (!y_is_p) store_block<T>(yr, pr, 1, n);
        continue;
      }
      uint32_t* kr = kp != nullptr ? kp + r * words : nullptr;
      auto drop_row = [&](const T* src) {
        if (replay) {
          masked_row<T>(pr, src, n, kr, drop_scale);
        } else {
          dropout_row<T>(pr, src, 1, n, first, seed, offset, threshold, drop_scale, kr);
        }
      };
      if constexpr (std::is_same_v<T, A>) {
        drop_row(yr);
      } else {
        // Rounded to T first, then dropped and rounded again: the weights' cast, then dropout.
        store_block<T>(yr, pr, 1, n);
        drop_row(pr);
      }
    }
  });
}

template <typename T>
void attention_softmax_backward_kernel(const Tensor& ds, const Tensor& grad, const Tensor& y, const Tensor& keep,
                                       const Tensor& mask, const AttentionSoftmaxArgs& args) {
  using A = opmath_t<T>;
  if (y.numel() == 0) return;
  const int64_t n = y.size(-1), rows = y.numel() / n, L = y.size(-2);
  const T* gp = grad.data_ptr<T>();
  const A* yp = static_cast<const A*>(y.data_ptr());
  T* dp = ds.data_ptr<T>();
  const A scale = static_cast<A>(args.scale);
  const bool drop = args.dropout_p > 0.0;
  const A drop_scale = static_cast<A>(1.0 / (1.0 - args.dropout_p));
  const uint32_t* kp = drop ? static_cast<const uint32_t*>(keep.data_ptr()) : nullptr;
  const int64_t words = (n + 31) / 32;
  parallel_for(0, rows, std::max<int64_t>(1, kGrain / n), [&](int64_t r0, int64_t r1) {
    std::vector<A> gbuf(static_cast<size_t>(n)), dxbuf(static_cast<size_t>(n));
    A* __restrict g = gbuf.data();
    A* __restrict dx = dxbuf.data();
    const A sc = scale;  // a local: see the forward kernel
    std::vector<T> dropped(drop && !std::is_same_v<T, A> ? static_cast<size_t>(n) : 0);
    RowCursor cur(mask, L, r0);
    for (int64_t r = r0; r < r1; ++r, cur.next()) {
      const int64_t first = r * n;
      const A* yr = yp + first;
      T* dr = dp + first;
      // The forward zeroed the weights of rows with no visible key (a softmax row never is all
      // zero), and their gradient is zero whatever the upstream gradient holds.
      if (std::all_of(yr, yr + n, [](A v) { return v == A(0); })) {
        std::fill(dr, dr + n, T(0));
        continue;
      }
      // g = dropout's backward of grad (rounded to T), widened.
      if (!drop) {
        load_block<A>(gp + first, 1, g, n);
      } else if constexpr (std::is_same_v<T, A>) {
        masked_row<T>(g, gp + first, n, kp + r * words, drop_scale);
      } else {
        masked_row<T>(dropped.data(), gp + first, n, kp + r * words, drop_scale);
        load_block<A>(dropped.data(), 1, g, n);
      }
      row_softmax_backward<A>(g, yr, dx, n);
      // Zero where a key is masked (where's backward), then times the scale (mul's backward):
      // (masked ? 0 : dx)·scale in one pass.
      if (args.mask == AttentionMask::keep) {
        const bool* k = static_cast<const bool*>(mask.data_ptr()) + cur.offset();
        const int64_t ms = cur.step();
        if (ms == 1) {
          select_kept(k, dx, n, A(0), sc);
        } else {
          for (int64_t j = 0; j < n; ++j) dx[j] = (k[j * ms] ? dx[j] : A(0)) * sc;
        }
      } else {
        if (args.mask == AttentionMask::causal) std::fill(dx + std::min(n, cur.query() + 1), dx + n, A(0));
        for (int64_t j = 0; j < n; ++j) dx[j] *= sc;
      }
      store_block<T>(dx, dr, 1, n);
    }
  });
}

}  // namespace

void register_attention_kernels() {
  for (DType dt : {DType::f32, DType::f64, DType::f16, DType::bf16})
    visit_dtype(dt, [&]<typename T>() {
      if constexpr (std::is_floating_point_v<opmath_t<T>>) {
        register_kernel<kernels::AttentionSoftmaxKernel>(OpId::attention_softmax, DeviceType::cpu, dt,
                                                         &attention_softmax_kernel<T>);
        register_kernel<kernels::AttentionSoftmaxBackwardKernel>(OpId::attention_softmax_backward, DeviceType::cpu,
                                                                 dt, &attention_softmax_backward_kernel<T>);
      }
    });
}

}  // namespace precis::cpu
