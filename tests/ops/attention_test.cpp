// scaled_dot_product_attention against a naive f64 reference (no mask, bool and additive masks,
// causal, explicit scale, all-masked rows, batch broadcasting), low precision, dropout, bad inputs,
// and its gradient-check cases.
#include <cmath>

#include "amp/autocast.h"
#include "core/rng.h"
#include "ops/functional.h"
#include "tests/support/op_cases.h"
#include "tests/support/tensor_testing.h"

using namespace precis;
using namespace precis::testing;

namespace {

// q: (B, L, E), k: (B, S, E), v: (B, S, Ev); mask: additive (B, L, S) values (−inf = masked).
std::vector<double> ref_attention(const Tensor& q, const Tensor& k, const Tensor& v, const std::vector<double>& mask,
                                  double scale) {
  const int64_t B = q.size(0), L = q.size(1), E = q.size(2), S = k.size(1), Ev = v.size(2);
  const auto qv = q.to(DType::f64).to_vector<double>(), kv = k.to(DType::f64).to_vector<double>(),
             vv = v.to(DType::f64).to_vector<double>();
  std::vector<double> out(B * L * Ev, 0.0);
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t i = 0; i < L; ++i) {
      std::vector<double> s(S);
      double m = -INFINITY;
      for (int64_t j = 0; j < S; ++j) {
        double dot = 0;
        for (int64_t e = 0; e < E; ++e) dot += qv[(b * L + i) * E + e] * kv[(b * S + j) * E + e];
        s[j] = dot * scale + (mask.empty() ? 0.0 : mask[(b * L + i) * S + j]);
        m = std::max(m, s[j]);
      }
      if (std::isinf(m)) continue;  // every key masked: zeros
      double z = 0;
      for (int64_t j = 0; j < S; ++j) z += std::exp(s[j] - m);
      for (int64_t j = 0; j < S; ++j)
        for (int64_t e = 0; e < Ev; ++e) out[(b * L + i) * Ev + e] += std::exp(s[j] - m) / z * vv[(b * S + j) * Ev + e];
    }
  }
  return out;
}

struct Qkv {
  Tensor q, k, v;
};
Qkv make_qkv(int64_t B, int64_t L, int64_t S, int64_t E, int64_t Ev, uint64_t seed, bool grad = false) {
  return {randn_input({B, L, E}, grad, seed), randn_input({B, S, E}, grad, seed + 1),
          randn_input({B, S, Ev}, grad, seed + 2)};
}

}  // namespace

TEST_CASE("attention matches a reference without a mask and with an explicit scale", "[ops][attention]") {
  const Qkv t = make_qkv(2, 3, 5, 4, 6, 1);
  const Tensor y = scaled_dot_product_attention(t.q, t.k, t.v);
  REQUIRE(y.sizes() == Shape{2, 3, 6});
  PRECIS_REQUIRE_CLOSE(y, from_vector<double>(ref_attention(t.q, t.k, t.v, {}, 0.5), {2, 3, 6}), DType::f64);
  const Tensor y2 = scaled_dot_product_attention(t.q, t.k, t.v, Tensor(), 0.0, false, 0.3);
  PRECIS_REQUIRE_CLOSE(y2, from_vector<double>(ref_attention(t.q, t.k, t.v, {}, 0.3), {2, 3, 6}), DType::f64);
  // f32 and a non-contiguous key.
  const Tensor yf = scaled_dot_product_attention(t.q.to(DType::f32), non_contiguous(t.k.to(DType::f32)),
                                                 t.v.to(DType::f32));
  REQUIRE(yf.dtype() == DType::f32);
  PRECIS_REQUIRE_CLOSE(yf.to(DType::f64), from_vector<double>(ref_attention(t.q, t.k, t.v, {}, 0.5), {2, 3, 6}),
                       DType::f32);
}

TEST_CASE("attention masks: bool keeps true, float adds, causal is top-left, all-masked rows are zero",
          "[ops][attention]") {
  const int64_t B = 2, L = 4, S = 3;
  const Qkv t = make_qkv(B, L, S, 4, 2, 2);
  const double scale = 0.5;
  // A bool (L, S) mask broadcast over the batch; row 2 has every key masked.
  std::vector<bool> keep = {true, false, true, false, true, true, false, false, false, true, true, false};
  std::vector<double> add_bool(B * L * S);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < L * S; ++i) add_bool[b * L * S + i] = keep[i] ? 0.0 : -INFINITY;
  const Tensor yb = scaled_dot_product_attention(t.q, t.k, t.v, from_vector<bool>(keep, {L, S}));
  PRECIS_REQUIRE_CLOSE(yb, from_vector<double>(ref_attention(t.q, t.k, t.v, add_bool, scale), {B, L, 2}), DType::f64);
  const auto ybv = yb.to_vector<double>();
  REQUIRE(ybv[2 * 2] == 0.0);
  REQUIRE(ybv[2 * 2 + 1] == 0.0);
  // An additive float mask of the full shape.
  const Tensor add = randn_input({B, L, S}, false, 9);
  const Tensor ya = scaled_dot_product_attention(t.q, t.k, t.v, add);
  PRECIS_REQUIRE_CLOSE(ya, from_vector<double>(ref_attention(t.q, t.k, t.v, add.to_vector<double>(), scale), {B, L, 2}),
                       DType::f64);
  // Causal with L > S: query i sees keys j <= i.
  std::vector<double> causal(B * L * S);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < L; ++i)
      for (int64_t j = 0; j < S; ++j) causal[(b * L + i) * S + j] = j <= i ? 0.0 : -INFINITY;
  const Tensor yc = scaled_dot_product_attention(t.q, t.k, t.v, Tensor(), 0.0, true);
  PRECIS_REQUIRE_CLOSE(yc, from_vector<double>(ref_attention(t.q, t.k, t.v, causal, scale), {B, L, 2}), DType::f64);
}

TEST_CASE("attention broadcasts batch dims over heads", "[ops][attention]") {
  // q (2, 3, L, E) against k, v shared by the batch: (1, 3, S, E).
  const Tensor q = randn_input({2, 3, 4, 5}, false, 3), k = randn_input({1, 3, 6, 5}, false, 4),
               v = randn_input({1, 3, 6, 2}, false, 5);
  const Tensor y = scaled_dot_product_attention(q, k, v);
  REQUIRE(y.sizes() == Shape{2, 3, 4, 2});
  const Tensor ref = scaled_dot_product_attention(q, k.expand({2, 3, 6, 5}).contiguous(), v.expand({2, 3, 6, 2}).contiguous());
  PRECIS_REQUIRE_CLOSE(y, ref, DType::f64);
}

TEST_CASE("attention in f16 and bf16 keeps the dtype, softmax in fp32", "[ops][attention]") {
  const Qkv t = make_qkv(2, 8, 8, 16, 16, 6);
  for (DType dt : {DType::f16, DType::bf16}) {
    const Tensor q = t.q.to(dt), k = t.k.to(dt), v = t.v.to(dt);
    const Tensor y = scaled_dot_product_attention(q, k, v, Tensor(), 0.0, true);
    REQUIRE(y.dtype() == dt);
    std::vector<double> causal(2 * 8 * 8);
    for (int64_t b = 0; b < 2; ++b)
      for (int64_t i = 0; i < 8; ++i)
        for (int64_t j = 0; j < 8; ++j) causal[(b * 8 + i) * 8 + j] = j <= i ? 0.0 : -INFINITY;
    // The scores and the weights are rounded to the storage dtype between the matmuls (as in
    // PyTorch), so three roundings stack up: four times the element-wise tolerance.
    const Tolerance tol{4 * tolerance(dt).rtol, 4 * tolerance(dt).atol};
    const std::string report =
        allclose_report(y.to(DType::f64), from_vector<double>(ref_attention(q, k, v, causal, 0.25), {2, 8, 16}), tol);
    INFO(report);
    REQUIRE(report.empty());
  }
}

TEST_CASE("attention dropout drops weights from the generator", "[ops][attention]") {
  const Qkv t = make_qkv(1, 4, 6, 3, 2, 7);
  Generator g1(5), g2(5);
  const Tensor a = scaled_dot_product_attention(t.q, t.k, t.v, Tensor(), 0.5, false, 0.0, &g1);
  const Tensor b = scaled_dot_product_attention(t.q, t.k, t.v, Tensor(), 0.5, false, 0.0, &g2);
  REQUIRE(a.to_vector<double>() == b.to_vector<double>());
  REQUIRE(g1.offset() == 6);  // 24 weights, one block per 4
  REQUIRE_FALSE(allclose(a, scaled_dot_product_attention(t.q, t.k, t.v), tolerance(DType::f64)));
}

TEST_CASE("attention rejects mismatched shapes, dtypes and masks", "[ops][attention]") {
  const Qkv t = make_qkv(2, 3, 5, 4, 6, 8);
  PRECIS_REQUIRE_THROWS_WITH_ALL(scaled_dot_product_attention(t.q, randn_input({2, 5, 3}, false), t.v), ShapeError,
                                 "scaled_dot_product_attention", "E", "k [2, 5, 3] f64 cpu");
  PRECIS_REQUIRE_THROWS_WITH_ALL(scaled_dot_product_attention(t.q, t.k, randn_input({2, 4, 6}, false)), ShapeError,
                                 "v [2, 4, 6] f64 cpu");
  PRECIS_REQUIRE_THROWS_WITH_ALL(scaled_dot_product_attention(t.q, t.k.to(DType::f32), t.v), DTypeError,
                                 "k [2, 5, 4] f32 cpu");
  PRECIS_REQUIRE_THROWS_WITH_ALL(scaled_dot_product_attention(t.q, t.k, t.v, zeros({3, 5}, {.dtype = DType::i64})),
                                 DTypeError, "attn_mask [3, 5] i64 cpu");
  PRECIS_REQUIRE_THROWS_WITH_ALL(scaled_dot_product_attention(t.q, t.k, t.v, zeros({3, 4})), ShapeError,
                                 "attn_mask [3, 4] f32 cpu");
  PRECIS_REQUIRE_THROWS_WITH_ALL(scaled_dot_product_attention(t.q, t.k, t.v, zeros({3, 5}), 0.0, true), ValueError,
                                 "is_causal");
  PRECIS_REQUIRE_THROWS_WITH_ALL(scaled_dot_product_attention(t.q, t.k, t.v, Tensor(), 1.5), ValueError, "dropout_p");
}

TEST_CASE("attention under autocast runs its matmuls in the low-precision dtype", "[ops][attention][amp]") {
  const Qkv t = make_qkv(2, 4, 4, 8, 8, 9);
  const Tensor q = t.q.to(DType::f32), k = t.k.to(DType::f32), v = t.v.to(DType::f32);
  Tensor y;
  {
    amp::Autocast autocast(DType::bf16);
    y = scaled_dot_product_attention(q, k, v, zeros({4, 4}));
  }
  REQUIRE(y.dtype() == DType::bf16);
  const Tolerance tol{4 * tolerance(DType::bf16).rtol, 4 * tolerance(DType::bf16).atol};
  const std::string report = allclose_report(y.to(DType::f64), scaled_dot_product_attention(t.q, t.k, t.v), tol);
  INFO(report);
  REQUIRE(report.empty());
}

// ---- gradient checks ---------------------------------------------------------------------------

namespace {

const bool kAttentionCases = register_grad_cases({
    {OpId::scaled_dot_product_attention, "q k v",
     [] {
       const Qkv t = make_qkv(2, 3, 4, 3, 2, 30, true);
       return TensorList{t.q, t.k, t.v};
     },
     [](const TensorList& x) { return TensorList{scaled_dot_product_attention(x[0], x[1], x[2])}; }},
    {OpId::scaled_dot_product_attention, "bool mask with an all-masked row, non-contiguous k",
     [] {
       const Qkv t = make_qkv(1, 3, 4, 2, 3, 33, true);
       return TensorList{t.q, non_contiguous(t.k), t.v};
     },
     [](const TensorList& x) {
       const Tensor keep = from_vector<bool>({true, false, true, true, false, false, false, false, true, true, false, true},
                                             {3, 4});
       return TensorList{scaled_dot_product_attention(x[0], x[1], x[2], keep)};
     }},
    {OpId::scaled_dot_product_attention, "causal, scale, additive mask",
     [] {
       const Qkv t = make_qkv(2, 4, 3, 2, 2, 36, true);
       return TensorList{t.q, t.k, t.v, randn_input({4, 3}, true, 39)};
     },
     [](const TensorList& x) {
       return TensorList{scaled_dot_product_attention(x[0], x[1], x[2], Tensor(), 0.0, true, 0.7),
                         scaled_dot_product_attention(x[0], x[1], x[2], x[3])};
     }},
    {OpId::scaled_dot_product_attention, "dropout fixed seed",
     [] {
       const Qkv t = make_qkv(1, 3, 4, 2, 2, 40, true);
       return TensorList{t.q, t.k, t.v};
     },
     [](const TensorList& x) {
       Generator g(99);
       return TensorList{scaled_dot_product_attention(x[0], x[1], x[2], Tensor(), 0.3, false, 0.0, &g)};
     }},
});

}  // namespace
