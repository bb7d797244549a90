// Every op in f16 and bf16 against the f64 reference (docs/design/testing.md). One generic runner: build a
// case's f64 inputs, round the floating ones to the low dtype, and run the case once in the low
// dtype and once in f64 on the very same (rounded) values; outputs must agree under
// testing::tolerance(dtype, op), and so must the input gradients for one fixed upstream gradient
// (itself rounded to the low dtype). The cases are the gradient-check registry's (every
// differentiable op) plus the explicit ones below for the rest of the table; a coverage check
// makes sure no row is left out.
#include <map>
#include <set>
#include <sstream>

#include <catch2/catch.hpp>

#include "autograd/engine.h"
#include "autograd/grad_mode.h"
#include "ops/functional.h"
#include "ops/contracts/kernels_amp.h"
#include "tests/support/op_cases.h"
#include "tests/support/tensor_testing.h"

namespace precis::testing {
namespace {

constexpr DType kLowDTypes[] = {DType::f16, DType::bf16};

// A case input in the low dtype (low) and the same rounded values in f64 (ref), keeping the
// original's requires_grad and (roughly) its non-contiguity. Integer and bool inputs are shared.
struct Rounded {
  TensorList low, ref;
};

Rounded round_inputs(const TensorList& inputs, DType dtype) {
  Rounded r;
  for (const Tensor& t : inputs) {
    if (!t.defined() || !t.is_floating_point()) {
      r.low.push_back(t);
      r.ref.push_back(t);
      continue;
    }
    Tensor low = t.detach().to(dtype);
    Tensor ref = low.to(DType::f64);
    if (!t.is_contiguous()) {
      low = non_contiguous(low);
      ref = non_contiguous(ref);
    }
    if (t.requires_grad()) {
      low.requires_grad_(true);
      ref.requires_grad_(true);
    }
    r.low.push_back(low);
    r.ref.push_back(ref);
  }
  return r;
}

// The dtype the low run must produce where the reference produced `ref`: an f64 result stands
// for the run's own dtype; anything else (bool, i64, an explicit to(f32)) must match as is. This
// also catches a case whose fn promotes to f64 internally and so never ran the low kernel.
DType expected_dtype(DType ref, DType low) { return ref == DType::f64 ? low : ref; }

void compare(const std::string& what, const Tensor& low, const Tensor& ref, DType dtype, OpId op, Compared kind) {
  if (!ref.defined()) {
    INFO(what << ": the low-precision run gives a tensor where the reference gives none");
    CHECK_FALSE(low.defined());
    return;
  }
  INFO(what << ": low " << low.describe() << ", reference " << ref.describe());
  REQUIRE(low.defined());
  CHECK(low.dtype() == expected_dtype(ref.dtype(), dtype));
  if (ref.is_floating_point()) {
    const std::string report = allclose_report(low.to(DType::f64), ref, tolerance(dtype, op, kind));
    INFO(report);
    CHECK(report.empty());
  } else {
    CHECK(low.to_vector<double>() == ref.to_vector<double>());  // indices, masks: exact
  }
}

// One seeded upstream gradient per differentiable output, rounded to dtype (undefined for
// outputs that carry no gradient, e.g. max's indices).
TensorList upstream_grads(const TensorList& outs, DType dtype) {
  TensorList g;
  for (size_t i = 0; i < outs.size(); ++i) {
    if (outs[i].defined() && outs[i].requires_grad())
      g.push_back(randn_input(outs[i].sizes(), false, 900 + i, DType::f64).to(dtype));
    else
      g.push_back(Tensor());
  }
  return g;
}

// Runs c in dtype and in f64 on the same rounded inputs and compares outputs and input gradients.
void check_case(const GradCase& c, DType dtype) {
  const Rounded in = round_inputs(c.inputs(), dtype);
  const TensorList out_low = c.fn(in.low), out_ref = c.fn(in.ref);
  REQUIRE(out_low.size() == out_ref.size());
  for (size_t i = 0; i < out_ref.size(); ++i)
    compare("output " + std::to_string(i), out_low[i], out_ref[i], dtype, c.op, Compared::output);

  // Input gradients of sum(out · g) for the same upstream g (rounded to dtype) in both runs.
  TensorList roots_low, roots_ref, g_low, g_ref, wrt_low, wrt_ref;
  const TensorList g = upstream_grads(out_low, dtype);
  for (size_t i = 0; i < out_ref.size(); ++i) {
    if (!g[i].defined() || !out_ref[i].requires_grad()) continue;
    roots_low.push_back(out_low[i]);
    roots_ref.push_back(out_ref[i]);
    g_low.push_back(g[i].to(out_low[i].dtype()));
    g_ref.push_back(g[i].to(out_ref[i].dtype()));
  }
  for (size_t i = 0; i < in.low.size(); ++i) {
    if (!in.low[i].defined() || !in.low[i].requires_grad()) continue;
    wrt_low.push_back(in.low[i]);
    wrt_ref.push_back(in.ref[i]);
  }
  if (roots_low.empty() || wrt_low.empty()) return;
  const TensorList grad_low = autograd::grad(roots_low, wrt_low, g_low, /*retain_graph=*/false, /*allow_unused=*/true);
  const TensorList grad_ref = autograd::grad(roots_ref, wrt_ref, g_ref, false, true);
  for (size_t i = 0; i < grad_ref.size(); ++i)
    compare("gradient of differentiable input " + std::to_string(i), grad_low[i], grad_ref[i], dtype, c.op,
            Compared::gradient);
}

Tensor with_ties(uint64_t seed) {
  // b equals a at some positions (so eq/le/ge see ties after rounding too) and differs elsewhere.
  Tensor a = randn_input({3, 5}, false, seed), other = randn_input({3, 5}, false, seed + 1);
  Tensor tie = gt(randn_input({3, 5}, false, seed + 2), 0.0);
  return where(tie, a, other);
}

// Explicit cases for the rows with no gradient-check case: comparisons, copy and fill. The
// backward-kernel rows are exercised by their forward ops' gradient comparisons (kBackwardOf)
// and unscale_grads by its own test below.
const std::vector<GradCase>& explicit_cases() {
  static const std::vector<GradCase> cases = [] {
    std::vector<GradCase> v;
    using Cmp = Tensor (*)(const Tensor&, const Tensor&);
    using CmpScalar = Tensor (*)(const Tensor&, Scalar);
    const std::pair<OpId, std::pair<Cmp, CmpScalar>> cmps[] = {
        {OpId::eq, {static_cast<Cmp>(&eq), static_cast<CmpScalar>(&eq)}},
        {OpId::ne, {static_cast<Cmp>(&ne), static_cast<CmpScalar>(&ne)}},
        {OpId::lt, {static_cast<Cmp>(&lt), static_cast<CmpScalar>(&lt)}},
        {OpId::le, {static_cast<Cmp>(&le), static_cast<CmpScalar>(&le)}},
        {OpId::gt, {static_cast<Cmp>(&gt), static_cast<CmpScalar>(&gt)}},
        {OpId::ge, {static_cast<Cmp>(&ge), static_cast<CmpScalar>(&ge)}},
    };
    for (const auto& [op, fns] : cmps) {
      const Cmp f = fns.first;
      const CmpScalar fs = fns.second;
      v.push_back({op, "ties, broadcast, non-contiguous",
                   [] {
                     Tensor a = randn_input({3, 5}, false, 1);
                     return TensorList{a, non_contiguous(with_ties(1)), randn_input({5}, false, 4)};
                   },
                   [f, fs](const TensorList& x) {
                     // 0.25 is exact in every dtype, so the scalar comparison has one answer.
                     return TensorList{f(x[0], x[1]), f(x[0], x[2]), fs(x[0], 0.25)};
                   }});
    }
    v.push_back({OpId::copy, "strided copy and conversions",
                 [] { return TensorList{non_contiguous(randn_input({4, 3}, false, 5))}; },
                 [](const TensorList& x) {
                   Tensor into_f32 = zeros({4, 3}, {.dtype = DType::f32});
                   into_f32.copy_(x[0]);  // low → f32 is exact, as f64 → f32 of the rounded values
                   Tensor back = zeros({3, 4}, {.dtype = x[0].dtype()}).t();
                   back.copy_(into_f32);  // f32 → low into a transposed destination
                   return TensorList{x[0].contiguous(), into_f32, back, x[0].to(DType::i64)};
                 }});
    v.push_back({OpId::fill, "fill and zero",
                 [] { return TensorList{non_contiguous(randn_input({3, 4}, false, 6))}; },
                 [](const TensorList& x) {
                   Tensor a = x[0].clone(), b = x[0].clone();
                   a.fill_(1.375);  // exact in every dtype
                   b.t().slice(0, 1, 3).fill_(-2.5);
                   Tensor c = x[0].clone();
                   c.fill_(0.1);  // rounded once to the dtype: within the tolerance
                   return TensorList{a, b, c};
                 }});
    v.push_back({OpId::cast, "low to f32 and back, and to f32",
                 [] { return TensorList{randn_input({4}, true, 7)}; },
                 [](const TensorList& x) {
                   // Exact both ways for rounded values; the gradient is cast back to the source.
                   return TensorList{x[0].to(DType::f32).to(x[0].dtype()) * 2.0, x[0].to(DType::f32) * 3.0};
                 }});
    return v;
  }();
  return cases;
}

// Reductions over thousands of elements, forward and backward. The registry's cases are small,
// so a kernel that accumulated in the low dtype could pass them; here such a kernel is far outside
// the table (a running bf16 sum of 4096 terms loses most of the mantissa).
const std::vector<GradCase>& large_cases() {
  static const std::vector<GradCase> cases = [] {
    auto in = [](std::vector<Shape> shapes, uint64_t seed) {
      return [shapes, seed] {
        TensorList t;
        for (size_t i = 0; i < shapes.size(); ++i) t.push_back(randn_input(shapes[i], true, seed + i));
        return t;
      };
    };
    // i64 class/row indices in [0, n), seeded.
    auto indices = [](int64_t count, int64_t n, uint64_t seed) {
      Tensor u = uniform_input({count}, 0.0, static_cast<double>(n), false, seed);
      return u.to(DType::i64);
    };
    std::vector<GradCase> v;
    v.push_back({OpId::sum, "(8, 4096) all and along dim 1", in({{8, 4096}}, 40),
                 [](const TensorList& x) { return TensorList{sum(x[0]), sum(x[0], {1})}; }});
    v.push_back({OpId::mean, "(8, 4096) along dim 1 and dim 0", in({{8, 4096}}, 41),
                 [](const TensorList& x) { return TensorList{mean(x[0], {1}), mean(x[0], {0})}; }});
    v.push_back({OpId::var, "(4, 4096) along dim 1, data offset from zero", in({{4, 4096}}, 42),
                 [](const TensorList& x) { return TensorList{var(x[0] + 3.0, {1})}; }});
    v.push_back({OpId::matmul, "k = 512 forward, 512-row sum backward", in({{512, 512}, {512, 4}}, 43),
                 [](const TensorList& x) { return TensorList{matmul(x[0], x[1])}; }});
    v.push_back({OpId::matmul, "dot of 4096", in({{4096}, {4096}}, 45),
                 [](const TensorList& x) { return TensorList{matmul(x[0], x[1])}; }});
    v.push_back({OpId::linear, "(512, 256) rows, weight and bias sums over 512", in({{512, 256}, {4, 256}, {4}}, 47),
                 [](const TensorList& x) { return TensorList{linear(x[0], x[1], x[2])}; }});
    v.push_back({OpId::conv2d, "(4, 32, 16, 16) 3x3: weight gradient sums 1024 positions",
                 in({{4, 32, 16, 16}, {4, 32, 3, 3}, {4}}, 50),
                 [](const TensorList& x) { return TensorList{conv2d(x[0], x[1], x[2], {1, 1}, {1, 1})}; }});
    v.push_back({OpId::softmax, "(4, 4096) along dim 1", in({{4, 4096}}, 53),
                 [](const TensorList& x) { return TensorList{softmax(x[0], 1)}; }});
    v.push_back({OpId::log_softmax, "(4, 4096) along dim 1", in({{4, 4096}}, 54),
                 [](const TensorList& x) { return TensorList{log_softmax(x[0], 1)}; }});
    v.push_back({OpId::layer_norm, "(256, 256) affine", in({{256, 256}, {256}, {256}}, 55),
                 [](const TensorList& x) { return TensorList{layer_norm(x[0], {256}, x[1], x[2])}; }});
    v.push_back({OpId::batch_norm, "training (16, 4, 16, 16) affine", in({{16, 4, 16, 16}, {4}, {4}}, 58),
                 [](const TensorList& x) { return TensorList{batch_norm(x[0], Tensor(), Tensor(), x[1], x[2], true)}; }});
    v.push_back({OpId::group_norm, "(4, 8, 16, 16) two groups affine", in({{4, 8, 16, 16}, {8}, {8}}, 61),
                 [](const TensorList& x) { return TensorList{group_norm(x[0], 2, x[1], x[2])}; }});
    v.push_back({OpId::cross_entropy, "4096 rows mean, and 4096 classes", in({{4096, 8}, {4, 4096}}, 64),
                 [indices](const TensorList& x) {
                   return TensorList{cross_entropy(x[0], indices(4096, 8, 66)), cross_entropy(x[1], indices(4, 4096, 67))};
                 }});
    v.push_back({OpId::nll_loss, "4096 rows mean", in({{4096, 4}}, 68),
                 [indices](const TensorList& x) { return TensorList{nll_loss(x[0], indices(4096, 4, 69))}; }});
    v.push_back({OpId::mse_loss, "4096 elements mean", in({{64, 64}, {64, 64}}, 70),
                 [](const TensorList& x) { return TensorList{mse_loss(x[0], x[1])}; }});
    v.push_back({OpId::binary_cross_entropy_with_logits, "4096 elements mean", in({{64, 64}}, 72),
                 [](const TensorList& x) {
                   const Tensor target = uniform_input({64, 64}, 0.0, 1.0, false, 73).to(x[0].dtype());
                   return TensorList{binary_cross_entropy_with_logits(x[0], target)};
                 }});
    v.push_back({OpId::interpolate, "(2, 2, 16, 16) bilinear to 37x23", in({{2, 2, 16, 16}}, 98),
                 [](const TensorList& x) {
                   return TensorList{interpolate(x[0], {.size = {37, 23}, .mode = InterpolateMode::bilinear})};
                 }});
    v.push_back({OpId::adaptive_avg_pool2d, "(2, 2, 32, 32) to 1x1", in({{2, 2, 32, 32}}, 74),
                 [](const TensorList& x) { return TensorList{adaptive_avg_pool2d(x[0], {1, 1})}; }});
    v.push_back({OpId::avg_pool2d, "(2, 2, 32, 32) 16x16 windows", in({{2, 2, 32, 32}}, 75),
                 [](const TensorList& x) { return TensorList{avg_pool2d(x[0], {16, 16})}; }});
    v.push_back({OpId::embedding, "2048 lookups of 3 rows: the weight gradient sums ~700 each", in({{3, 8}}, 76),
                 [indices](const TensorList& x) { return TensorList{embedding(indices(2048, 3, 77), x[0])}; }});
    v.push_back({OpId::index_add, "2048 source rows into 3", in({{3, 4}, {2048, 4}}, 78),
                 [indices](const TensorList& x) { return TensorList{index_add(x[0], 0, indices(2048, 3, 80), x[1])}; }});
    v.push_back({OpId::scatter_add, "2048 source elements into 3 per column", in({{3, 4}, {2048, 4}}, 81),
                 [indices](const TensorList& x) {
                   Tensor index = indices(2048 * 4, 3, 83).view({2048, 4});
                   return TensorList{scatter_add(x[0], 0, index, x[1])};
                 }});
    v.push_back({OpId::scaled_dot_product_attention, "1024 keys", in({{1, 4, 16}, {1, 1024, 16}, {1, 1024, 16}}, 84),
                 [](const TensorList& x) { return TensorList{scaled_dot_product_attention(x[0], x[1], x[2])}; }});
    return v;
  }();
  return cases;
}

// Registry cases that name f64 themselves, so they cannot run in a low dtype; each op here has a
// low-precision counterpart among the explicit cases.
const std::set<std::pair<OpId, std::string>> kF64Only = {{OpId::cast, "f64 to f32 and back"}};

// Backward-only kernel rows and the forward op whose gradient comparison runs them in f16/bf16.
const std::map<OpId, OpId> kBackwardOf = {
    {OpId::relu_backward, OpId::relu},
    {OpId::gelu_backward, OpId::gelu},
    {OpId::gelu_epilogue, OpId::linear_gelu},  // linear_gelu's forward and backward passes
    {OpId::gelu_epilogue_backward, OpId::linear_gelu},
    {OpId::conv2d_backward, OpId::conv2d},
    {OpId::max_pool2d_backward, OpId::max_pool2d},
    {OpId::avg_pool2d_backward, OpId::avg_pool2d},
    {OpId::adaptive_avg_pool2d_backward, OpId::adaptive_avg_pool2d},
    {OpId::batch_norm_backward, OpId::batch_norm},
    {OpId::layer_norm_backward, OpId::layer_norm},
    {OpId::group_norm_backward, OpId::group_norm},
    {OpId::softmax_backward, OpId::softmax},
    {OpId::log_softmax_backward, OpId::log_softmax},
    {OpId::attention_softmax_backward, OpId::attention_softmax},
    {OpId::cross_entropy_backward, OpId::cross_entropy},
};

// Rows checked by a test case of their own: unscale_grads in this file, the optimizer and
// clipping kernels in tests/optim/optim_kernels_test.cpp (f16/bf16 parameters and gradients
// against f64), cross_entropy_with_grad in cross_entropy_with_grad_test.cpp (f16/bf16 logits
// against f64), scaled_matmul in scaled_matmul_test.cpp (fp8 operands, bf16/f32 outputs against an
// exact f64 sum), fp8_scaled_cast in fp8_cast_test.cpp (f16/bf16 inputs against the composed
// cast, bit for bit; every f16/bf16 value in tests/amp/fp8_recipe_test.cpp).
const std::set<OpId> kOwnTest = {OpId::unscale_grads,  OpId::sgd_step,        OpId::adam_step,
                                   OpId::grad_norms,     OpId::clip_grad_norm,  OpId::clip_grad_value,
                                   OpId::cross_entropy_with_grad, OpId::scaled_matmul,
                                   OpId::fp8_scaled_cast};

// [cuda]: with a GPU present grad_cases() holds to_device's case (cpu to cuda and back).
TEST_CASE("every op matches the f64 reference in f16 and bf16, outputs and gradients", "[ops][lowp][cuda]") {
  (void)PRECIS_CUDA_PART("to_device's case in f16 and bf16, cpu to cuda and back");
  std::vector<const GradCase*> all;
  for (const GradCase& c : grad_cases())
    if (kF64Only.count({c.op, c.label}) == 0) all.push_back(&c);
  for (const GradCase& c : explicit_cases()) all.push_back(&c);
  for (const GradCase& c : large_cases()) all.push_back(&c);
  for (DType dtype : kLowDTypes)
    for (const GradCase* c : all) {
      DYNAMIC_SECTION(dtype_name(dtype) << " " << op_name(c->op) << ": " << c->label) { check_case(*c, dtype); }
    }
}

TEST_CASE("unscale_grads on f16 and bf16 gradients matches f64", "[ops][lowp]") {
  const double inf = std::numeric_limits<double>::infinity();
  for (DType dtype : kLowDTypes) {
    INFO(dtype_name(dtype));
    // Values scaled by 2^10 as a loss scaler would leave them; one gradient overflowed.
    std::vector<Tensor> low = {mul(randn_input({1000}, false, 7), 1024.0).to(dtype),
                               from_vector<double>({1.0, inf, -3.0, 2048.0}, {4}).to(dtype)};
    std::vector<Tensor> ref = {low[0].to(DType::f64), low[1].to(DType::f64)};
    auto run = [](const std::vector<Tensor>& grads, std::vector<double>& counts, std::vector<double>& sq, float& found) {
      Tensor inv = scalar_tensor(1.0 / 1024.0, {.dtype = DType::f32});
      Tensor found_inf = zeros({}, {.dtype = DType::f32});
      Tensor c = zeros({2}, {.dtype = DType::f32}), s = zeros({2}, {.dtype = DType::f64});
      kernel<kernels::UnscaleKernel>(OpId::unscale_grads, DeviceType::cpu, DType::f32)(grads, inv, true, found_inf, c, s);
      counts = c.to_vector<double>();
      sq = s.to_vector<double>();
      found = found_inf.item<float>();
    };
    std::vector<double> c_low, c_ref, s_low, s_ref;
    float f_low = 0, f_ref = 0;
    run(low, c_low, s_low, f_low);
    run(ref, c_ref, s_ref, f_ref);
    CHECK(c_low == c_ref);
    CHECK(c_low == std::vector<double>{0.0, 1.0});
    CHECK(f_low == 1.0f);
    CHECK(f_ref == 1.0f);
    // The unscaled gradients stay in their dtype, each rounded once.
    CHECK(low[0].dtype() == dtype);
    PRECIS_REQUIRE_CLOSE(low[0].to(DType::f64), ref[0], dtype);
    PRECIS_REQUIRE_CLOSE(low[1].to(DType::f64), ref[1], dtype);
    // Squared norms of the unscaled (unrounded) values, accumulated wider than the storage.
    CHECK(s_low[0] == Approx(s_ref[0]).epsilon(1e-6));
  }
}

TEST_CASE("every op in the table is exercised by the low-precision test", "[ops][lowp][coverage][cuda]") {
  const bool gpu = PRECIS_CUDA_PART("to_device's row, whose case needs a device");
  std::set<OpId> with_grads, covered;
  for (const GradCase& c : grad_cases()) {
    if (kF64Only.count({c.op, c.label}) != 0) continue;
    covered.insert(c.op);
    bool differentiable_input = false;
    for (const Tensor& t : c.inputs()) differentiable_input |= t.defined() && t.requires_grad();
    if (differentiable_input) with_grads.insert(c.op);
  }
  for (const GradCase& c : explicit_cases()) covered.insert(c.op);
  covered.insert(kOwnTest.begin(), kOwnTest.end());
  std::string missing;
  for (const auto& [backward, forward] : kBackwardOf) {
    if (with_grads.count(forward) != 0) covered.insert(backward);
    else missing += std::string(op_name(backward)) + ": its forward op " + op_name(forward) + " has no gradient case\n";
  }
  for (int i = 0; i < kNumOps; ++i) {
    const OpId op = static_cast<OpId>(i);
    // to_device needs a second device: its case exists only where CUDA is available.
    if (op == OpId::to_device && !gpu) continue;
    if (covered.count(op) == 0) missing += std::string(op_name(op)) + ": no low-precision case\n";
  }
  INFO("rows of ops/op_list.def the low-precision test does not run:\n" << missing);
  CHECK(missing.empty());
}

}  // namespace
}  // namespace precis::testing
