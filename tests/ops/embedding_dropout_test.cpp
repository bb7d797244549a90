// embedding and dropout: forward against references, gradients (padding row, repeated indices,
// same mask in backward), dropout statistics and reproducibility, bad inputs, and the
// gradient-check cases of embedding, dropout, erf and pad (the last two: forward checks too).
#include <cmath>

#include "autograd/engine.h"
#include "core/rng.h"
#include "core/thread_pool.h"
#include "ops/functional.h"
#include "tests/support/op_cases.h"
#include "tests/support/tensor_testing.h"

using namespace precis;
using namespace precis::testing;

TEST_CASE("embedding picks rows for indices of any shape and dtype", "[ops][embedding]") {
  const Tensor w = non_contiguous(randn_input({5, 3}, false, 1));
  const std::vector<int64_t> idx = {4, 0, 2, 2, 1, 4};
  for (DType it : {DType::i64, DType::i32}) {
    const Tensor i = from_vector<int64_t>(idx, {2, 3}).to(it);
    const Tensor y = embedding(i, w);
    REQUIRE(y.sizes() == Shape{2, 3, 3});
    const auto wv = w.to_vector<double>(), yv = y.to_vector<double>();
    for (size_t k = 0; k < idx.size(); ++k)
      for (int64_t d = 0; d < 3; ++d) REQUIRE(yv[k * 3 + d] == wv[idx[k] * 3 + d]);
  }
  // 0-d indices give one row; low-precision tables stay in their dtype.
  REQUIRE(embedding(scalar_tensor(3, {.dtype = DType::i64}), w).sizes() == Shape{3});
  const Tensor yh = embedding(from_vector<int64_t>({1, 3}), w.to(DType::bf16));
  REQUIRE(yh.dtype() == DType::bf16);
  PRECIS_REQUIRE_CLOSE(yh.to(DType::f64), embedding(from_vector<int64_t>({1, 3}), w.to(DType::bf16).to(DType::f64)),
                       DType::f64);
}

TEST_CASE("a negative padding_idx counts from the end, as in PyTorch", "[ops][embedding]") {
  Tensor w = testing::randn_input({4, 2});
  embedding(from_vector<int64_t>({3, 0}), w, /*padding_idx=*/-1).backward(ones({2, 2}, {.dtype = DType::f64}));
  CHECK(w.grad().to_vector<double>() == std::vector<double>{1, 1, 0, 0, 0, 0, 0, 0});
}

TEST_CASE("embedding gradient adds repeated rows and skips the padding row", "[ops][embedding]") {
  Tensor w = randn_input({4, 2}, true, 2);
  const Tensor i = from_vector<int64_t>({1, 3, 1, 0, 3, 1}, {3, 2});
  embedding(i, w, /*padding_idx=*/3).backward(ones({3, 2, 2}, {.dtype = DType::f64}));
  // Row counts 1, 3, 0, 2; row 3 is padding.
  REQUIRE(w.grad().to_vector<double>() == std::vector<double>{1, 1, 3, 3, 0, 0, 0, 0});
  // The padding row is still looked up in forward (PyTorch does the same).
  REQUIRE(embedding(from_vector<int64_t>({3}), w.detach(), 3).to_vector<double>() ==
          w.detach().narrow(0, 3, 1).reshape({2}).to_vector<double>());
}

// Backward adds into a zero table with the index_add kernel directly (no index_add op, no mask
// pass): it must equal index_add into zeros with the padding row cleared, in every float dtype.
TEST_CASE("embedding gradient of a wide table equals index_add into zeros", "[ops][embedding]") {
  const int saved = get_num_threads();
  for (DType dt : {DType::f32, DType::f64, DType::f16, DType::bf16}) {
    for (int threads : {1, 2}) {
      INFO(dtype_name(dt) << ", " << threads << " threads");
      set_num_threads(threads);
      Tensor w = randn_input({300, 40}, false, 8, dt).requires_grad_(true);
      Generator gen(9);
      const Tensor ids = randint(0, 300, {13, 51}, {.dtype = DType::i64}, &gen);
      const Tensor gy = randn_input({13, 51, 40}, false, 10, dt);
      const Tensor gw = autograd::grad({embedding(ids, w, /*padding_idx=*/7)}, {w}, {gy})[0];
      Tensor want = index_add(zeros({300, 40}, {.dtype = dt}), 0, ids.reshape({-1}), gy.reshape({-1, 40}));
      want.select(0, 7).zero_();
      set_num_threads(saved);
      REQUIRE(gw.dtype() == dt);
      REQUIRE(gw.to_vector<double>() == want.to_vector<double>());
    }
  }
}

TEST_CASE("embedding rejects bad indices and tables", "[ops][embedding]") {
  const Tensor w = zeros({4, 2});
  PRECIS_REQUIRE_THROWS_WITH_ALL(embedding(from_vector<int64_t>({0, 4}), w), IndexError, "embedding", "index 4",
                                 "4 rows", "[4, 2] f32 cpu");
  PRECIS_REQUIRE_THROWS_WITH_ALL(embedding(from_vector<int64_t>({-1}), w), IndexError, "index -1");
  PRECIS_REQUIRE_THROWS_WITH_ALL(embedding(from_vector<float>({0, 1}), w), DTypeError, "embedding",
                                 "indices [2] f32 cpu", "i64 or i32");
  PRECIS_REQUIRE_THROWS_WITH_ALL(embedding(from_vector<int64_t>({0}), zeros({4})), ShapeError, "embedding",
                                 "weight [4] f32 cpu");
  PRECIS_REQUIRE_THROWS_WITH_ALL(embedding(from_vector<int64_t>({0}), w, 4), IndexError, "padding_idx 4");
  PRECIS_REQUIRE_THROWS_WITH_ALL(embedding(from_vector<int64_t>({0}), w, -5), IndexError, "padding_idx -5");
}

// ---- dropout ----------------------------------------------------------------------------------

TEST_CASE("dropout keeps about 1 - p of the elements and scales them exactly", "[ops][dropout]") {
  const int64_t n = 100000;
  const Tensor x = randn_input({n}, false, 3, DType::f32);
  for (double p : {0.1, 0.5, 0.9}) {
    Generator g(7);
    const Tensor y = dropout(x, p, true, &g);
    REQUIRE(y.dtype() == DType::f32);
    const auto xv = x.to_vector<float>(), yv = y.to_vector<float>();
    const float scale = static_cast<float>(1.0 / (1.0 - p));
    int64_t kept = 0;
    for (int64_t i = 0; i < n; ++i) {
      if (yv[i] != 0.0f) {
        ++kept;
        REQUIRE(yv[i] == xv[i] * scale);
      }
    }
    // 5 standard deviations of a binomial fraction.
    const double frac = static_cast<double>(kept) / n, sd = std::sqrt(p * (1 - p) / n);
    INFO("p " << p << " kept " << frac);
    REQUIRE(std::abs(frac - (1 - p)) < 5 * sd);
    REQUIRE(g.offset() == static_cast<uint64_t>(n / 4));  // one Philox block per 4 elements
  }
}

TEST_CASE("dropout backward applies the forward's mask", "[ops][dropout]") {
  Tensor x = uniform_input({1000}, 1, 2, true, 4, DType::f32);  // no zeros: y == 0 means dropped
  Generator g(11);
  const Tensor y = dropout(x, 0.4, true, &g);
  const Tensor gy = randn_input({1000}, false, 5, DType::f32);
  y.backward(gy);
  const auto xv = x.detach().to_vector<float>(), yv = y.to_vector<float>(), gv = gy.to_vector<float>(),
             gx = x.grad().to_vector<float>();
  const float scale = static_cast<float>(1.0 / 0.6);
  for (int i = 0; i < 1000; ++i) REQUIRE(gx[i] == (yv[i] == 0.0f ? 0.0f : gv[i] * scale));
}

TEST_CASE("dropout is reproducible from the seed and independent of threads and strides", "[ops][dropout]") {
  const Tensor x = randn_input({37, 53}, false, 6, DType::f32);
  auto run = [&](const Tensor& in, uint64_t seed) {
    Generator g(seed);
    return dropout(in, 0.5, true, &g).to_vector<float>();
  };
  const auto a = run(x, 3);
  REQUIRE(run(x, 3) == a);
  REQUIRE(run(x, 4) != a);
  REQUIRE(run(non_contiguous(x), 3) == a);
  const int threads = get_num_threads();
  set_num_threads(1);
  const auto one = run(x, 3);
  set_num_threads(std::max(2, threads));
  const auto many = run(x, 3);
  set_num_threads(threads);
  REQUIRE(one == a);
  REQUIRE(many == a);
  // Successive calls on one generator draw new masks.
  Generator g(3);
  const auto first = dropout(x, 0.5, true, &g).to_vector<float>();
  REQUIRE(dropout(x, 0.5, true, &g).to_vector<float>() != first);
  // The default generator is used (and advanced) when none is given.
  manual_seed(9);
  const auto d1 = dropout(x, 0.5).to_vector<float>();
  manual_seed(9);
  REQUIRE(dropout(x, 0.5).to_vector<float>() == d1);
}

TEST_CASE("dropout is the identity in eval and at p = 0, and zeros at p = 1", "[ops][dropout]") {
  Tensor x = randn_input({3, 4}, true, 7);
  REQUIRE(dropout(x, 0.5, false).is_same(x));
  REQUIRE(dropout(x, 0.0).is_same(x));
  const Tensor z = dropout(x, 1.0);
  REQUIRE(z.to_vector<double>() == std::vector<double>(12, 0.0));
  z.backward(ones({3, 4}, {.dtype = DType::f64}));
  REQUIRE(x.grad().to_vector<double>() == std::vector<double>(12, 0.0));
}

TEST_CASE("dropout in f16 and bf16 keeps the dtype and scales in fp32", "[ops][dropout]") {
  const Tensor x = randn_input({4096}, false, 8, DType::f32);
  for (DType dt : {DType::f16, DType::bf16}) {
    Generator g1(5), g2(5);
    const Tensor y = dropout(x.to(dt), 0.25, true, &g1);
    REQUIRE(y.dtype() == dt);
    // Same mask as f32; values are the f32 result of the rounded input, rounded.
    const Tensor ref = dropout(x.to(dt).to(DType::f32), 0.25, true, &g2).to(dt);
    REQUIRE(y.to(DType::f32).to_vector<float>() == ref.to(DType::f32).to_vector<float>());
  }
}

TEST_CASE("dropout rejects p outside [0, 1] and non-floating input", "[ops][dropout]") {
  const Tensor x = zeros({3});
  PRECIS_REQUIRE_THROWS_WITH_ALL(dropout(x, -0.1), ValueError, "dropout", "p must be in [0, 1]", "-0.1");
  PRECIS_REQUIRE_THROWS_WITH_ALL(dropout(x, 1.5), ValueError, "1.5", "[3] f32 cpu");
  PRECIS_REQUIRE_THROWS_WITH_ALL(dropout(zeros({3}, {.dtype = DType::i64}), 0.5), DTypeError, "dropout",
                                 "[3] i64 cpu");
}

// ---- erf and pad ------------------------------------------------------------------------------

TEST_CASE("erf matches std::erf in every floating dtype", "[ops][erf]") {
  const Tensor x = mul(randn_input({1000}, false, 9), 2.0);
  const auto xv = x.to_vector<double>();
  std::vector<double> ref(xv.size());
  for (size_t i = 0; i < xv.size(); ++i) ref[i] = std::erf(xv[i]);
  PRECIS_REQUIRE_CLOSE(erf(x), from_vector<double>(ref, {1000}), DType::f64);
  PRECIS_REQUIRE_CLOSE(erf(non_contiguous(x.reshape({20, 50}))).reshape({1000}), from_vector<double>(ref, {1000}),
                       DType::f64);
  for (DType dt : {DType::f32, DType::f16, DType::bf16}) {
    const Tensor xr = x.to(dt);
    std::vector<double> r(xv.size());
    const auto xrv = xr.to(DType::f64).to_vector<double>();
    for (size_t i = 0; i < xv.size(); ++i) r[i] = std::erf(xrv[i]);
    const Tensor y = erf(xr);
    REQUIRE(y.dtype() == dt);
    PRECIS_REQUIRE_CLOSE(y.to(DType::f64), from_vector<double>(r, {1000}), dt);
  }
  // An integer tensor is taken as f32, as PyTorch's torch.erf(int_tensor).
  CHECK(erf(zeros({2}, {.dtype = DType::i32})).dtype() == DType::f32);
  PRECIS_REQUIRE_THROWS_WITH_ALL(erf(zeros({2}).to(DType::f8_e4m3)), DTypeError, "erf", "[2] f8_e4m3 cpu");
}

TEST_CASE("pad adds constant borders and crops with negative amounts", "[ops][pad]") {
  const Tensor x = arange(12.0, {.dtype = DType::f64}).reshape({3, 4});
  // Last dim (1, 2), first dim (0, -1): shape (2, 7).
  const Tensor y = pad(x, {1, 2, 0, -1}, 9.0);
  REQUIRE(y.sizes() == Shape{2, 7});
  REQUIRE(y.to_vector<double>() == std::vector<double>{9, 0, 1, 2, 3, 9, 9, 9, 4, 5, 6, 7, 9, 9});
  // Crop both sides of the last dim; pad a leading dim only.
  REQUIRE(pad(x, {-1, -2}).to_vector<double>() == std::vector<double>{1, 5, 9});
  REQUIRE(pad(x, {0, 0, 1, 0}).sizes() == Shape{4, 4});
  REQUIRE(pad(non_contiguous(x), {1, 1}).narrow(1, 1, 4).to_vector<double>() == x.to_vector<double>());
  // A crop of the whole dim leaves size 0; integers pad too.
  REQUIRE(pad(x, {-2, -2}).sizes() == Shape{3, 0});
  REQUIRE(pad(x.to(DType::i64), {1, 0}, 5).to_vector<int64_t>()[0] == 5);
  PRECIS_REQUIRE_THROWS_WITH_ALL(pad(x, {1, 1, 1}), ShapeError, "pad", "even");
  PRECIS_REQUIRE_THROWS_WITH_ALL(pad(x, {1, 1, 1, 1, 1, 1}), ShapeError, "pad", "[3, 4] f64 cpu");
  PRECIS_REQUIRE_THROWS_WITH_ALL(pad(x, {-3, -2}), ShapeError, "pad", "negative size -1");
}

// ---- gradient checks ---------------------------------------------------------------------------

namespace {

const bool kEmbeddingDropoutCases = register_grad_cases({
    {OpId::embedding, "repeated indices",
     [] { return TensorList{randn_input({5, 3}, true, 20)}; },
     [](const TensorList& x) { return TensorList{embedding(from_vector<int64_t>({4, 1, 1, 0, 4, 2}, {2, 3}), x[0])}; }},
    // The padding row gets no gradient although forward reads it, which finite differences would
    // contradict; so the indices here avoid it (its zero gradient is tested above).
    {OpId::embedding, "padding_idx non-contiguous i32",
     [] { return TensorList{non_contiguous(randn_input({4, 3}, true, 21))}; },
     [](const TensorList& x) {
       return TensorList{embedding(from_vector<int32_t>({0, 2, 3, 2}), x[0], /*padding_idx=*/1)};
     }},
    // The fn builds its generator each call, so every evaluation draws the same mask.
    {OpId::dropout, "p 0.3 fixed seed",
     [] { return TensorList{randn_input({4, 5}, true, 22)}; },
     [](const TensorList& x) {
       Generator g(123);
       return TensorList{dropout(x[0], 0.3, true, &g)};
     }},
    {OpId::dropout, "non-contiguous p 0.6",
     [] { return TensorList{non_contiguous(randn_input({3, 6}, true, 23))}; },
     [](const TensorList& x) {
       Generator g(7);
       return TensorList{dropout(x[0], 0.6, true, &g)};
     }},
    {OpId::erf, "values", [] { return TensorList{randn_input({3, 4}, true, 24)}; },
     [](const TensorList& x) { return TensorList{erf(x[0])}; }},
    {OpId::erf, "non-contiguous", [] { return TensorList{non_contiguous(randn_input({4, 3}, true, 25))}; },
     [](const TensorList& x) { return TensorList{erf(x[0])}; }},
    {OpId::pad, "pad and crop", [] { return TensorList{randn_input({2, 3, 4}, true, 26)}; },
     [](const TensorList& x) { return TensorList{pad(x[0], {1, -1, -1, 2, 1, 0}, 0.5)}; }},
    {OpId::pad, "non-contiguous", [] { return TensorList{non_contiguous(randn_input({3, 4}, true, 27))}; },
     [](const TensorList& x) { return TensorList{pad(x[0], {2, 1})}; }},
});

}  // namespace
