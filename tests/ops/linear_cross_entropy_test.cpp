// linear_cross_entropy: the loss against a naive f64 reference, loss and gradients against the
// unfused linear + cross_entropy for chunk sizes that split the rows every way (one row, uneven,
// one chunk), ignored rows, label smoothing, no bias; all rows ignored; no-grad; under autocast;
// the CPU kernel (row chunks whose gradients are multiplied out at once; f32 and bf16) the same
// ways; the gradient-check and bad-input cases of the op table.
#include <cmath>
#include <vector>

#include "amp/autocast.h"
#include "autograd/engine.h"
#include "autograd/grad_mode.h"
#include "ops/functional.h"
#include "ops/op_table.h"
#include "tests/support/op_cases.h"
#include "tests/support/tensor_testing.h"

using namespace precis;
using namespace precis::testing;

namespace {

constexpr int64_t kIgnore = -100;

// Class indices in [0, classes), every third position ignore_index when asked.
Tensor class_targets(const Shape& shape, int64_t classes, bool with_ignored, uint64_t seed) {
  Generator g(seed);
  std::vector<int64_t> v = randint(0, classes, shape, {.dtype = DType::i64}, &g).to_vector<int64_t>();
  if (with_ignored)
    for (size_t i = 0; i < v.size(); i += 3) v[i] = kIgnore;
  return from_vector<int64_t>(v, shape);
}

// The loss in double, from the definition: logits = x·wᵀ + b, log p = log_softmax, loss per row
// (1 − ε)·(−log p_t) + (ε / V)·Σ_c (−log p_c), mean over the rows whose target is not ignored.
double naive_loss(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& target, double eps,
                  Reduction reduction) {
  const int64_t V = w.size(0), K = w.size(1);
  const std::vector<double> xv = x.to(DType::f64).contiguous().to_vector<double>();
  const std::vector<double> wv = w.to(DType::f64).to_vector<double>();
  const std::vector<double> bv = b.defined() ? b.to(DType::f64).to_vector<double>() : std::vector<double>(V, 0.0);
  const std::vector<int64_t> t = target.contiguous().to_vector<int64_t>();
  double total = 0, count = 0;
  for (size_t r = 0; r < t.size(); ++r) {
    if (t[r] == kIgnore) continue;
    std::vector<double> z(static_cast<size_t>(V));
    double m = -INFINITY;
    for (int64_t c = 0; c < V; ++c) {
      double s = bv[c];
      for (int64_t k = 0; k < K; ++k) s += xv[r * K + k] * wv[c * K + k];
      z[c] = s;
      m = std::max(m, s);
    }
    double se = 0;
    for (double v : z) se += std::exp(v - m);
    const double lse = m + std::log(se);
    double smooth = 0;
    for (double v : z) smooth += lse - v;
    total += (1 - eps) * (lse - z[t[r]]) + eps / static_cast<double>(V) * smooth;
    count += 1;
  }
  return reduction == Reduction::mean ? total / count : total;
}

struct Operands {
  Tensor x, w, b, target;
};

Operands operands(const Shape& lead, int64_t K, int64_t V, bool bias, bool with_ignored, uint64_t seed,
                  DType dtype = DType::f64) {
  Shape xs = lead;
  xs.push_back(K);
  return {randn_input(xs, true, seed, dtype), randn_input({V, K}, true, seed + 1, dtype),
          bias ? randn_input({V}, true, seed + 2, dtype) : Tensor(), class_targets(lead, V, with_ignored, seed + 3)};
}

// Loss and the gradients of x, w, b (b's undefined without a bias).
TensorList loss_and_grads(const Tensor& loss, const Operands& o) {
  TensorList wrt{o.x, o.w};
  if (o.b.defined()) wrt.push_back(o.b);
  TensorList g = autograd::grad({loss}, wrt);
  g.insert(g.begin(), loss);
  return g;
}

}  // namespace

TEST_CASE("linear_cross_entropy matches the naive f64 loss", "[ops][loss]") {
  for (bool bias : {true, false})
    for (double eps : {0.0, 0.2})
      for (Reduction red : {Reduction::mean, Reduction::sum}) {
        INFO("bias " << bias << " label_smoothing " << eps << " sum " << (red == Reduction::sum));
        const Operands o = operands({2, 5}, 6, 9, bias, true, 11);
        const Tensor loss =
            linear_cross_entropy(o.x, o.w, o.b, o.target, {.reduction = red, .label_smoothing = eps, .chunk_rows = 3});
        REQUIRE(loss.dim() == 0);
        REQUIRE(loss.dtype() == DType::f64);
        CHECK(loss.item<double>() == Approx(naive_loss(o.x, o.w, o.b, o.target, eps, red)).epsilon(1e-12));
      }
}

// f64 takes the op's generic path; f32 the CPU kernel where the build has one (oneDNN), whose
// gradients are summed over the chunks in fp32 where the pair's GEMMs sum all rows at once, so
// the two agree to f32's rounding.
TEST_CASE("linear_cross_entropy: loss and gradients are linear + cross_entropy's for every chunking", "[ops][loss]") {
  // 10 rows: chunks of 1, 3 (uneven), 4, 10 and more than the rows, and the automatic size.
  for (DType dtype : {DType::f64, DType::f32})
    for (int64_t chunk : {1, 3, 4, 10, 64, 0})
      for (bool bias : {true, false}) {
        INFO(dtype_name(dtype) << " chunk_rows " << chunk << " bias " << bias);
        const Operands o = operands({2, 5}, 6, 9, bias, true, 21, dtype);
        const TensorList fused = loss_and_grads(
            linear_cross_entropy(o.x, o.w, o.b, o.target, {.label_smoothing = 0.1, .chunk_rows = chunk}), o);
        const TensorList ref = loss_and_grads(
            cross_entropy(linear(o.x, o.w, o.b).reshape({-1, 9}), o.target.reshape({-1}), {.label_smoothing = 0.1}),
            o);
        REQUIRE(fused.size() == ref.size());
        for (size_t i = 0; i < ref.size(); ++i) {
          INFO("output " << i << " (loss, x, w, b)");
          REQUIRE(fused[i].sizes() == ref[i].sizes());
          PRECIS_REQUIRE_CLOSE(fused[i], ref[i], dtype);
        }
      }
}

TEST_CASE("linear_cross_entropy: a scaled output gradient scales every gradient", "[ops][loss]") {
  // backward multiplies the gradients formed in forward by the output gradient over the divisor.
  const Operands o = operands({7}, 4, 5, true, true, 31);
  const Tensor loss = linear_cross_entropy(o.x, o.w, o.b, o.target, {.chunk_rows = 2});
  const TensorList g = autograd::grad({loss}, {o.x, o.w, o.b}, {full({}, -2.5, {.dtype = DType::f64})});
  const Tensor ref_loss = cross_entropy(linear(o.x, o.w, o.b), o.target);
  const TensorList ref = autograd::grad({ref_loss}, {o.x, o.w, o.b}, {full({}, -2.5, {.dtype = DType::f64})});
  for (size_t i = 0; i < ref.size(); ++i) PRECIS_REQUIRE_CLOSE(g[i], ref[i], DType::f64);
}

TEST_CASE("linear_cross_entropy: every row ignored gives a NaN mean and zero gradients", "[ops][loss]") {
  Operands o = operands({4}, 3, 5, true, false, 41);
  o.target = full({4}, kIgnore, {.dtype = DType::i64});
  const Tensor loss = linear_cross_entropy(o.x, o.w, o.b, o.target);
  CHECK(std::isnan(loss.item<double>()));
  const TensorList g = autograd::grad({loss}, {o.x, o.w, o.b});
  for (const Tensor& t : g) CHECK(max(abs(t)).item<double>() == 0.0);
  // sum: 0 and zero gradients.
  const Tensor s = linear_cross_entropy(o.x, o.w, o.b, o.target, {.reduction = Reduction::sum});
  CHECK(s.item<double>() == 0.0);
}

TEST_CASE("linear_cross_entropy without gradients, and with only the weight's", "[ops][loss]") {
  const Operands o = operands({6}, 4, 7, true, true, 51);
  Tensor loss;
  {
    NoGradGuard no_grad;
    loss = linear_cross_entropy(o.x, o.w, o.b, o.target, {.chunk_rows = 4});
  }
  CHECK_FALSE(loss.requires_grad());
  CHECK(loss.item<double>() == Approx(naive_loss(o.x, o.w, o.b, o.target, 0.0, Reduction::mean)).epsilon(1e-12));
  // x and b constants: only w's gradient is formed (dx is skipped in forward).
  const Tensor x = o.x.detach(), b = o.b.detach();
  const Tensor gw = autograd::grad({linear_cross_entropy(x, o.w, b, o.target, {.chunk_rows = 4})}, {o.w})[0];
  const Tensor ref = autograd::grad({cross_entropy(linear(x, o.w, b), o.target)}, {o.w})[0];
  PRECIS_REQUIRE_CLOSE(gw, ref, DType::f64);
}

TEST_CASE("linear_cross_entropy under bf16 autocast: fp32 loss, as close to f64 as the unfused pair", "[ops][loss][amp]") {
  // fp32 parameters and input, as a model under autocast; the GEMMs run in bf16.
  const Operands o = operands({64}, 32, 300, true, true, 61, DType::f32);
  const Operands d{o.x.detach().to(DType::f64).requires_grad_(), o.w.detach().to(DType::f64).requires_grad_(),
                   o.b.detach().to(DType::f64).requires_grad_(), o.target};
  // Two regions: a region caches its weight casts, and each loss's backward frees its graph.
  Tensor loss, unfused;
  {
    amp::Autocast ac(DType::bf16);
    loss = linear_cross_entropy(o.x, o.w, o.b, o.target, {.chunk_rows = 24});
  }
  {
    amp::Autocast ac(DType::bf16);
    unfused = cross_entropy(linear(o.x, o.w, o.b), o.target);
  }
  REQUIRE(loss.dtype() == DType::f32);
  const TensorList g = loss_and_grads(loss, o);
  const TensorList u = loss_and_grads(unfused, o);
  const TensorList ref = loss_and_grads(linear_cross_entropy(d.x, d.w, d.b, d.target), d);
  for (size_t i = 0; i < ref.size(); ++i) {
    INFO("output " << i << " (loss, x, w, b)");
    REQUIRE(g[i].dtype() == DType::f32);  // the casts' backward brings the gradients to fp32
    // The worst error against f64, relative to the largest reference value: the fused op's
    // within 1.25x the unfused pair's (they round in different places) and within bf16's reach.
    const double scale = max(abs(ref[i])).item<double>();
    const double err = max(abs(sub(g[i].to(DType::f64), ref[i]))).item<double>() / scale;
    const double err_unfused = max(abs(sub(u[i].to(DType::f64), ref[i]))).item<double>() / scale;
    INFO("fused error " << err << ", unfused " << err_unfused);
    CHECK(err <= 1.25 * err_unfused + 1e-3);
    CHECK(err < 0.05);
  }
}

// ---- the backend kernel (CPU with oneDNN: row chunks, no (M, V) tensor) ------------------------

namespace {

// True where the backend has its own linear_cross_entropy kernel for dtype; says so when not.
bool has_backend_kernel(DType dtype) {
  if (find_kernel(OpId::linear_cross_entropy, DeviceType::cpu, dtype) != nullptr) return true;
  WARN("NOT TESTED: no CPU linear_cross_entropy kernel for " << dtype_name(dtype)
                                                             << " in this build (it needs oneDNN)");
  return false;
}

}  // namespace

// 600 rows in chunks of 256 (two whole and a short one) and in the automatic chunking (one chunk
// at 8000 classes). The kernel and the pair round in different places (the kernel sums the
// gradients over chunks in fp32 and rounds once; the pair's GEMMs round their whole sums once, its
// bias gradient is a bf16 sum), so each is compared with the f64 result of the same bf16 inputs:
// the kernel's worst error, relative to the largest reference value, within twice the pair's.
TEST_CASE("linear_cross_entropy's CPU kernel: loss and gradients as close to f64 as the pair's, across row chunks",
          "[ops][loss]") {
  if (!has_backend_kernel(DType::bf16)) return;
  for (int64_t chunk : {256, 0})
    for (bool bias : {true, false})
      for (double eps : {0.0, 0.1})
        for (Reduction red : {Reduction::mean, Reduction::sum}) {
          INFO("chunk_rows " << chunk << " bias " << bias << " label_smoothing " << eps << " sum "
                             << (red == Reduction::sum));
          const Operands o = operands({3, 200}, 16, 8000, bias, true, 81, DType::bf16);
          auto as_f64 = [](const Tensor& t) { return t.defined() ? t.detach().to(DType::f64).requires_grad_() : t; };
          const Operands d{as_f64(o.x), as_f64(o.w), as_f64(o.b), o.target};
          const LinearCrossEntropyOptions opts{.reduction = red, .label_smoothing = eps, .chunk_rows = chunk};
          const TensorList fused = loss_and_grads(linear_cross_entropy(o.x, o.w, o.b, o.target, opts), o);
          const TensorList pair = loss_and_grads(
              cross_entropy(linear(o.x, o.w, o.b).reshape({-1, 8000}), o.target.reshape({-1}),
                            {.reduction = red, .label_smoothing = eps}),
              o);
          const TensorList ref = loss_and_grads(linear_cross_entropy(d.x, d.w, d.b, d.target, opts), d);
          REQUIRE(fused.size() == ref.size());
          for (size_t i = 0; i < ref.size(); ++i) {
            INFO("output " << i << " (loss, x, w, b)");
            REQUIRE(fused[i].sizes() == ref[i].sizes());
            const double scale = max(abs(ref[i])).item<double>();
            const double err = max(abs(sub(fused[i].to(DType::f64), ref[i]))).item<double>() / scale;
            const double err_pair = max(abs(sub(pair[i].to(DType::f64), ref[i]))).item<double>() / scale;
            INFO("kernel error " << err << ", pair " << err_pair);
            CHECK(err <= 2 * err_pair + 1e-4);
          }
        }
}

TEST_CASE("linear_cross_entropy's CPU kernel: output gradient, only W's gradient, no gradient", "[ops][loss]") {
  if (!has_backend_kernel(DType::bf16)) return;
  const LinearCrossEntropyOptions kChunks{.chunk_rows = 256};  // 600 rows: 256, 256, 88
  const Operands o = operands({600}, 8, 5000, true, true, 91, DType::bf16);
  const Tensor seed = full({}, -2.5, {.dtype = DType::bf16});
  const TensorList g = autograd::grad({linear_cross_entropy(o.x, o.w, o.b, o.target, kChunks)}, {o.x, o.w, o.b}, {seed});
  const TensorList ref = autograd::grad({cross_entropy(linear(o.x, o.w, o.b), o.target)}, {o.x, o.w, o.b}, {seed});
  for (size_t i = 0; i < ref.size(); ++i) PRECIS_REQUIRE_CLOSE(g[i], ref[i], DType::bf16);

  const Tensor x = o.x.detach(), b = o.b.detach();
  const Tensor gw = autograd::grad({linear_cross_entropy(x, o.w, b, o.target, kChunks)}, {o.w})[0];
  PRECIS_REQUIRE_CLOSE(gw, autograd::grad({cross_entropy(linear(x, o.w, b), o.target)}, {o.w})[0], DType::bf16);

  NoGradGuard no_grad;
  const Tensor loss = linear_cross_entropy(o.x, o.w, o.b, o.target, kChunks);
  CHECK_FALSE(loss.requires_grad());
  PRECIS_REQUIRE_CLOSE(loss, cross_entropy(linear(o.x, o.w, o.b), o.target), DType::bf16);
}

// No classes (every target ignored): the mean's 0/0 and zero gradients — not a division by zero
// in the chunk size, and not the CPU kernel, whose rows would be empty.
TEST_CASE("linear_cross_entropy with no classes gives NaN and zero gradients", "[ops][loss]") {
  for (DType dtype : {DType::f32, DType::bf16, DType::f64}) {
    INFO(dtype_name(dtype));
    const Tensor x = randn_input({6, 4}, true, 111, dtype), w = randn_input({0, 4}, true, 112, dtype);
    const Tensor target = full({6}, kIgnore, {.dtype = DType::i64});
    const Tensor loss = linear_cross_entropy(x, w, Tensor(), target);
    CHECK(std::isnan(loss.to(DType::f64).item<double>()));
    const TensorList g = autograd::grad({loss}, {x, w});
    CHECK(max(abs(g[0])).to(DType::f64).item<double>() == 0.0);
    CHECK(g[1].numel() == 0);
  }
}

TEST_CASE("linear_cross_entropy's CPU kernel under bf16 autocast: as close to f64 as the unfused pair",
          "[ops][loss][amp]") {
  if (!has_backend_kernel(DType::bf16)) return;
  const Operands o = operands({600}, 32, 8000, true, true, 101, DType::f32);
  const Operands d{o.x.detach().to(DType::f64).requires_grad_(), o.w.detach().to(DType::f64).requires_grad_(),
                   o.b.detach().to(DType::f64).requires_grad_(), o.target};
  Tensor loss, unfused;
  {
    amp::Autocast ac(DType::bf16);
    loss = linear_cross_entropy(o.x, o.w, o.b, o.target, {.label_smoothing = 0.1});
  }
  {
    amp::Autocast ac(DType::bf16);
    unfused = cross_entropy(linear(o.x, o.w, o.b), o.target, {.label_smoothing = 0.1});
  }
  REQUIRE(loss.dtype() == DType::f32);
  const TensorList g = loss_and_grads(loss, o), u = loss_and_grads(unfused, o);
  const TensorList ref = loss_and_grads(linear_cross_entropy(d.x, d.w, d.b, d.target, {.label_smoothing = 0.1}), d);
  for (size_t i = 0; i < ref.size(); ++i) {
    INFO("output " << i << " (loss, x, w, b)");
    REQUIRE(g[i].dtype() == DType::f32);
    const double scale = max(abs(ref[i])).item<double>();
    const double err = max(abs(sub(g[i].to(DType::f64), ref[i]))).item<double>() / scale;
    const double err_unfused = max(abs(sub(u[i].to(DType::f64), ref[i]))).item<double>() / scale;
    INFO("kernel error " << err << ", unfused " << err_unfused);
    CHECK(err <= 1.25 * err_unfused + 1e-3);
    CHECK(err < 0.05);
  }
}

// ---- op-table cases ----------------------------------------------------------------------------

namespace {

const bool kLinearCrossEntropyCases = register_grad_cases({
    {OpId::linear_cross_entropy, "mean, chunks of 2, ignore_index, smoothing",
     [] { return TensorList{randn_input({5, 3}, true, 71), randn_input({4, 3}, true, 72), randn_input({4}, true, 73)}; },
     [](const TensorList& x) {
       return TensorList{linear_cross_entropy(x[0], x[1], x[2], class_targets({5}, 4, true, 74),
                                              {.label_smoothing = 0.15, .chunk_rows = 2})};
     }},
    {OpId::linear_cross_entropy, "sum, (2, 3, K) input, no bias",
     [] { return TensorList{randn_input({2, 3, 4}, true, 75), randn_input({6, 4}, true, 76)}; },
     [](const TensorList& x) {
       return TensorList{linear_cross_entropy(x[0], x[1], Tensor(), class_targets({2, 3}, 6, false, 77),
                                              {.reduction = Reduction::sum})};
     }},
});

Tensor f32(const Shape& s) { return zeros(s); }
Tensor i64(const Shape& s) { return zeros(s, {.dtype = DType::i64}); }

const bool kLinearCrossEntropyErrors = register_error_cases({
    PRECIS_BAD_INPUT(linear_cross_entropy, ValueError, "reduction none",
                     linear_cross_entropy(f32({2, 3}), f32({4, 3}), Tensor(), i64({2}), {.reduction = Reduction::none}),
                     "linear_cross_entropy", "mean or sum", "cross_entropy(linear"),
    PRECIS_BAD_INPUT(linear_cross_entropy, ShapeError, "weight's K differs from input's",
                     linear_cross_entropy(f32({2, 3}), f32({4, 5}), Tensor(), i64({2})), "linear_cross_entropy",
                     "[2, 3]", "[4, 5]"),
    PRECIS_BAD_INPUT(linear_cross_entropy, ShapeError, "target of the wrong shape",
                     linear_cross_entropy(f32({2, 3}), f32({4, 3}), f32({4}), i64({3})), "linear_cross_entropy",
                     "target", "[3]"),
    PRECIS_BAD_INPUT(linear_cross_entropy, IndexError, "a target outside [0, V)",
                     linear_cross_entropy(f32({2, 3}), f32({4, 3}), Tensor(), i64({2}) + 4), "linear_cross_entropy",
                     "4", "out of range"),
    PRECIS_BAD_INPUT(linear_cross_entropy, DTypeError, "weight in another dtype",
                     linear_cross_entropy(f32({2, 3}), f32({4, 3}).to(DType::f64), Tensor(), i64({2})),
                     "linear_cross_entropy", "f32", "f64"),
    PRECIS_BAD_INPUT(linear_cross_entropy, ValueError, "negative chunk_rows",
                     linear_cross_entropy(f32({2, 3}), f32({4, 3}), Tensor(), i64({2}), {.chunk_rows = -1}),
                     "linear_cross_entropy", "chunk_rows"),
});

}  // namespace

TEST_CASE("linear_cross_entropy in f16 under a loss scale: the unfused pair's gradients, no overflow, no underflow",
          "[ops][loss][amp]") {
  // f16 has no fused kernel on any backend (and none of the op on CUDA): the generic path. The
  // output gradient is a loss scaler's scale; the gradients, unscaled, must be the unfused pair's.
  // It used to form the logit gradient in forward, unscaled, and scale it in backward: x·65536
  // overflowed f16 (W's gradient all inf) and (p − y)/M sank into f16's subnormals first.
  struct Case {
    int64_t M, K, V;
    double x_scale, loss_scale;
  };
  // 32768: the largest power of two the pair's own f16 loss can carry as its output gradient.
  for (const Case& c : {Case{16, 8, 30, 2.0, 32768.0}, Case{2048, 16, 4096, 1.0, 1024.0}}) {
    INFO("M " << c.M << " V " << c.V << " scale " << c.loss_scale);
    const Tensor x = (randn_input({c.M, c.K}, false, 71, DType::f32) * c.x_scale).to(DType::f16).requires_grad_();
    const Tensor w = randn_input({c.V, c.K}, true, 72, DType::f16), b = randn_input({c.V}, true, 73, DType::f16);
    const Tensor t = class_targets({c.M}, c.V, true, 74);
    const Tensor s = full({}, c.loss_scale);
    const Tensor fused = linear_cross_entropy(x, w, b, t, {.chunk_rows = 5});
    const Tensor unfused = cross_entropy(linear(x, w, b), t);
    const TensorList got = autograd::grad({fused}, {x, w, b}, {s.to(fused.dtype())});
    const TensorList pair = autograd::grad({unfused}, {x, w, b}, {s.to(unfused.dtype())});
    for (size_t i = 0; i < pair.size(); ++i) {
      INFO("gradient " << i << " (x, w, b)");
      const Tensor g = got[i].to(DType::f64), p = pair[i].to(DType::f64);
      REQUIRE(max(abs(p)).item<double>() > 0);
      REQUIRE(std::isfinite(sum(g).item<double>()));
      // Relative to the whole gradient's norm: the non-target logits' (p/M ≈ 1e-7 here, at f16's
      // subnormals unscaled) are what the unscaled path lost (1.2e-3 and 2.4e-3 for x and W; on
      // the CPU the gradients are now the pair's bit for bit).
      CHECK(std::sqrt(sum(mul(g - p, g - p)).item<double>() / sum(mul(p, p)).item<double>()) <= 1e-4);
    }
  }
}
