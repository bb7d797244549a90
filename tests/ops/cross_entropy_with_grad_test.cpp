// cross_entropy_with_grad (the CPU kernel that does cross-entropy's forward and backward with one
// exp per logit, for linear_cross_entropy) against the two-kernel pair it replaces and against an
// f64 reference from the definition: widths of one element, one vector tail, one chunk, a few
// chunks with a tail, and BERT's vocabulary; f32/f64/f16/bf16, label smoothing, class weights,
// ignored rows, grad_rows of stride 0 and 1, one and two threads; rows with NaN and −inf; the
// bad-input cases of its op-table row.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <typeinfo>
#include <vector>

#include "autograd/engine.h"
#include "core/thread_pool.h"
#include "ops/functional.h"
#include "ops/contracts/kernels_loss.h"
#include "ops/op_table.h"
#include "tests/support/op_cases.h"
#include "tests/support/tensor_testing.h"

using namespace precis;
using namespace precis::testing;

namespace {

constexpr int64_t kIgnore = -100;

struct Outputs {
  Tensor loss, wrow, stats, grad;
};

DType acc_of(DType dt) { return dt == DType::f64 ? DType::f64 : DType::f32; }

// The fused kernel (fused = true) or cross_entropy then cross_entropy_backward on one problem.
Outputs run(bool fused, const Tensor& x, const Tensor& target, const Tensor& weight, const Tensor& grad_rows,
            double eps) {
  const int64_t M = x.size(0);
  const TensorOptions acc{.dtype = acc_of(x.dtype())};
  Outputs o{full({M}, 7.0, acc), full({M}, 7.0, acc), full({M, 2}, 7.0, acc), full(x.sizes(), 7.0, {.dtype = x.dtype()})};
  if (fused) {
    kernel<kernels::CrossEntropyWithGradKernel>(OpId::cross_entropy_with_grad, DeviceType::cpu, x.dtype())(
        o.loss, o.wrow, o.stats, o.grad, x, target, weight, grad_rows, kIgnore, eps);
  } else {
    kernel<kernels::CrossEntropyKernel>(OpId::cross_entropy, DeviceType::cpu, x.dtype())(o.loss, o.wrow, o.stats, x,
                                                                                         target, weight, kIgnore, eps);
    kernel<kernels::CrossEntropyBackwardKernel>(OpId::cross_entropy_backward, DeviceType::cpu, x.dtype())(
        o.grad, x, o.stats, target, weight, grad_rows, kIgnore, eps);
  }
  return o;
}

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.sizes() == b.sizes() &&
         std::memcmp(a.data_ptr(), b.data_ptr(), static_cast<size_t>(a.numel()) * a.element_size()) == 0;
}

// Unit roundoff of a storage dtype.
double unit(DType dt) {
  switch (dt) {
    case DType::f64: return 0x1p-53;
    case DType::f16: return 0x1p-11;
    case DType::bf16: return 0x1p-8;
    default: return 0x1p-24;
  }
}

// Smallest positive normal of a storage dtype: below it values are subnormal or flushed.
double tiny(DType dt) {
  switch (dt) {
    case DType::f64: return 1e-300;
    case DType::f16: return 0x1p-14;
    default: return 0x1p-126;
  }
}

struct Problem {
  Tensor x, target, weight, grad_rows;
};

// Logits with a spread of ±4σ·2 (so rows have clear maxima and many tiny probabilities), random
// targets with every third row ignored, optional positive class weights, grad_rows of stride 0
// (one value, as a reduced loss's) or 1 (one per row, signs mixed).
Problem problem(int64_t M, int64_t C, DType dt, bool weighted, bool strided_rows, uint64_t seed) {
  Generator g(seed);
  Problem p;
  p.x = mul(randn({M, C}, {.dtype = DType::f64}, &g), 2.0).to(dt);
  std::vector<int64_t> t = randint(0, C, {M}, {.dtype = DType::i64}, &g).to_vector<int64_t>();
  for (size_t i = 1; i < t.size(); i += 3) t[i] = kIgnore;
  p.target = from_vector<int64_t>(t, {M});
  const DType acc = acc_of(dt);
  if (weighted) p.weight = add(rand({C}, {.dtype = DType::f64}, &g), 0.25).to(acc);
  p.grad_rows = strided_rows ? sub(rand({M}, {.dtype = DType::f64}, &g), 0.3).to(acc)
                             : full({1}, 1.0 / 3.0, {.dtype = acc}).expand({M});
  return p;
}

// The f64 reference from the definition, on the (exactly widened) logits.
Outputs reference(const Problem& p, double eps) {
  const int64_t M = p.x.size(0), C = p.x.size(1);
  const std::vector<double> x = p.x.to(DType::f64).to_vector<double>();
  const std::vector<int64_t> t = p.target.to_vector<int64_t>();
  const std::vector<double> w = p.weight.defined() ? p.weight.to(DType::f64).to_vector<double>()
                                                   : std::vector<double>(static_cast<size_t>(C), 1.0);
  const std::vector<double> g = p.grad_rows.contiguous().to(DType::f64).to_vector<double>();
  double w_total = 0;
  for (double v : w) w_total += v;
  std::vector<double> loss(M), wrow(M), stats(2 * M), grad(M * C, 0.0);
  for (int64_t r = 0; r < M; ++r) {
    const double* xr = x.data() + r * C;
    double m = -INFINITY, s = 0;
    for (int64_t c = 0; c < C; ++c) m = std::max(m, xr[c]);
    for (int64_t c = 0; c < C; ++c) s += std::exp(xr[c] - m);
    const double log_sum = std::log(s);
    stats[2 * r] = m;
    stats[2 * r + 1] = log_sum;
    if (t[r] == kIgnore) continue;
    const double wt = w[t[r]];
    double smooth = 0;
    for (int64_t c = 0; c < C; ++c) smooth += w[c] * (log_sum - (xr[c] - m));
    loss[r] = (1 - eps) * wt * (log_sum - (xr[t[r]] - m)) + eps / static_cast<double>(C) * smooth;
    wrow[r] = wt;
    const double a = (1 - eps) * wt + eps / static_cast<double>(C) * w_total;
    for (int64_t c = 0; c < C; ++c)
      grad[r * C + c] = g[r] * (a * std::exp(xr[c] - m - log_sum) - (c == t[r] ? (1 - eps) * wt : 0.0) -
                                eps / static_cast<double>(C) * w[c]);
  }
  return {from_vector<double>(loss, {M}), from_vector<double>(wrow, {M}), from_vector<double>(stats, {M, 2}),
          from_vector<double>(grad, {M, C})};
}

// Worst |a − b| / (atol + rtol·|b|) over the elements: <= 1 passes.
double worst(const Tensor& a, const Tensor& b, double rtol, double atol) {
  const std::vector<double> av = a.to(DType::f64).to_vector<double>(), bv = b.to(DType::f64).to_vector<double>();
  double w = 0;
  for (size_t i = 0; i < av.size(); ++i) w = std::max(w, std::abs(av[i] - bv[i]) / (atol + rtol * std::abs(bv[i])));
  return w;
}

// Per gradient element, the size of the terms it is the difference of, |g|·(a·p_j + ε/C·w_j +
// [j = t]·(1 − ε)·w_t), from the f64 reference: where they cancel, an element's error is relative
// to them, not to itself.
std::vector<double> term_sizes(const Problem& p, const Outputs& ref, double eps) {
  const int64_t M = p.x.size(0), C = p.x.size(1);
  const std::vector<double> r = ref.grad.to_vector<double>();
  const std::vector<int64_t> t = p.target.to_vector<int64_t>();
  const std::vector<double> w = p.weight.defined() ? p.weight.to(DType::f64).to_vector<double>()
                                                   : std::vector<double>(static_cast<size_t>(C), 1.0);
  const std::vector<double> g = p.grad_rows.contiguous().to(DType::f64).to_vector<double>();
  std::vector<double> terms(r.size(), 0.0);
  for (int64_t i = 0; i < M; ++i) {
    if (t[i] == kIgnore) continue;
    for (int64_t j = 0; j < C; ++j) {
      const double smooth = g[i] * eps / static_cast<double>(C) * w[j], hit = j == t[i] ? g[i] * (1 - eps) * w[t[i]] : 0;
      terms[i * C + j] = std::abs(r[i * C + j] + smooth + hit) + std::abs(smooth) + std::abs(hit);
    }
  }
  return terms;
}

// Worst |a − b| / (rel·|b| + term_rel·terms + floor) over the elements: <= 1 passes.
double worst_terms(const Tensor& a, const Tensor& b, const std::vector<double>& terms, double rel, double term_rel,
                   double floor) {
  const std::vector<double> av = a.to(DType::f64).to_vector<double>(), bv = b.to(DType::f64).to_vector<double>();
  double w = 0;
  for (size_t i = 0; i < av.size(); ++i)
    w = std::max(w, std::abs(av[i] - bv[i]) / (rel * std::abs(bv[i]) + term_rel * terms[i] + floor));
  return w;
}

class Threads {
 public:
  explicit Threads(int n) : old_(get_num_threads()) { set_num_threads(n); }
  ~Threads() { set_num_threads(old_); }

 private:
  int old_;
};

TEST_CASE("cross_entropy_with_grad matches the two-kernel pair and the f64 definition", "[ops][loss]") {
  // (width, rows): rows enough for two threads to split them (the grain is ~16K logits).
  const std::pair<int64_t, int64_t> shapes[] = {{1, 40000}, {7, 5000}, {2048, 17}, {4099, 9}, {30522, 5}};
  for (DType dt : {DType::f32, DType::f64, DType::f16, DType::bf16})
    for (const auto& [C, M] : shapes)
      for (double eps : {0.0, 0.1})
        for (bool weighted : {false, true})
          for (bool strided : {false, true})
            for (int threads : {1, 2}) {
              // Keep the run short: weights and per-row gradients are orthogonal to the width.
              if (weighted && strided) continue;
              Threads pool(threads);
              const Problem p = problem(M, C, dt, weighted, strided, static_cast<uint64_t>(C * 7 + M));
              INFO(dtype_name(dt) << " (" << M << ", " << C << ") eps " << eps << " weighted " << weighted
                                  << " grad_rows stride " << strided << " threads " << threads);
              const Outputs f = run(true, p.x, p.target, p.weight, p.grad_rows, eps);
              const Outputs u = run(false, p.x, p.target, p.weight, p.grad_rows, eps);
              // The per-row results come from the same arithmetic: identical bits.
              CHECK(same_bits(f.loss, u.loss));
              CHECK(same_bits(f.wrow, u.wrow));
              CHECK(same_bits(f.stats, u.stats));
              // The gradient is too wherever the row max is in the first chunk (every row of at most
              // one chunk). In chunks before the max's, e·exp(M_c − m) replaces exp(x − m): the exp's
              // argument rounds differently, (|x − m| + a few) compute ulps relative to the term a·p
              // (logits here reach |x − m| ~ 20), and at most one storage rounding step more.
              const Outputs r = reference(p, eps);
              const std::vector<double> terms = term_sizes(p, r, eps);
              const double ua = dt == DType::f64 ? 0x1p-53 : 0x1p-24, ut = unit(dt);
              if (C <= 2048) {
                CHECK(same_bits(f.grad, u.grad));
              } else {
                const double wv = worst_terms(f.grad, u.grad, terms, 2 * ut, 32 * ua, tiny(dt));
                CAPTURE(wv);
                CHECK(wv <= 1.0);
              }
              // Against f64: the loss and stats within the fp32 (f64) sums' error over C terms; the
              // gradient within its storage rounding plus the exp's and the sum's error on its terms.
              const double sum_err = (dt == DType::f64 ? 1e-13 : 2e-6) * (1.0 + std::log2(static_cast<double>(C)));
              CHECK(worst(f.loss, r.loss, sum_err, sum_err) <= 1.0);
              CHECK(worst(f.stats, r.stats, sum_err, sum_err) <= 1.0);
              CHECK(worst(f.wrow, r.wrow, 0, 0) <= 1.0);
              const double wr = worst_terms(f.grad, r.grad, terms, ut, 32 * ua + sum_err, tiny(dt));
              CAPTURE(wr);
              CHECK(wr <= 1.0);
              // Ignored rows: gradient exactly 0 (every third row from row 1).
              const Tensor ignored = f.grad.narrow(0, 1, 1).to(DType::f64);
              CHECK(max(abs(ignored)).item<double>() == 0.0);
            }
}

TEST_CASE("cross_entropy_with_grad: a row whose max is in its first chunk has the pair's gradient bits",
          "[ops][loss]") {
  for (DType dt : {DType::f32, DType::bf16}) {
    Problem p = problem(3, 30522, dt, false, true, 91);
    // Every row's max in chunk 0: then every chunk's running max is the row max.
    std::vector<double> x = p.x.to(DType::f64).to_vector<double>();
    for (int64_t r = 0; r < 3; ++r) x[r * 30522 + 5] = 20.0;
    p.x = from_vector<double>(x, {3, 30522}).to(dt);
    const Outputs f = run(true, p.x, p.target, p.weight, p.grad_rows, 0.1);
    const Outputs u = run(false, p.x, p.target, p.weight, p.grad_rows, 0.1);
    INFO(dtype_name(dt));
    CHECK(same_bits(f.grad, u.grad));
    CHECK(same_bits(f.stats, u.stats));
    CHECK(same_bits(f.loss, u.loss));
  }
}

TEST_CASE("cross_entropy_with_grad: NaN and −inf logits give the pair's NaN pattern", "[ops][loss]") {
  const int64_t C = 4099;
  std::vector<float> x(3 * C);
  Generator g(5);
  const std::vector<float> base = randn({3 * C}, {}, &g).to_vector<float>();
  for (size_t i = 0; i < x.size(); ++i) x[i] = base[i];
  x[0 * C + 3000] = NAN;                                         // row 0: one NaN, late chunk
  for (int64_t c = 0; c < C; ++c) x[1 * C + c] = -INFINITY;      // row 1: all −inf
  for (int64_t c = 0; c < 2048; ++c) x[2 * C + c] = -INFINITY;   // row 2: first chunk −inf
  const Tensor xt = from_vector<float>(x, {3, C});
  const Tensor target = from_vector<int64_t>({5, 6, 3000}, {3});
  const Tensor grad_rows = full({1}, 1.0, {}).expand({3});
  const Outputs f = run(true, xt, target, Tensor(), grad_rows, 0.0);
  const Outputs u = run(false, xt, target, Tensor(), grad_rows, 0.0);
  const std::vector<float> fl = f.loss.to_vector<float>(), ul = u.loss.to_vector<float>();
  const std::vector<float> fg = f.grad.to_vector<float>(), ug = u.grad.to_vector<float>();
  for (int64_t r = 0; r < 3; ++r) {
    INFO("row " << r);
    CHECK(std::isnan(fl[r]) == std::isnan(ul[r]));
    if (!std::isnan(ul[r])) CHECK(fl[r] == ul[r]);
    int64_t nan_mismatch = 0, far = 0;
    for (int64_t c = 0; c < C; ++c) {
      const float a = fg[r * C + c], b = ug[r * C + c];
      nan_mismatch += std::isnan(a) != std::isnan(b);
      far += !std::isnan(b) && std::abs(a - b) > 1e-6f * std::abs(b) + 1e-37f;
    }
    CHECK(nan_mismatch == 0);
    CHECK(far == 0);
  }
  CHECK(std::isnan(fl[0]));  // the NaN row stays NaN; row 2 is finite
  CHECK_FALSE(std::isnan(fl[2]));
}

namespace {

// A CPU kernel unregistered for the scope, registered again at its end (a throw included).
class WithoutKernel {
 public:
  WithoutKernel(OpId op, DType dtype, const std::type_info& signature)
      : op_(op), dtype_(dtype), signature_(signature), saved_(find_kernel(op, DeviceType::cpu, dtype)) {
    register_kernel(op, DeviceType::cpu, dtype, nullptr, signature);
  }
  ~WithoutKernel() { register_kernel(op_, DeviceType::cpu, dtype_, saved_, signature_); }
  WithoutKernel(const WithoutKernel&) = delete;
  WithoutKernel& operator=(const WithoutKernel&) = delete;

 private:
  OpId op_;
  DType dtype_;
  const std::type_info& signature_;
  void* saved_;
};

// The fused row kernel behind a call counter, so a test sees that a path went through it.
void* g_with_grad = nullptr;
int g_with_grad_calls = 0;
void counted_with_grad(const Tensor& loss_rows, const Tensor& weight_rows, const Tensor& row_stats,
                       const Tensor& grad_x, const Tensor& x, const Tensor& target, const Tensor& weight,
                       const Tensor& grad_rows, int64_t ignore_index, double label_smoothing) {
  ++g_with_grad_calls;
  reinterpret_cast<kernels::CrossEntropyWithGradKernel*>(g_with_grad)(
      loss_rows, weight_rows, row_stats, grad_x, x, target, weight, grad_rows, ignore_index, label_smoothing);
}

}  // namespace

TEST_CASE("linear_cross_entropy's generic path takes the fused kernel on CPU and the pair without it", "[ops][loss]") {
  // Same operands through both ways of the op's generic path, which runs where no backend kernel
  // of linear_cross_entropy is registered (the CPU's is, for f32 and bf16: unregistered here);
  // the second pass also without the fused row's kernel. The losses are identical and the
  // gradients agree to a few ulps.
  for (DType dt : {DType::f32, DType::bf16}) {
    INFO(dtype_name(dt));
    const Tensor x = randn_input({40, 16}, true, 3, dt), w = randn_input({4100, 16}, true, 4, dt);
    Generator g(6);
    const Tensor t = randint(0, 4100, {40}, {.dtype = DType::i64}, &g);
    auto pass = [&] {
      const Tensor loss = linear_cross_entropy(x, w, Tensor(), t, {.label_smoothing = 0.05, .chunk_rows = 16});
      TensorList out = autograd::grad({loss}, {x, w});
      out.insert(out.begin(), loss);
      return out;
    };
    g_with_grad = find_kernel(OpId::cross_entropy_with_grad, DeviceType::cpu, dt);
    REQUIRE(g_with_grad != nullptr);
    WithoutKernel generic(OpId::linear_cross_entropy, dt, typeid(kernels::LinearCrossEntropyKernel));
    TensorList fused;
    {
      WithoutKernel counted(OpId::cross_entropy_with_grad, dt, typeid(kernels::CrossEntropyWithGradKernel));
      register_kernel<kernels::CrossEntropyWithGradKernel>(OpId::cross_entropy_with_grad, DeviceType::cpu, dt,
                                                           &counted_with_grad);
      g_with_grad_calls = 0;
      fused = pass();
      CHECK(g_with_grad_calls == 3);  // one call per chunk of 16 of the 40 rows
    }
    TensorList pair;
    {
      WithoutKernel no_fused(OpId::cross_entropy_with_grad, dt, typeid(kernels::CrossEntropyWithGradKernel));
      pair = pass();
    }
    CHECK(same_bits(fused[0], pair[0]));
    for (size_t i = 1; i < pair.size(); ++i) {
      INFO("gradient " << i);
      const double scale = max(abs(pair[i].to(DType::f64))).item<double>();
      CHECK(worst(fused[i], pair[i], 0.0, 0.02 * scale) <= 1.0);
    }
  }
}

// ---- op-table cases ----------------------------------------------------------------------------

// The fused kernel called directly on (M, C) = (2, 3) f32 logits with one operand altered.
void call_with_grad(const Shape& grad_shape, DType grad_rows_dtype, bool alias) {
  const Tensor x = zeros({2, 3});
  const Tensor gx = alias ? x : zeros(grad_shape);
  kernel<kernels::CrossEntropyWithGradKernel>(OpId::cross_entropy_with_grad, DeviceType::cpu, DType::f32)(
      zeros({2}), zeros({2}), zeros({2, 2}), gx, x, zeros({2}, {.dtype = DType::i64}), Tensor(),
      zeros({2}, {.dtype = grad_rows_dtype}), kIgnore, 0.0);
}

const bool kCrossEntropyWithGradErrors = register_error_cases({
    PRECIS_BAD_INPUT(cross_entropy_with_grad, ShapeError, "grad_x of another shape",
                     call_with_grad({3, 2}, DType::f32, false), "cross_entropy_with_grad", "[2, 3]", "[3, 2]"),
    PRECIS_BAD_INPUT(cross_entropy_with_grad, DTypeError, "grad_rows in f64 for f32 logits",
                     call_with_grad({2, 3}, DType::f64, false), "cross_entropy_with_grad", "f32", "f64"),
    PRECIS_BAD_INPUT(cross_entropy_with_grad, ValueError, "grad_x aliasing x", call_with_grad({2, 3}, DType::f32, true),
                     "cross_entropy_with_grad", "alias"),
});

}  // namespace
