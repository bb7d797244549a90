// linear_gelu's epilogue kernels (ops/contracts/kernels_epilogue.h): the forward pass over the GEMM's output
// (gelu, and gelu' for the backward) and the backward pass (the gradient at the GEMM's output and
// the bias gradient in one sweep).
//
// Bit-identity with the unfused pair (gelu, gelu_backward, then sum(·, {0}) for the bias): the
// element-wise math is the pair's own expressions (ops/cpu/gelu_math.h), and the work is split
// exactly as the pair's kernels split it (parallel_for over the flat range with gelu's grain,
// kBlock blocks from each chunk's start, the same buffers or memory as Eigen's destination),
// because Eigen evaluates a block's tail and unaligned head with scalar code whose last bits can
// differ from its vector code's (measured: f32 tanh-form gradients at shifted offsets). The bias
// gradient follows the sum kernel's column reduction (ops/cpu/reduce_plan.h): fp32 (f64 for f64)
// partials over chunks of chunk_pos rows, each summed row by row, then added in chunk order in f64.
#include <algorithm>
#include <string>
#include <vector>

#include "core/dtype_visit.h"
#include "core/error.h"
#include "core/opmath.h"
#include "core/thread_pool.h"
#include "ops/cpu/cpu_backend.h"
#include "ops/cpu/elementwise_util.h"
#include "ops/cpu/gelu_math.h"
#include "ops/cpu/reduce_plan.h"
#include "ops/contracts/kernels_epilogue.h"
#include "ops/op_table.h"

namespace precis::cpu {

namespace {

using gelu_math::ArrMap;
using gelu_math::ConstArrMap;

bool dense_2d(const Tensor& t) { return t.defined() && t.dim() == 2 && t.is_contiguous(); }

std::string describe(std::initializer_list<std::pair<const char*, const Tensor*>> ts) {
  std::string s;
  for (const auto& [name, t] : ts) {
    if (!s.empty()) s += ", ";
    s += std::string(name) + " " + (t->defined() ? t->describe() : std::string("undefined"));
  }
  return s;
}

DType compute_dtype(DType dt) { return dt == DType::f64 ? DType::f64 : DType::f32; }

// Every operand in one host memory: the CPU's, or the tests' fake CUDA device's
// (tests/support/fake_cuda), which runs the CPU kernels.
void check_on_cpu(const char* op, std::initializer_list<const Tensor*> ts, const std::string& all) {
  const Tensor* first = nullptr;
  bool same = true;
  for (const Tensor* t : ts) {
    if (!t->defined()) continue;
    if (first == nullptr) first = t;
    same = same && t->device() == first->device();
  }
  PRECIS_CHECK_DEVICE(same, op, ": the kernel needs every operand on one device, got ", all);
}

void check_forward(const Tensor& out, const Tensor& deriv, const Tensor& pre) {
  const char* op = "gelu_epilogue";
  const std::string all = describe({{"out", &out}, {"deriv", &deriv}, {"pre", &pre}});
  PRECIS_CHECK_SHAPE(dense_2d(pre) && dense_2d(out) && out.sizes() == pre.sizes() &&
                         (!deriv.defined() || (dense_2d(deriv) && deriv.sizes() == pre.sizes())),
                     op, ": pre, out and deriv must be (M, N) contiguous of one shape, got ", all,
                     "; call it through linear_gelu");
  PRECIS_CHECK_DTYPE(pre.is_floating_point() && out.dtype() == pre.dtype() &&
                         (!deriv.defined() || deriv.dtype() == compute_dtype(pre.dtype())),
                     op, ": out must have pre's floating dtype and deriv ", dtype_name(compute_dtype(pre.dtype())),
                     ", got ", all);
  check_on_cpu(op, {&out, &deriv, &pre}, all);
  PRECIS_CHECK(!deriv.defined() || (deriv.data_ptr() != pre.data_ptr() && deriv.data_ptr() != out.data_ptr()) ||
                   pre.numel() == 0,
               op, ": deriv must not alias pre or out, got ", all);
}

void check_backward(const Tensor& grad_pre, const Tensor& grad_bias, const Tensor& grad, const Tensor& saved,
                    bool saved_is_derivative) {
  const char* op = "gelu_epilogue_backward";
  const std::string all =
      describe({{"grad_pre", &grad_pre}, {"grad_bias", &grad_bias}, {"grad", &grad}, {"saved", &saved}});
  PRECIS_CHECK_SHAPE(dense_2d(grad) && dense_2d(grad_pre) && dense_2d(saved) && grad_pre.sizes() == grad.sizes() &&
                         saved.sizes() == grad.sizes(),
                     op, ": grad, grad_pre and saved must be (M, N) contiguous of one shape, got ", all,
                     "; call it through linear_gelu");
  PRECIS_CHECK_SHAPE(!grad_bias.defined() ||
                         (grad_bias.dim() == 1 && grad_bias.size(0) == grad.size(1) && grad_bias.is_contiguous() &&
                          grad.size(1) > 1),
                     op, ": grad_bias must be (N) contiguous with N = grad.size(1) > 1, got ", all);
  const DType saved_dtype = saved_is_derivative ? compute_dtype(grad.dtype()) : grad.dtype();
  PRECIS_CHECK_DTYPE(grad.is_floating_point() && grad_pre.dtype() == grad.dtype() && saved.dtype() == saved_dtype &&
                         (!grad_bias.defined() || grad_bias.dtype() == grad.dtype()),
                     op, ": grad_pre and grad_bias must have grad's floating dtype and saved ",
                     dtype_name(saved_dtype), saved_is_derivative ? " (the derivative)" : " (pre)", ", got ", all);
  check_on_cpu(op, {&grad_pre, &grad_bias, &grad, &saved}, all);
}

template <typename T>
void gelu_epilogue_kernel(const Tensor& out, const Tensor& deriv, const Tensor& pre, double param) {
  check_forward(out, deriv, pre);
  using C = opmath_t<T>;
  const bool tanh_form = param != 0.0;
  T* o = static_cast<T*>(out.data_ptr());
  const T* x = static_cast<const T*>(pre.data_ptr());
  C* d = deriv.defined() ? static_cast<C*>(deriv.data_ptr()) : nullptr;
  // The split of gelu's kernel (parallel_rows over contiguous operands: parallel_for over the flat
  // range with its grain) and of gelu_backward's for the derivative.
  parallel_for(0, pre.numel(), gelu_math::kGrain, [&](int64_t b, int64_t e) {
    const int64_t n = e - b;
    if constexpr (std::is_same_v<T, C>) {
      if (d != nullptr && !tanh_form) {
        // One erf per element for both; the blocks are gelu_backward's (its destination mapped
        // on memory), and gelu's tail is only products and sums of the erf, the same in any split.
        for (int64_t k = 0; k < n; k += kBlock) {
          const int64_t m = std::min(kBlock, n - k);
          ArrMap<C> dst(d + b + k, m), y(o + b + k, m);
          gelu_math::gelu_and_derivative_erf<C>(y, dst, ConstArrMap<C>(x + b + k, m));
        }
        return;
      }
      // gelu_backward maps its destination on memory block by block, gelu over the whole chunk;
      // the derivative first, as out may be pre itself.
      if (d != nullptr) {
        for (int64_t k = 0; k < n; k += kBlock) {
          const int64_t m = std::min(kBlock, n - k);
          ArrMap<C> dst(d + b + k, m);
          gelu_math::derivative<C>(dst, ConstArrMap<C>(x + b + k, m), tanh_form);
        }
      }
      ArrMap<C> dst(o + b, n);
      gelu_math::gelu(dst, ConstArrMap<C>(x + b, n), tanh_form);
    } else {
      // Both kernels convert kBlock-element blocks into aligned buffers.
      alignas(64) C xbuf[kBlock];
      alignas(64) C obuf[kBlock];
      alignas(64) C dbuf[kBlock];
      for (int64_t k = 0; k < n; k += kBlock) {
        const int64_t m = std::min(kBlock, n - k);
        load_block<C>(x + b + k, 1, xbuf, m);
        const ConstArrMap<C> xs(xbuf, m);
        ArrMap<C> y(obuf, m), dst(dbuf, m);
        if (d != nullptr && !tanh_form) {
          // vec_gelu.h's lanes give the same bits wherever they write: the derivative goes
          // straight to its memory (fp32 here) instead of through dbuf.
          ArrMap<C> direct(d + b + k, m);
          gelu_math::gelu_and_derivative_erf<C>(y, direct, xs);
        } else {
          if (d != nullptr) gelu_math::derivative<C>(dst, xs, tanh_form);
          gelu_math::gelu(y, xs, tanh_form);
          if (d != nullptr) std::copy(dbuf, dbuf + m, d + b + k);
        }
        store_block<T>(obuf, o + b + k, 1, m);
      }
    }
  });
}

template <typename T>
void gelu_epilogue_backward_kernel(const Tensor& grad_pre, const Tensor& grad_bias, const Tensor& grad,
                                   const Tensor& saved, bool saved_is_derivative, double param) {
  check_backward(grad_pre, grad_bias, grad, saved, saved_is_derivative);
  using C = opmath_t<T>;
  const bool tanh_form = param != 0.0;
  const int64_t M = grad.size(0), N = grad.size(1), numel = M * N;
  T* gp = static_cast<T*>(grad_pre.data_ptr());
  const T* g = static_cast<const T*>(grad.data_ptr());
  const T* xs = saved_is_derivative ? nullptr : static_cast<const T*>(saved.data_ptr());
  const C* ds = saved_is_derivative ? static_cast<const C*>(saved.data_ptr()) : nullptr;
  const bool bias = grad_bias.defined();
  if (bias && M == 0) {
    T* gb = static_cast<T*>(grad_bias.data_ptr());
    std::fill(gb, gb + N, convert<T>(C(0)));
    return;
  }

  // The sum kernel's column reduction of an (M, N) tensor over its rows: chunks of chunk_pos rows,
  // each one fp32 (f64) partial per column, summed row by row.
  const int64_t chunk_pos = kReduceColumnChunkRows;
  const int64_t n_chunks = bias ? (M + chunk_pos - 1) / chunk_pos : 0;
  std::vector<C> partials(static_cast<size_t>(n_chunks * N));
  std::vector<uint8_t> complete(static_cast<size_t>(n_chunks), 0);

  parallel_for(0, numel, gelu_math::kGrain, [&](int64_t b, int64_t e) {
    const int64_t n = e - b;
    std::vector<C> acc(bias ? static_cast<size_t>(N) : 0);
    int64_t cur = -1;  // the reduce chunk acc holds
    // acc into chunk cur's partials when this task saw all of it; a chunk cut by the task split is
    // summed after the pass (its rows are split between two tasks whose fp32 sums would not add
    // up to the row-by-row sum).
    auto flush = [&] {
      if (cur < 0) return;
      const int64_t c0 = cur * chunk_pos * N, c1 = std::min(M, (cur + 1) * chunk_pos) * N;
      if (c0 >= b && c1 <= e) {
        std::copy(acc.begin(), acc.end(), partials.begin() + cur * N);
        complete[cur] = 1;
      }
    };
    alignas(64) C gbuf[kBlock];
    alignas(64) C xbuf[kBlock];
    alignas(64) C obuf[kBlock];
    for (int64_t k = 0; k < n; k += kBlock) {
      const int64_t m = std::min(kBlock, n - k), i0 = b + k;
      // grad_pre for elements [i0, i0 + m): as gelu_backward's block, or a product with the saved
      // derivative (a lone multiply: the same in any split).
      const C* vals;  // the rounded values, in the compute type
      if constexpr (std::is_same_v<T, C>) {
        ArrMap<C> dst(gp + i0, m);
        if (saved_is_derivative) {
          dst = ConstArrMap<C>(g + i0, m) * ConstArrMap<C>(ds + i0, m);
        } else {
          const ConstArrMap<C> gs(g + i0, m);
          gelu_math::gelu_backward<C>(dst, gs, ConstArrMap<C>(xs + i0, m), tanh_form);
        }
        vals = gp + i0;
      } else {
        load_block<C>(g + i0, 1, gbuf, m);
        ArrMap<C> dst(obuf, m);
        if (saved_is_derivative) {
          dst = ConstArrMap<C>(gbuf, m) * ConstArrMap<C>(ds + i0, m);
        } else {
          load_block<C>(xs + i0, 1, xbuf, m);
          const ConstArrMap<C> gs(gbuf, m);
          gelu_math::gelu_backward<C>(dst, gs, ConstArrMap<C>(xbuf, m), tanh_form);
        }
        store_block<T>(obuf, gp + i0, 1, m);
        if (bias) load_block<C>(gp + i0, 1, obuf, m);  // the rounded values, as the sum kernel widens them
        vals = obuf;
      }
      if (!bias) continue;
      // Column sums, one row segment at a time.
      for (int64_t j = 0; j < m;) {
        const int64_t i = i0 + j, row = i / N, col = i % N, len = std::min(m - j, N - col);
        const int64_t c = row / chunk_pos;
        if (c != cur) {
          flush();
          std::fill(acc.begin(), acc.end(), C(0));
          cur = c;
        }
        C* a = acc.data() + col;
        const C* v = vals + j;
        for (int64_t t = 0; t < len; ++t) a[t] += v[t];
        j += len;
      }
    }
    if (bias) flush();
  });
  if (!bias) return;

  // The chunks the task split cut, summed from grad_pre in memory (at most one per task seam).
  for (int64_t c = 0; c < n_chunks; ++c) {
    if (complete[c]) continue;
    C* a = partials.data() + c * N;
    std::fill(a, a + N, C(0));
    alignas(64) C buf[kBlock];
    for (int64_t r = c * chunk_pos; r < std::min(M, (c + 1) * chunk_pos); ++r)
      for (int64_t j0 = 0; j0 < N; j0 += kBlock) {
        const int64_t m = std::min(kBlock, N - j0);
        load_block<C>(gp + r * N + j0, 1, buf, m);
        for (int64_t t = 0; t < m; ++t) a[j0 + t] += buf[t];
      }
  }
  T* gb = static_cast<T*>(grad_bias.data_ptr());
  for (int64_t j = 0; j < N; ++j) {
    double total = 0;
    for (int64_t c = 0; c < n_chunks; ++c) total = total + static_cast<double>(partials[c * N + j]);
    gb[j] = convert<T>(static_cast<C>(total));
  }
}

constexpr DType kFloating[] = {DType::f32, DType::f64, DType::f16, DType::bf16};

}  // namespace

void register_gelu_epilogue_kernels() {
  for (DType dt : kFloating)
    visit_dtype(dt, [&]<typename T>() {
      if constexpr (std::is_floating_point_v<opmath_t<T>>) {
        register_kernel<kernels::GeluEpilogueKernel>(OpId::gelu_epilogue, DeviceType::cpu, dt,
                                                     &gelu_epilogue_kernel<T>);
        register_kernel<kernels::GeluEpilogueBackwardKernel>(OpId::gelu_epilogue_backward, DeviceType::cpu, dt,
                                                             &gelu_epilogue_backward_kernel<T>);
      }
    });
}

}  // namespace precis::cpu
