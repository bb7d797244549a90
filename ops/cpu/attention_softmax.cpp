// CPU kernels of attention's fused score pass (ops/kernels_attention.h). Each row of S scores is
// widened, scaled and masked into a row buffer, then run through the same row routines as the
// softmax and dropout kernels (ops/cpu/softmax_rows.h, ops/cpu/dropout_row.h) with the same
// roundings in the same places as the composed ops, so the results are theirs bit for bit: one
// pass over the (..., L, S) scores instead of a cast, a scale, a mask, a softmax, a cast and a
// dropout pass each reading and writing it. The row buffer lives in L1 (S = 128: 512 bytes).
#include <algorithm>
#include <limits>
#include <vector>

#include "core/dtype_visit.h"
#include "core/opmath.h"
#include "core/thread_pool.h"
#include "ops/cpu/cpu_backend.h"
#include "ops/cpu/dropout_row.h"
#include "ops/cpu/elementwise_util.h"
#include "ops/cpu/softmax_rows.h"
#include "ops/dropout_math.h"
#include "ops/kernels_attention.h"
#include "ops/op_table.h"

namespace precis::cpu {

namespace {

using kernels::AttentionMask;
using kernels::AttentionSoftmaxArgs;

// Elements per parallel chunk: a few passes and an exponential per element, as softmax's.
constexpr int64_t kGrain = 16384;

// Where row r of an expanded mask starts: the mask's strides over the leading (..., L) dims.
class MaskRows {
 public:
  explicit MaskRows(const Tensor& mask) {
    if (!mask.defined()) return;
    for (int64_t d = 0; d + 1 < mask.dim(); ++d) {
      sizes_.push_back(mask.size(d));
      strides_.push_back(mask.stride(d));
    }
    step_ = mask.stride(-1);
  }
  int64_t offset(int64_t r) const {
    int64_t off = 0;
    for (int64_t d = static_cast<int64_t>(sizes_.size()) - 1; d >= 0; --d) {
      off += (r % sizes_[d]) * strides_[d];
      r /= sizes_[d];
    }
    return off;
  }
  int64_t step() const { return step_; }  ///< the stride between keys

 private:
  std::vector<int64_t> sizes_, strides_;
  int64_t step_ = 0;
};

template <typename T>
void attention_softmax_kernel(const Tensor& p, const Tensor& y, const Tensor& scores, const Tensor& mask,
                              const AttentionSoftmaxArgs& args) {
  using A = opmath_t<T>;
  if (scores.numel() == 0) return;
  const int64_t n = scores.size(-1), rows = scores.numel() / n, L = scores.size(-2);
  const T* sp = scores.data_ptr<T>();
  T* pp = p.data_ptr<T>();
  A* yp = static_cast<A*>(y.data_ptr());
  const bool y_is_p = static_cast<void*>(yp) == static_cast<void*>(pp);
  const A scale = static_cast<A>(args.scale);
  const bool drop = args.dropout_p > 0.0;
  const uint32_t threshold = drop ? kernels::dropout_keep_threshold(args.dropout_p) : 0;
  const A drop_scale = static_cast<A>(1.0 / (1.0 - args.dropout_p));
  const MaskRows mrows(mask);
  const int64_t ms = mrows.step();
  constexpr A kNegInf = -std::numeric_limits<A>::infinity();
  parallel_for(0, rows, std::max<int64_t>(1, kGrain / n), [&](int64_t r0, int64_t r1) {
    std::vector<A> t(static_cast<size_t>(n));
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t first = r * n;
      A* yr = yp + first;
      T* pr = pp + first;
      // t = scores·scale, as mul(scores.to(acc), scale) computes it.
      load_block<A>(sp + first, 1, t.data(), n);
      for (int64_t j = 0; j < n; ++j) t[j] *= scale;
      bool empty = false;
      switch (args.mask) {
        case AttentionMask::none: break;
        case AttentionMask::additive: {
          const A* m = static_cast<const A*>(mask.data_ptr()) + mrows.offset(r);
          bool all_masked = true;
          for (int64_t j = 0; j < n; ++j) {
            t[j] += m[j * ms];
            all_masked &= t[j] == kNegInf;
          }
          empty = all_masked;
          break;
        }
        case AttentionMask::keep: {
          const bool* k = static_cast<const bool*>(mask.data_ptr()) + mrows.offset(r);
          bool any = false;
          for (int64_t j = 0; j < n; ++j) {
            if (k[j * ms]) any = true;
            else t[j] = kNegInf;
          }
          empty = !any;
          break;
        }
        case AttentionMask::causal: {
          const int64_t i = r % L;
          for (int64_t j = i + 1; j < n; ++j) t[j] = kNegInf;
          break;
        }
      }
      if (empty) {
        // No visible key: zero weights (scaled_dot_product_attention's rule), no gradient.
        std::fill(pr, pr + n, T(0));
        if (!y_is_p) std::fill(yr, yr + n, A(0));
        continue;
      }
      row_softmax<A, A>(t.data(), yr, n);
      if (!drop) {
        if (!y_is_p) store_block<T>(yr, pr, 1, n);
      } else if constexpr (std::is_same_v<T, A>) {
        dropout_row<T>(pr, yr, 1, n, first, args.seed, args.offset, threshold, drop_scale);
      } else {
        // Rounded to T first, then dropped and rounded again: the weights' cast, then dropout.
        store_block<T>(yr, pr, 1, n);
        dropout_row<T>(pr, pr, 1, n, first, args.seed, args.offset, threshold, drop_scale);
      }
    }
  });
}

template <typename T>
void attention_softmax_backward_kernel(const Tensor& ds, const Tensor& grad, const Tensor& y, const Tensor& mask,
                                       const AttentionSoftmaxArgs& args) {
  using A = opmath_t<T>;
  if (y.numel() == 0) return;
  const int64_t n = y.size(-1), rows = y.numel() / n, L = y.size(-2);
  const T* gp = grad.data_ptr<T>();
  const A* yp = static_cast<const A*>(y.data_ptr());
  T* dp = ds.data_ptr<T>();
  const A scale = static_cast<A>(args.scale);
  const bool drop = args.dropout_p > 0.0;
  const uint32_t threshold = drop ? kernels::dropout_keep_threshold(args.dropout_p) : 0;
  const A drop_scale = static_cast<A>(1.0 / (1.0 - args.dropout_p));
  const MaskRows mrows(mask);
  const int64_t ms = mrows.step();
  parallel_for(0, rows, std::max<int64_t>(1, kGrain / n), [&](int64_t r0, int64_t r1) {
    std::vector<A> g(static_cast<size_t>(n)), dx(static_cast<size_t>(n));
    std::vector<T> dropped(drop && !std::is_same_v<T, A> ? static_cast<size_t>(n) : 0);
    for (int64_t r = r0; r < r1; ++r) {
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
        load_block<A>(gp + first, 1, g.data(), n);
      } else if constexpr (std::is_same_v<T, A>) {
        dropout_row<T>(g.data(), gp + first, 1, n, first, args.seed, args.offset, threshold, drop_scale);
      } else {
        dropout_row<T>(dropped.data(), gp + first, 1, n, first, args.seed, args.offset, threshold, drop_scale);
        load_block<A>(dropped.data(), 1, g.data(), n);
      }
      row_softmax_backward<A>(g.data(), yr, dx.data(), n);
      if (args.mask == AttentionMask::keep) {
        const bool* k = static_cast<const bool*>(mask.data_ptr()) + mrows.offset(r);
        for (int64_t j = 0; j < n; ++j)
          if (!k[j * ms]) dx[j] = A(0);
      } else if (args.mask == AttentionMask::causal) {
        std::fill(dx.begin() + std::min(n, r % L + 1), dx.end(), A(0));
      }
      for (int64_t j = 0; j < n; ++j) dx[j] *= scale;
      store_block<T>(dx.data(), dr, 1, n);
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
