// attention_softmax, the fused score pass of scaled_dot_product_attention (ops/detail/attention_softmax.h):
// the attention with it against the attention with its composed ops, bit for bit (outputs, the
// three input gradients and the generator's offset) over masks (none, additive broadcast like
// BERT's, bool, causal, rows with every key masked), dropout off and on, f32 / f64 / bf16 and f16
// under autocast, 1 and 2 threads, lengths that are not multiples of 16; the kernel against a
// naive f64 reference; gradient checks; and its bad inputs.
#include <cmath>
#include <functional>
#include <limits>

#include "amp/autocast.h"
#include "core/grad_mode.h"
#include "core/rng.h"
#include "core/thread_pool.h"
#include "ops/contracts/kernels_attention.h"
#include "ops/detail/attention_softmax.h"
#include "ops/math/dropout_math.h"
#include "ops/op_table.h"
#include "ops/functional.h"
#include "ops/profiler.h"
#include "tests/support/op_cases.h"
#include "tests/support/tensor_testing.h"

using namespace precis;
using namespace precis::testing;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// Runs fn with the fused pass on or off, restoring the setting.
template <typename F>
auto with_fused(bool on, F&& fn) {
  const bool prev = detail::set_fused_kernels(on);
  struct Restore {
    bool prev;
    ~Restore() { detail::set_fused_kernels(prev); }
  } restore{prev};
  return fn();
}

struct Run {
  std::vector<double> out, dq, dk, dv;
  uint64_t offset = 0;
  int64_t fused_calls = 0, softmax_calls = 0;
};

enum class MaskCase { none, additive, keep, causal, keep_per_query, additive_strided };

// (B, H, L, S) attention with E = 8, the mask of `mc` (with an all-masked row where the kind can
// have one), dropout p from Generator(11), in `low` under autocast (f32 inputs) or, with
// low = f32 / f64, in that dtype; forward and backward of a fixed upstream gradient.
Run attention_run(bool fused, MaskCase mc, double p, DType low, int64_t B, int64_t H, int64_t L, int64_t S) {
  const bool autocast = low == DType::bf16 || low == DType::f16;
  const DType in_dtype = autocast ? DType::f32 : low;
  const int64_t E = 8;
  Tensor q = randn_input({B, H, L, E}, false, 1, in_dtype).requires_grad_(true);
  Tensor k = randn_input({B, H, S, E}, false, 2, in_dtype).requires_grad_(true);
  Tensor v = randn_input({B, H, S, E}, false, 3, in_dtype).requires_grad_(true);
  Tensor mask;
  bool causal = false;
  if (mc == MaskCase::additive) {
    // BERT's key-padding mask (B, 1, 1, S): batch 0 sees every key, batch 1 all but the last three
    // (−inf; its first key at −10000), batch 2 none (all −inf: rows with no visible key).
    std::vector<double> m(B * S, 0.0);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t j = 0; j < S; ++j) {
        if (b == 1 && j >= S - 3) m[b * S + j] = -kInf;
        if (b == 1 && j == 0) m[b * S + j] = -10000.0;
        if (b == 2) m[b * S + j] = -kInf;
      }
    mask = from_vector<double>(m, {B, 1, 1, S}, {.dtype = in_dtype});
  } else if (mc == MaskCase::keep) {
    // A bool (L, S) mask broadcast over batch and heads; row 1 sees no key.
    std::vector<bool> keep(L * S);
    for (int64_t i = 0; i < L; ++i)
      for (int64_t j = 0; j < S; ++j) keep[i * S + j] = i != 1 && (i + j) % 3 != 0;
    mask = from_vector<bool>(keep, {L, S});
  } else if (mc == MaskCase::causal) {
    causal = true;
  } else if (mc == MaskCase::keep_per_query) {
    // (L, 1): a query sees every key or none (stride 0 between keys); query 2 sees none.
    std::vector<bool> keep(L);
    for (int64_t i = 0; i < L; ++i) keep[i] = i != 2;
    mask = from_vector<bool>(keep, {L, 1});
  } else if (mc == MaskCase::additive_strided) {
    // An (H, L, S) additive mask laid out (H, S, L) and transposed: stride L between keys.
    mask = mul(randn_input({H, S, L}, false, 5, in_dtype), 2.0).transpose(-2, -1);
  }
  const Tensor g = randn_input({B, H, L, E}, false, 4, DType::f32);
  Generator gen(11);
  Run r;
  const bool was_on = profiler::enabled();
  profiler::reset();
  profiler::set_enabled(true);
  with_fused(fused, [&] {
    Tensor y;
    {
      std::optional<amp::Autocast> region;
      if (autocast) region.emplace(low);
      y = scaled_dot_product_attention(q, k, v, mask, p, causal, 0.0, &gen);
    }
    y.backward(g.to(y.dtype()));
    r.out = y.to(DType::f64).to_vector<double>();
    return 0;
  });
  for (const profiler::Entry& e : profiler::entries()) {
    if (e.direction != profiler::Direction::forward) continue;
    if (e.name == "attention_softmax") r.fused_calls += e.calls;
    if (e.name == "softmax") r.softmax_calls += e.calls;
  }
  profiler::set_enabled(was_on);
  profiler::reset();
  r.dq = q.grad().to(DType::f64).to_vector<double>();
  r.dk = k.grad().to(DType::f64).to_vector<double>();
  r.dv = v.grad().to(DType::f64).to_vector<double>();
  r.offset = gen.offset();
  return r;
}

// Equal element for element, NaN nowhere (the inputs are finite).
bool same(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (!(a[i] == b[i])) return false;
  return true;
}

const char* mask_name(MaskCase m) {
  switch (m) {
    case MaskCase::none: return "no mask";
    case MaskCase::additive: return "additive (B,1,1,S)";
    case MaskCase::keep: return "bool (L,S)";
    case MaskCase::causal: return "causal";
    case MaskCase::keep_per_query: return "bool (L,1)";
    case MaskCase::additive_strided: return "additive (H,L,S) transposed";
  }
  return "?";
}

}  // namespace

TEST_CASE("fused attention matches the composed ops bit for bit", "[ops][attention][fused]") {
  const int saved = get_num_threads();
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    for (DType dt : {DType::f32, DType::bf16, DType::f64, DType::f16})
      for (MaskCase mc : {MaskCase::none, MaskCase::additive, MaskCase::keep, MaskCase::causal,
                            MaskCase::keep_per_query, MaskCase::additive_strided})
        for (double p : {0.0, 0.1}) {
          // L, S not multiples of 16 (nor of a Philox block's 4); S = 128 too, BERT's length.
          for (auto [L, S] : {std::pair<int64_t, int64_t>{13, 19}, {7, 128}}) {
            DYNAMIC_SECTION(threads << " threads, " << dtype_name(dt) << ", " << mask_name(mc) << ", p = " << p
                                    << ", L = " << L << ", S = " << S) {
              const Run a = attention_run(true, mc, p, dt, 3, 2, L, S);
              const Run b = attention_run(false, mc, p, dt, 3, 2, L, S);
              CHECK(a.fused_calls == 1);
              CHECK(a.softmax_calls == 0);
              CHECK(b.fused_calls == 0);
              CHECK(b.softmax_calls == 1);
              CHECK(same(a.out, b.out));
              CHECK(same(a.dq, b.dq));
              CHECK(same(a.dk, b.dk));
              CHECK(same(a.dv, b.dv));
              CHECK(a.offset == b.offset);
            }
          }
        }
  }
  set_num_threads(saved);
}

TEST_CASE("fused attention zeroes rows with no visible key and their gradients", "[ops][attention][fused]") {
  // Additive mask: batch 2 sees no key; bool mask: row 1 sees none. Output rows zero, and the
  // gradient of q there zero.
  for (MaskCase mc : {MaskCase::additive, MaskCase::keep}) {
    INFO(mask_name(mc));
    const Run r = attention_run(true, mc, 0.1, DType::f32, 3, 2, 5, 6);
    const int64_t E = 8, H = 2, L = 5;
    for (int64_t b = 0; b < 3; ++b)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t i = 0; i < L; ++i) {
          const bool empty = mc == MaskCase::additive ? b == 2 : i == 1;
          if (!empty) continue;
          for (int64_t e = 0; e < E; ++e) {
            const int64_t at = ((b * H + h) * L + i) * E + e;
            CHECK(r.out[at] == 0.0);
            CHECK(r.dq[at] == 0.0);
          }
        }
  }
}

TEST_CASE("the score pass's packed dropout mask replays the drawn weights without the draw",
          "[ops][attention][fused]") {
  // The forward kernel three ways on the same scores: drawing (no mask kept), drawing and packing
  // the mask, and replaying the packed mask under another seed (which a replay must not read);
  // with and without the fp32 softmax output y.
  // All three give the same weights bit for bit, and the packed mask is the one dropout's rule
  // draws. (The backward, which reads only the mask, is checked against the composed path above.)
  using kernels::DropoutKeep;
  const int64_t B = 2, H = 3, L = 5, S = 37;  // a row of two mask words, the second partial
  for (DType dt : {DType::f32, DType::bf16, DType::f64}) {
    INFO(dtype_name(dt));
    const DType acc = dt == DType::f64 ? DType::f64 : DType::f32;
    const Tensor scores = randn_input({B, H, L, S}, false, 31).to(dt);
    const double p = 0.3;
    kernels::AttentionSoftmaxArgs args{.scale = 0.5, .dropout_p = p, .rng = {1234, 56}};
    const auto fwd = kernel<kernels::AttentionSoftmaxKernel>(OpId::attention_softmax, DeviceType::cpu, dt);
    const auto shape = kernels::dropout_keep_shape(B * H * L, S);
    auto run = [&](DropoutKeep how, const Tensor& keep, uint64_t seed, bool with_y = true) {
      Tensor out = empty(scores.sizes(), {.dtype = dt});
      const Tensor y = with_y ? empty(scores.sizes(), {.dtype = acc}) : Tensor();
      kernels::AttentionSoftmaxArgs a = args;
      a.keep = how;
      a.rng.seed = seed;
      fwd(out, y, keep, scores, Tensor(), a);
      return out;
    };
    const Tensor keep = empty({shape[0], shape[1]}, {.dtype = DType::i32});
    const Tensor drawn = run(DropoutKeep::draw, Tensor(), 1234);
    PRECIS_REQUIRE_SAME_BITS(run(DropoutKeep::draw_store, keep, 1234), drawn);
    PRECIS_REQUIRE_SAME_BITS(run(DropoutKeep::replay, keep, 999), drawn);
    // Without y (a forward no backward will read): the same weights.
    PRECIS_REQUIRE_SAME_BITS(run(DropoutKeep::draw, Tensor(), 1234, false), drawn);
    PRECIS_REQUIRE_SAME_BITS(run(DropoutKeep::replay, keep, 999, false), drawn);
    const auto* words = static_cast<const uint32_t*>(keep.data_ptr());
    const uint32_t threshold = kernels::dropout_keep_threshold(p);
    for (int64_t r = 0; r < B * H * L; ++r)
      for (int64_t j = 0; j < S; ++j) {
        INFO("row " << r << " key " << j);
        REQUIRE(((words[r * shape[1] + j / 32] >> (j % 32)) & 1u) ==
                (kernels::dropout_keep_at(1234, 56, r * S + j, threshold) ? 1u : 0u));
      }
  }
}

TEST_CASE("attention_softmax matches a naive f64 reference", "[ops][attention][fused]") {
  // scores (2, 3, 5, 7), additive mask (2, 1, 1, 7) with −inf entries, scale 0.3, dropout 0.25.
  const int64_t B = 2, H = 3, L = 5, S = 7;
  const Tensor scores = randn_input({B, H, L, S}, false, 21);
  std::vector<double> m(B * S, 0.0);
  for (int64_t j = 0; j < S; ++j) m[j] = j % 4 == 0 ? -kInf : 0.5 * j;
  const Tensor mask = from_vector<double>(m, {B, 1, 1, S});
  Generator gen(3);
  const Tensor p = attention_softmax(scores, mask, false, 0.3, 0.25, &gen);
  REQUIRE(gen.offset() == (B * H * L * S + 3) / 4);
  // The dropout mask the kernel applied, read back through dropout of ones with the same state.
  Generator again(3);
  const auto kept = dropout(ones({B, H, L, S}, {.dtype = DType::f64}), 0.25, true, &again).to_vector<double>();
  const auto sv = scores.to_vector<double>();
  std::vector<double> ref(sv.size());
  for (int64_t r = 0; r < B * H * L; ++r) {
    const int64_t b = r / (H * L);
    double mx = -kInf, z = 0;
    std::vector<double> t(S);
    for (int64_t j = 0; j < S; ++j) mx = std::max(mx, t[j] = sv[r * S + j] * 0.3 + m[b * S + j]);
    for (int64_t j = 0; j < S; ++j) z += std::exp(t[j] - mx);
    for (int64_t j = 0; j < S; ++j) ref[r * S + j] = std::exp(t[j] - mx) / z * kept[r * S + j];
  }
  PRECIS_REQUIRE_CLOSE(p, from_vector<double>(ref, {B, H, L, S}), DType::f64);
  // Causal: key j visible from query i when j <= i; L > S rows see every key.
  const Tensor sq = randn_input({4, 3}, false, 22);
  const auto c = attention_softmax(sq, Tensor(), true, 1.0).to_vector<double>();
  const auto s2 = sq.to_vector<double>();
  for (int64_t i = 0; i < 4; ++i) {
    double z = 0;
    for (int64_t j = 0; j <= std::min<int64_t>(i, 2); ++j) z += std::exp(s2[i * 3 + j]);
    for (int64_t j = 0; j < 3; ++j) CHECK(c[i * 3 + j] == Approx(j <= i ? std::exp(s2[i * 3 + j]) / z : 0.0).margin(1e-15));
  }
}

// ---- gradient checks and bad inputs ----------------------------------------------------------

namespace {

const bool kFusedCases = register_grad_cases({
    {OpId::attention_softmax, "additive (B,1,1,S) mask, scale, L and S not multiples of 4",
     [] { return TensorList{randn_input({2, 2, 3, 5}, true, 50)}; },
     [](const TensorList& x) {
       const Tensor mask = from_vector<double>({0.0, -1.0, -kInf, 0.5, 0.0, 0.0, 0.0, 0.0, -kInf, -2.0}, {2, 1, 1, 5});
       return TensorList{attention_softmax(x[0], mask, false, 0.7)};
     }},
    {OpId::attention_softmax, "bool mask with an all-masked row, dropout from a fixed generator",
     [] { return TensorList{randn_input({2, 3, 4}, true, 51)}; },
     [](const TensorList& x) {
       const Tensor keep =
           from_vector<bool>({true, false, true, true, false, false, false, false, true, true, false, true}, {3, 4});
       Generator g(7);
       return TensorList{attention_softmax(x[0], keep, false, 0.5, 0.3, &g)};
     }},
    {OpId::attention_softmax, "causal, L > S",
     [] { return TensorList{randn_input({2, 4, 3}, true, 52)}; },
     [](const TensorList& x) { return TensorList{attention_softmax(x[0], Tensor(), true, 1.3)}; }},
});

Tensor f32(const Shape& s) { return ones(s); }

void fused_backward_twice() {
  Tensor s = randn_input({2, 3, 4}, true, 60, DType::f32);
  Tensor p = attention_softmax(s, Tensor(), false, 0.5, 0.1);
  p.backward(ones_like(p));
  p.backward(ones_like(p));
}

// f32 scores without dropout: the saved softmax output is the weights themselves.
void fused_backward_after_inplace() {
  Tensor s = randn_input({2, 3, 4}, true, 61, DType::f32);
  Tensor p = attention_softmax(s, Tensor(), false, 0.5);
  {
    NoGradGuard no_grad;
    p.fill_(0.5);
  }
  p.backward(ones_like(p));
}

const bool kFusedErrors = register_error_cases({
    PRECIS_BAD_INPUT(attention_softmax, ShapeError, "a mask that grows the scores",
                     attention_softmax(f32({3, 4}), f32({2, 3, 4}), false, 1.0), "attention_softmax",
                     "attn_mask [2, 3, 4] f32 cpu"),
    PRECIS_BAD_INPUT(attention_softmax, DTypeError, "integer scores",
                     attention_softmax(zeros({3, 4}, {.dtype = DType::i64}), Tensor(), false, 1.0), "attention_softmax",
                     "i64"),
    PRECIS_BAD_INPUT(attention_softmax, ValueError, "dropout_p = 1", attention_softmax(f32({3, 4}), Tensor(), false, 1.0, 1.0),
                     "attention_softmax", "dropout_p"),
    PRECIS_BAD_INPUT(attention_softmax_backward, StateError, "backward a second time", fused_backward_twice(),
                     "attention_softmax_backward", "second time"),
    PRECIS_BAD_INPUT(attention_softmax_backward, StateError, "the saved weights modified in place",
                     fused_backward_after_inplace(), "modified by an in-place operation"),
});

}  // namespace

TEST_CASE("scaled_dot_product_attention's bad inputs raise the same errors with the fused pass", "[ops][attention][fused]") {
  // The checks run before the pass is chosen: the same typed errors with it on and off.
  for (bool on : {true, false}) {
    INFO("fused " << on);
    with_fused(on, [] {
      const Tensor q = randn_input({2, 3, 4}, false, 8), k = randn_input({2, 5, 4}, false, 9),
                   v = randn_input({2, 5, 6}, false, 10);
      PRECIS_REQUIRE_THROWS_WITH_ALL(scaled_dot_product_attention(q, k, v, zeros({3, 4})), ShapeError,
                                     "attn_mask [3, 4] f32 cpu");
      PRECIS_REQUIRE_THROWS_WITH_ALL(scaled_dot_product_attention(q, k, v, zeros({3, 5}, {.dtype = DType::i64})),
                                     DTypeError, "attn_mask [3, 5] i64 cpu");
      PRECIS_REQUIRE_THROWS_WITH_ALL(scaled_dot_product_attention(q, k, v, zeros({3, 5}), 0.0, true), ValueError,
                                     "is_causal");
      PRECIS_REQUIRE_THROWS_WITH_ALL(scaled_dot_product_attention(q, k, v, Tensor(), 1.5), ValueError, "dropout_p");
      return 0;
    });
  }
}
