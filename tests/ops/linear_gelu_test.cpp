// linear_gelu: the output against a naive f64 reference; output and gradients bit for bit the
// unfused gelu(linear()) for both approximations, with and without bias, 1-D and 3-D inputs,
// f32/f64/f16/bf16, one and two threads (two-thread splits that cut a row and a bias-sum chunk),
// an output width of one, no rows, both of the op's modes (gelu' kept from forward or recomputed);
// no-grad and weight-only gradients; bf16 autocast; the op-table gradient-check and bad-input
// cases (the f16/bf16-vs-f64 table runs the gradient cases through tests/ops/lowp_test.cpp).
#include <cmath>
#include <cstring>
#include <vector>

#include "amp/autocast.h"
#include "autograd/engine.h"
#include "autograd/grad_mode.h"
#include "core/thread_pool.h"
#include "ops/functional.h"
#include "ops/contracts/kernels_epilogue.h"
#include "ops/op_table.h"
#include "tests/support/op_cases.h"
#include "tests/support/tensor_testing.h"

using namespace precis;
using namespace precis::testing;

namespace {

bool same_bits(const Tensor& a, const Tensor& b) {
  if (!a.defined() || !b.defined()) return a.defined() == b.defined();
  if (a.dtype() != b.dtype() || a.sizes() != b.sizes()) return false;
  const Tensor ac = a.contiguous(), bc = b.contiguous();
  return std::memcmp(ac.data_ptr(), bc.data_ptr(), static_cast<size_t>(ac.numel()) * ac.element_size()) == 0;
}

// gelu(x·wᵀ + b) in double from the definition (erf form: x·Φ(x); tanh form: PyTorch's formula).
std::vector<double> naive(const Tensor& x, const Tensor& w, const Tensor& b, bool tanh_form) {
  const int64_t outs = w.size(0), in = w.size(1), rows = x.numel() / in;
  const std::vector<double> xv = x.to(DType::f64).contiguous().to_vector<double>();
  const std::vector<double> wv = w.to(DType::f64).contiguous().to_vector<double>();
  const std::vector<double> bv = b.defined() ? b.to(DType::f64).to_vector<double>() : std::vector<double>(outs, 0.0);
  std::vector<double> y;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t o = 0; o < outs; ++o) {
      double s = bv[o];
      for (int64_t k = 0; k < in; ++k) s += xv[r * in + k] * wv[o * in + k];
      y.push_back(tanh_form ? 0.5 * s * (1 + std::tanh(std::sqrt(2 / M_PI) * (s + 0.044715 * s * s * s)))
                            : 0.5 * s * (1 + std::erf(s / std::sqrt(2.0))));
    }
  return y;
}

// Restores the thread count and the op's mode on scope exit.
struct Restore {
  int threads = get_num_threads();
  bool saves = detail::linear_gelu_saves_derivative();
  ~Restore() {
    set_num_threads(threads);
    detail::linear_gelu_saves_derivative() = saves;
  }
};

// Output and the gradients of x, w, b (those that require grad) for an upstream gradient g.
TensorList run(bool fused, const Tensor& x, const Tensor& w, const Tensor& b, const std::string& approx,
               const Tensor& g) {
  const Tensor y = fused ? linear_gelu(x, w, b, approx) : gelu(linear(x, w, b), approx);
  TensorList out{y};
  TensorList wrt;
  for (const Tensor* t : {&x, &w, &b})
    if (t->defined() && t->requires_grad()) wrt.push_back(*t);
  if (!wrt.empty()) {
    const TensorList gs = autograd::grad({y}, wrt, {g});
    out.insert(out.end(), gs.begin(), gs.end());
  }
  return out;
}

// Compares fused and unfused bit for bit on seeded operands.
void check_bitwise(const Shape& lead, int64_t in, int64_t outs, bool bias, DType dt, const std::string& approx,
                   uint64_t seed) {
  Shape xs = lead;
  xs.push_back(in);
  Shape ys = lead;
  ys.push_back(outs);
  // Values spread over gelu's curved range (|pre| up to ~4) and its tails.
  const Tensor x = randn_input(xs, true, seed, DType::f32).to(dt).detach().requires_grad_();
  const Tensor w = mul(randn_input({outs, in}, false, seed + 1, DType::f32), 1.5 / std::sqrt(double(in))).to(dt).requires_grad_();
  const Tensor b = bias ? randn_input({outs}, false, seed + 2, DType::f32).to(dt).requires_grad_() : Tensor();
  const Tensor g = randn_input(ys, false, seed + 3, DType::f32).to(dt);
  const TensorList f = run(true, x, w, b, approx, g), p = run(false, x, w, b, approx, g);
  REQUIRE(f.size() == p.size());
  for (size_t i = 0; i < p.size(); ++i) {
    INFO("output " << i << " (y, then the gradients of x, w and b)");
    CHECK(same_bits(f[i], p[i]));
  }
}

}  // namespace

TEST_CASE("linear_gelu matches the naive f64 reference", "[ops][linalg]") {
  for (const char* approx : {"none", "tanh"})
    for (bool bias : {true, false})
      for (const Shape& xs : {Shape{6}, Shape{2, 3, 6}}) {
        INFO(approx << " bias " << bias << " input " << shape_str(xs));
        const Tensor x = mul(randn_input(xs, false, 3), 2.0), w = randn_input({5, 6}, false, 4);
        const Tensor b = bias ? randn_input({5}, false, 5) : Tensor();
        const Tensor y = linear_gelu(x, w, b, approx);
        Shape ys(xs.begin(), xs.end() - 1);
        ys.push_back(5);
        REQUIRE(y.sizes() == ys);
        const std::vector<double> ref = naive(x, w, b, std::string(approx) == "tanh");
        const std::vector<double> got = y.contiguous().to_vector<double>();
        for (size_t i = 0; i < ref.size(); ++i) CHECK(got[i] == Approx(ref[i]).margin(1e-12).epsilon(1e-12));
      }
}

TEST_CASE("linear_gelu: output and gradients are gelu(linear())'s bit for bit", "[ops][linalg]") {
  Restore restore;
  for (bool saves : {true, false})
    for (DType dt : {DType::f32, DType::bf16, DType::f16, DType::f64})
      for (const char* approx : {"none", "tanh"})
        for (bool bias : {true, false}) {
          detail::linear_gelu_saves_derivative() = saves;
          INFO("gelu' kept from forward " << saves << ", " << dtype_name(dt) << " " << approx << " bias " << bias);
          set_num_threads(1);
          check_bitwise({}, 7, 13, bias, dt, approx, 10);       // 1-D input: one row of odd width
          check_bitwise({2, 5}, 9, 37, bias, dt, approx, 20);   // 3-D input, vector tails everywhere
          set_num_threads(2);
          // 22200 elements: the two-task split (at 11100, mid-row, unaligned) cuts the first of
          // the bias sum's two 442-row chunks.
          check_bitwise({600}, 8, 37, bias, dt, approx, 30);
          // 64 x 300: wider than a sum column block; the split falls mid-row.
          check_bitwise({2, 32}, 16, 300, bias, dt, approx, 40);
        }
}

TEST_CASE("linear_gelu: one output column, and no rows", "[ops][linalg]") {
  for (DType dt : {DType::f32, DType::bf16}) {
    INFO(dtype_name(dt));
    check_bitwise({40}, 5, 1, true, dt, "none", 50);
    const Tensor x = zeros({0, 4}, {.dtype = dt}).requires_grad_();
    const Tensor w = randn_input({3, 4}, true, 51, dt), b = randn_input({3}, true, 52, dt);
    const Tensor y = linear_gelu(x, w, b);
    REQUIRE(y.sizes() == (Shape{0, 3}));
    const TensorList g = autograd::grad({y}, {x, w, b}, {zeros({0, 3}, {.dtype = dt})});
    CHECK(g[0].sizes() == (Shape{0, 4}));
    CHECK(max(abs(g[1].to(DType::f64))).item<double>() == 0.0);
    REQUIRE(g[2].sizes() == Shape{3});
    CHECK(max(abs(g[2].to(DType::f64))).item<double>() == 0.0);
  }
}

TEST_CASE("linear_gelu without gradients, and with only the weight's", "[ops][linalg]") {
  for (DType dt : {DType::f32, DType::bf16}) {
    INFO(dtype_name(dt));
    const Tensor x = randn_input({4, 6, 8}, true, 60, dt), w = randn_input({12, 8}, true, 61, dt),
                 b = randn_input({12}, true, 62, dt);
    Tensor y, ref;
    {
      NoGradGuard no_grad;
      y = linear_gelu(x, w, b, "tanh");
      ref = gelu(linear(x, w, b), "tanh");
    }
    CHECK_FALSE(y.requires_grad());
    CHECK(same_bits(y, ref));
    const Tensor xc = x.detach(), bc = b.detach();
    const Tensor g = randn_input({4, 6, 12}, false, 63, dt);
    const Tensor gw = autograd::grad({linear_gelu(xc, w, bc)}, {w}, {g})[0];
    const Tensor gw_ref = autograd::grad({gelu(linear(xc, w, bc))}, {w}, {g})[0];
    CHECK(same_bits(gw, gw_ref));
  }
}

TEST_CASE("linear_gelu under bf16 autocast is the unfused pair's, output and fp32 gradients", "[ops][linalg][amp]") {
  // fp32 parameters and input, as a model under autocast; the GEMMs and gelu run in bf16.
  const Tensor x = randn_input({2, 16, 32}, true, 70, DType::f32), w = randn_input({64, 32}, true, 71, DType::f32),
               b = randn_input({64}, true, 72, DType::f32);
  const Tensor g = randn_input({2, 16, 64}, false, 73, DType::bf16);
  Tensor y, ref;
  {
    amp::Autocast ac(DType::bf16);
    y = linear_gelu(x, w, b);
  }
  {
    amp::Autocast ac(DType::bf16);
    ref = gelu(linear(x, w, b));
  }
  REQUIRE(y.dtype() == DType::bf16);
  CHECK(same_bits(y, ref));
  const TensorList gf = autograd::grad({y}, {x, w, b}, {g}), gp = autograd::grad({ref}, {x, w, b}, {g});
  for (size_t i = 0; i < gp.size(); ++i) {
    INFO("gradient " << i);
    CHECK(gf[i].dtype() == DType::f32);
    CHECK(same_bits(gf[i], gp[i]));
  }
}

// ---- op-table cases ----------------------------------------------------------------------------

namespace {

Tensor f32(const Shape& s) { return zeros(s); }

// The epilogue kernels called directly with one operand altered.
void call_forward(const Shape& out_shape, DType deriv_dtype) {
  kernel<kernels::GeluEpilogueKernel>(OpId::gelu_epilogue, DeviceType::cpu, DType::f32)(
      f32(out_shape), zeros({2, 3}, {.dtype = deriv_dtype}), f32({2, 3}), 0.0);
}
void call_backward(const Shape& bias_shape, DType saved_dtype, bool saved_is_derivative) {
  kernel<kernels::GeluEpilogueBackwardKernel>(OpId::gelu_epilogue_backward, DeviceType::cpu, DType::bf16)(
      zeros({2, 3}, {.dtype = DType::bf16}), zeros(bias_shape, {.dtype = DType::bf16}),
      zeros({2, 3}, {.dtype = DType::bf16}), zeros({2, 3}, {.dtype = saved_dtype}), saved_is_derivative, 0.0);
}

const bool kLinearGeluCases = register_grad_cases({
    {OpId::linear_gelu, "3-D input, bias",
     [] { return TensorList{randn_input({2, 3, 4}, true, 81), randn_input({5, 4}, true, 82), randn_input({5}, true, 83)}; },
     [](const TensorList& x) { return TensorList{linear_gelu(x[0], x[1], x[2])}; }},
    {OpId::linear_gelu, "tanh form, no bias",
     [] { return TensorList{randn_input({6, 3}, true, 84), randn_input({4, 3}, true, 85)}; },
     [](const TensorList& x) { return TensorList{linear_gelu(x[0], x[1], Tensor(), "tanh")}; }},
    {OpId::linear_gelu, "1-D input, one output",
     [] { return TensorList{randn_input({3}, true, 86), randn_input({1, 3}, true, 87), randn_input({1}, true, 88)}; },
     [](const TensorList& x) { return TensorList{linear_gelu(x[0], x[1], x[2])}; }},
});

const bool kLinearGeluErrors = register_error_cases({
    PRECIS_BAD_INPUT(linear_gelu, ShapeError, "weight's in_features differ from input's",
                     linear_gelu(f32({2, 3}), f32({4, 5})), "linear_gelu", "[2, 3]", "[4, 5]"),
    PRECIS_BAD_INPUT(linear_gelu, DTypeError, "weight in another dtype",
                     linear_gelu(f32({2, 3}), f32({4, 3}).to(DType::f64)), "linear_gelu", "f32", "f64"),
    PRECIS_BAD_INPUT(linear_gelu, ShapeError, "bias of the wrong size", linear_gelu(f32({2, 3}), f32({4, 3}), f32({3})),
                     "linear_gelu", "bias", "(4)"),
    PRECIS_BAD_INPUT(linear_gelu, ValueError, "unknown approximation",
                     linear_gelu(f32({2, 3}), f32({4, 3}), Tensor(), "fast"), "linear_gelu", "\"none\" or \"tanh\"",
                     "fast"),
    PRECIS_BAD_INPUT(gelu_epilogue, ShapeError, "out of another shape", call_forward({3, 2}, DType::f32),
                     "gelu_epilogue", "[3, 2]", "[2, 3]"),
    PRECIS_BAD_INPUT(gelu_epilogue, DTypeError, "deriv in f64 for f32", call_forward({2, 3}, DType::f64),
                     "gelu_epilogue", "deriv", "f64"),
    PRECIS_BAD_INPUT(gelu_epilogue_backward, ShapeError, "grad_bias of the wrong size",
                     call_backward({2}, DType::f32, true), "gelu_epilogue_backward", "grad_bias", "[2]"),
    PRECIS_BAD_INPUT(gelu_epilogue_backward, DTypeError, "the derivative saved in bf16",
                     call_backward({3}, DType::bf16, true), "gelu_epilogue_backward", "f32", "bf16"),
});

}  // namespace
