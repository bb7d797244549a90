// cross_entropy on vocabulary-wide rows: the one-pass row normaliser (ops/cpu/softmax_rows.h,
// row_log_normaliser) over several L1-sized chunks — a running max that grows, chunks of −inf,
// NaN and ±inf — against a naive f64 reference, the backward's chunked pass against the gradient
// formula, f16/bf16 against f64, and the autocast path in which f16/bf16 logits are read by the
// kernels directly (no fp32 copy) with the cast path's results.
#include <cmath>
#include <limits>
#include <set>
#include <utility>

#include "amp/audit.h"
#include "amp/autocast.h"
#include "autograd/grad_mode.h"
#include "ops/cpu/softmax_rows.h"
#include "ops/functional.h"
#include "ops/kernel_observer.h"
#include "tests/support/op_cases.h"
#include "tests/support/tensor_testing.h"

using namespace precis;
using namespace precis::testing;

namespace {

constexpr int64_t kIgnore = -100;
constexpr double kInf = std::numeric_limits<double>::infinity();
// Wider than two normaliser chunks, and not a multiple of the chunk or the vector width.
constexpr int64_t kWide = 2 * cpu::kNormaliserChunk + 901;

Tensor targets(const std::vector<int64_t>& v) { return from_vector<int64_t>(v); }

// Per-row losses of cross_entropy in double, naive two-pass (max, then Σ exp), with class weights
// w (empty: ones), label smoothing eps; 0 at ignored rows. Also Σ w[t] over the kept rows.
std::pair<std::vector<double>, double> reference(const Tensor& logits, const std::vector<int64_t>& t,
                                                 const std::vector<double>& w, double eps) {
  const int64_t rows = logits.size(0), classes = logits.size(1);
  const std::vector<double> x = logits.to(DType::f64).to_vector<double>();
  std::vector<double> out(static_cast<size_t>(rows), 0.0);
  double weight = 0;
  for (int64_t i = 0; i < rows; ++i) {
    if (t[i] == kIgnore) continue;
    const double* r = x.data() + i * classes;
    double m = -kInf, s = 0;
    for (int64_t c = 0; c < classes; ++c) m = std::max(m, r[c]);
    for (int64_t c = 0; c < classes; ++c) s += std::exp(r[c] - m);
    double smooth = 0;
    for (int64_t c = 0; c < classes; ++c) smooth += (w.empty() ? 1.0 : w[c]) * (std::log(s) - (r[c] - m));
    const double wt = w.empty() ? 1.0 : w[t[i]];
    out[i] = (1 - eps) * wt * (std::log(s) - (r[t[i]] - m));
    if (eps != 0) out[i] += eps / classes * smooth;  // (0 · inf would be NaN on the row of −inf)
    weight += wt;
  }
  return {out, weight};
}

// d loss_sum / dx in double (the formula of ops/contracts/kernels_loss.h), 0 at ignored rows.
std::vector<double> reference_grad(const Tensor& logits, const std::vector<int64_t>& t, double eps) {
  const int64_t rows = logits.size(0), classes = logits.size(1);
  const std::vector<double> x = logits.to(DType::f64).to_vector<double>();
  std::vector<double> g(x.size(), 0.0);
  for (int64_t i = 0; i < rows; ++i) {
    if (t[i] == kIgnore) continue;
    const double* r = x.data() + i * classes;
    double m = -kInf, s = 0;
    for (int64_t c = 0; c < classes; ++c) m = std::max(m, r[c]);
    for (int64_t c = 0; c < classes; ++c) s += std::exp(r[c] - m);
    for (int64_t c = 0; c < classes; ++c)
      g[i * classes + c] = std::exp(r[c] - m) / s - (c == t[i] ? 1 - eps : 0.0) - eps / classes;
  }
  return g;
}

// Rows that stress the running max: large random logits; increasing logits (the max moves into
// every later chunk, so the running sum is rescaled each time); the maximum in the first chunk
// only; a first chunk of −inf before finite values.
Tensor stress_logits(int64_t rows, uint64_t seed) {
  std::vector<double> v = mul(randn_input({rows, kWide}, false, seed), 8.0).to_vector<double>();
  for (int64_t c = 0; c < kWide; ++c) v[1 * kWide + c] = 0.01 * static_cast<double>(c) - 20.0;
  v[2 * kWide + 3] = 60.0;
  for (int64_t c = 0; c < cpu::kNormaliserChunk + 7; ++c) v[3 * kWide + c] = -kInf;
  return from_vector<double>(v, {rows, kWide});
}

}  // namespace

TEST_CASE("cross_entropy over rows of several normaliser chunks matches a naive reference", "[ops][loss]") {
  const int64_t rows = 6;
  const Tensor x64 = stress_logits(rows, 1);
  const std::vector<int64_t> t = {5, kWide - 1, 3, kWide - 2, kIgnore, 2048};
  std::vector<double> w = uniform_input({kWide}, 0.5, 2.0, false, 2).to_vector<double>();
  for (DType dt : {DType::f64, DType::f32}) {
    for (double eps : {0.0, 0.1}) {
      for (bool weighted : {false, true}) {
        DYNAMIC_SECTION(dtype_name(dt) << " eps " << eps << " weighted " << weighted) {
          const std::vector<double> cw = weighted ? w : std::vector<double>{};
          const Tensor wt = weighted ? from_vector<double>(w).to(dt) : Tensor();
          const auto [ref, total_w] = reference(x64.to(dt), t, cw, eps);
          const Tensor x = x64.to(dt);
          const Tensor none = cross_entropy(x, targets(t), wt, kIgnore, Reduction::none, eps);
          if (!weighted && eps == 0.0) {
            // Before any smoothing term (whose −inf entries make the smoothed loss infinite).
            PRECIS_REQUIRE_CLOSE(none.to(DType::f64), from_vector<double>(ref), dt);
            double sum = 0;
            for (double r : ref) sum += r;
            PRECIS_REQUIRE_CLOSE(cross_entropy(x, targets(t), wt, kIgnore, Reduction::mean, eps).to(DType::f64),
                                 scalar_tensor(sum / total_w, {.dtype = DType::f64}), dt);
          } else {
            // The row with −inf logits has an infinite smoothed loss in both; compare the others.
            const std::vector<double> got = none.to(DType::f64).to_vector<double>();
            for (int64_t i = 0; i < rows; ++i) {
              INFO("row " << i);
              if (std::isinf(ref[i])) {
                CHECK(got[i] == ref[i]);
              } else {
                const bool f64 = dt == DType::f64;
                CHECK(got[i] == Approx(ref[i]).epsilon(f64 ? 1e-12 : 2e-5).margin(f64 ? 1e-12 : 1e-6));
              }
            }
          }
        }
      }
    }
  }
}

TEST_CASE("cross_entropy's row normaliser propagates NaN and infinities as the two-pass form", "[ops][loss]") {
  // NaN in a later chunk, +inf, a row of −inf, and an empty row through the row routine itself.
  std::vector<float> v(static_cast<size_t>(kWide), 0.5f);
  v[cpu::kNormaliserChunk + 17] = std::numeric_limits<float>::quiet_NaN();
  auto n1 = cpu::row_log_normaliser(v.data(), kWide);
  CHECK(std::isnan(n1.log_sum));
  // A whole chunk of NaN: lanes_max skips NaNs, the chunk must still poison the sum.
  std::fill(v.begin(), v.end(), 0.5f);
  std::fill(v.begin() + cpu::kNormaliserChunk, v.begin() + 2 * cpu::kNormaliserChunk,
            std::numeric_limits<float>::quiet_NaN());
  CHECK(std::isnan(cpu::row_log_normaliser(v.data(), kWide).log_sum));
  std::fill(v.begin(), v.end(), 0.5f);
  v[kWide - 1] = std::numeric_limits<float>::infinity();
  auto n2 = cpu::row_log_normaliser(v.data(), kWide);
  CHECK(n2.max == std::numeric_limits<float>::infinity());
  CHECK(std::isnan(n2.log_sum));
  std::fill(v.begin(), v.end(), -std::numeric_limits<float>::infinity());
  CHECK(std::isnan(cpu::row_log_normaliser(v.data(), kWide).log_sum));
  auto n3 = cpu::row_log_normaliser(v.data(), 0);
  CHECK(n3.max == -std::numeric_limits<float>::infinity());
  CHECK(n3.log_sum == -std::numeric_limits<float>::infinity());
  // Equal values over every chunk: log Σ = log n exactly enough, max unchanged.
  std::fill(v.begin(), v.end(), 3.0f);
  auto n4 = cpu::row_log_normaliser(v.data(), kWide);
  CHECK(n4.max == 3.0f);
  CHECK(n4.log_sum == Approx(std::log(static_cast<double>(kWide))).epsilon(1e-6));
  // The cross_entropy of a NaN row is NaN; the other rows are unaffected.
  Tensor x = zeros({2, kWide});
  {
    NoGradGuard ng;
    x.select(0, 1).select(0, 3000).fill_(std::numeric_limits<double>::quiet_NaN());
  }
  const std::vector<float> l = cross_entropy(x, targets({1, 1}), Tensor(), kIgnore, Reduction::none).to_vector<float>();
  CHECK(l[0] == Approx(std::log(static_cast<double>(kWide))).epsilon(1e-6));
  CHECK(std::isnan(l[1]));
}

TEST_CASE("cross_entropy's chunked backward matches the gradient formula on wide rows", "[ops][loss]") {
  const Tensor x64 = mul(randn_input({4, kWide}, false, 3), 6.0);
  const std::vector<int64_t> t = {0, kWide - 1, kIgnore, cpu::kNormaliserChunk};
  for (DType dt : {DType::f64, DType::f32}) {
    for (double eps : {0.0, 0.2}) {
      DYNAMIC_SECTION(dtype_name(dt) << " eps " << eps) {
        Tensor x = x64.to(dt);
        x.requires_grad_(true);
        cross_entropy(x, targets(t), Tensor(), kIgnore, Reduction::sum, eps).backward();
        REQUIRE(x.grad().dtype() == dt);
        PRECIS_REQUIRE_CLOSE(x.grad().to(DType::f64), from_vector<double>(reference_grad(x64, t, eps), {4, kWide}), dt);
        // Ignored rows are exactly zero.
        CHECK(max(abs(x.grad().select(0, 2))).item<double>() == 0.0);
      }
    }
  }
}

TEST_CASE("cross_entropy on wide f16 and bf16 rows computes in fp32", "[ops][loss]") {
  const Tensor x64 = mul(randn_input({5, kWide}, false, 4), 4.0);
  const std::vector<int64_t> t = {7, kIgnore, kWide - 1, 4100, 0};
  for (DType dt : {DType::f16, DType::bf16}) {
    DYNAMIC_SECTION(dtype_name(dt)) {
      const Tensor x = x64.to(dt);
      const auto [ref, total_w] = reference(x, t, {}, 0.1);  // exact math on the rounded inputs
      const Tensor none = cross_entropy(x, targets(t), Tensor(), kIgnore, Reduction::none, 0.1);
      REQUIRE(none.dtype() == dt);
      PRECIS_REQUIRE_CLOSE(none.to(DType::f64), from_vector<double>(ref), dt);
      Tensor xg = x.detach();
      xg.requires_grad_(true);
      cross_entropy(xg, targets(t), Tensor(), kIgnore, Reduction::sum, 0.1).backward();
      REQUIRE(xg.grad().dtype() == dt);
      const Tolerance tol = tolerance(dt, OpId::cross_entropy, Compared::gradient);
      const std::string report =
          allclose_report(xg.grad().to(DType::f64), from_vector<double>(reference_grad(x, t, 0.1), {5, kWide}), tol);
      INFO(report);
      CHECK(report.empty());
    }
  }
}

namespace {

// The (op, dtype) pairs of the kernels looked up while alive.
std::set<std::pair<OpId, DType>>* g_lookups = nullptr;
void record_lookup(OpId op, DeviceType, DType dtype) {
  if (g_lookups != nullptr && (op == OpId::cross_entropy || op == OpId::cross_entropy_backward))
    g_lookups->insert({op, dtype});
}
struct LookupRecorder {
  std::set<std::pair<OpId, DType>> seen;
  LookupRecorder() {
    g_lookups = &seen;
    set_kernel_lookup_observer(&record_lookup);
  }
  ~LookupRecorder() {
    set_kernel_lookup_observer(nullptr);
    g_lookups = nullptr;
  }
};

}  // namespace

TEST_CASE("cross_entropy under autocast reads f16/bf16 logits directly, with the cast path's results",
          "[ops][loss][amp]") {
  const std::vector<int64_t> t = {3, kIgnore, kWide - 1, 2500, 11, 0};
  const Tensor w = uniform_input({kWide}, 0.5, 2.0, false, 6, DType::f32);
  for (DType low : {DType::bf16, DType::f16}) {
    for (double eps : {0.0, 0.1}) {
      DYNAMIC_SECTION(dtype_name(low) << " eps " << eps) {
        const Tensor base = mul(randn_input({6, kWide}, false, 5), 5.0).to(low);
        // The cast path, written out: fp32 logits, then the gradient cast back as the cast's backward does.
        Tensor xf = base.to(DType::f32);
        xf.requires_grad_(true);
        const Tensor ref = cross_entropy(xf, targets(t), w, kIgnore, Reduction::mean, eps);
        ref.backward();
        const Tensor ref_grad = xf.grad().to(low);

        Tensor x = base.detach();
        x.requires_grad_(true);
        Tensor loss;
        LookupRecorder rec;
        {
          amp::Autocast ac(low);
          loss = cross_entropy(x, targets(t), w, kIgnore, Reduction::mean, eps);
        }
        loss.backward();
        // FP32 category: an fp32 loss, as for cast logits. The kernel widens the same chunks the
        // fp32 kernel reads and sums them in the same order, so loss and gradient are the cast
        // path's exactly (the gradient rounded once from fp32, as the cast's backward rounds it).
        REQUIRE(loss.dtype() == DType::f32);
        CHECK(loss.item<double>() == ref.item<double>());
        REQUIRE(x.grad().dtype() == low);
        CHECK(max(abs(sub(x.grad().to(DType::f64), ref_grad.to(DType::f64)))).item<double>() == 0.0);
        // The kernels ran on the narrow logits, and no copy widened them to fp32.
        CHECK(rec.seen.count({OpId::cross_entropy, low}) == 1);
        CHECK(rec.seen.count({OpId::cross_entropy_backward, low}) == 1);
        CHECK(rec.seen.count({OpId::cross_entropy, DType::f32}) == 0);
        CHECK(rec.seen.count({OpId::cross_entropy_backward, DType::f32}) == 0);
      }
    }
  }
  // Reduction none and sum come out in fp32 too; an fp32 input is unchanged by the region.
  const Tensor b = randn_input({3, 40}, false, 7, DType::bf16);
  amp::Autocast ac(DType::bf16);
  CHECK(cross_entropy(b, targets({1, 2, kIgnore}), Tensor(), kIgnore, Reduction::none).dtype() == DType::f32);
  CHECK(cross_entropy(b, targets({1, 2, kIgnore}), Tensor(), kIgnore, Reduction::sum).dtype() == DType::f32);
  CHECK(cross_entropy(b.to(DType::f32), targets({1, 2, kIgnore})).dtype() == DType::f32);
}

TEST_CASE("cross_entropy under autocast: a Lower override still casts, the audit records fp32", "[ops][loss][amp]") {
  const Tensor x = randn_input({3, 40}, false, 8, DType::bf16);
  {
    // The audit sees the op computing in fp32 although its logits stay bf16.
    amp::Audit audit;
    {
      amp::Autocast ac(DType::bf16);
      (void)cross_entropy(x, targets({1, 2, 3}));
    }
    bool found = false;
    for (const amp::AuditRecord& r : audit.records())
      if (r.op == "cross_entropy") {
        found = true;
        CHECK(r.dtypes == std::vector<DType>{DType::f32});
      }
    CHECK(found);
  }
  {
    // Overridden to Passthrough: the bf16 loss of bf16 logits, as without autocast.
    struct Reset {
      ~Reset() { amp::reset_categories(); }
    } reset;
    amp::set_category(OpId::cross_entropy, Category::Passthrough);
    amp::Autocast ac(DType::bf16);
    CHECK(cross_entropy(x, targets({1, 2, 3})).dtype() == DType::bf16);
  }
  // f32 logits overridden to Lower: cast down to bf16, a bf16 loss.
  struct Reset {
    ~Reset() { amp::reset_categories(); }
  } reset;
  amp::set_category(OpId::cross_entropy, Category::Lower);
  amp::Autocast ac(DType::bf16);
  CHECK(cross_entropy(x.to(DType::f32), targets({1, 2, 3})).dtype() == DType::bf16);
}

namespace {

const bool kWideCases = register_grad_cases({
    {OpId::cross_entropy, "wide rows across normaliser chunks, weights, smoothing, ignore_index",
     [] { return TensorList{mul(randn_input({2, cpu::kNormaliserChunk + 53}, false, 20), 3.0).requires_grad_(true)}; },
     [](const TensorList& x) {
       return TensorList{cross_entropy(x[0], targets({7, cpu::kNormaliserChunk + 50}),
                                       uniform_input({cpu::kNormaliserChunk + 53}, 0.5, 2.0, false, 21), kIgnore,
                                       Reduction::mean, 0.1)};
     }},
});

const bool kWideErrors = register_error_cases({
    PRECIS_BAD_INPUT(cross_entropy, IndexError, "bf16 logits under autocast, target out of range",
                     ([] {
                       amp::Autocast ac(DType::bf16);
                       return cross_entropy(zeros({2, 5}, {.dtype = DType::bf16}), targets({1, 5}));
                     })(),
                     "target 5", "5 classes", "[2, 5] bf16 cpu"),
    PRECIS_BAD_INPUT(cross_entropy, ShapeError, "bf16 logits under autocast, weight of the wrong size",
                     ([] {
                       amp::Autocast ac(DType::bf16);
                       return cross_entropy(zeros({2, 5}, {.dtype = DType::bf16}), targets({1, 2}), ones({4}));
                     })(),
                     "weight", "[4] f32 cpu", "[2, 5] bf16 cpu"),
});

}  // namespace
