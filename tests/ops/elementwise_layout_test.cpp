// The output layout of element-wise ops (ops/elementwise_layout.cpp): operands sharing a dense
// non-row-major layout (transposed, channels-last) give an output in that layout; anything else
// gives a contiguous one. Values are checked against naive f64 references or the same op on
// contiguous copies, over shapes large enough to split across threads, and gradients through
// such layouts are gradient-checked.
#include <cmath>

#include <catch2/catch.hpp>

#include "autograd/gradcheck.h"
#include "ops/functional.h"
#include "tests/support/tensor_testing.h"

using namespace precis;
using namespace precis::testing;
using precis::autograd::TensorList;

namespace {

// (N, C, H, W) values stored channels-last: a permuted view of an (N, H, W, C) tensor.
Tensor channels_last(const Shape& nchw, uint64_t seed, DType dt = DType::f32) {
  return randn_input({nchw[0], nchw[2], nchw[3], nchw[1]}, false, seed, DType::f64).to(dt).permute({0, 3, 1, 2});
}

// A (rows, cols) tensor stored column-major: the transpose of a row-major (cols, rows) one.
Tensor transposed(int64_t rows, int64_t cols, uint64_t seed, DType dt = DType::f32) {
  return randn_input({cols, rows}, false, seed, DType::f64).to(dt).t();
}

}  // namespace

TEST_CASE("element-wise ops on two transposed operands give a transposed output", "[ops][layout]") {
  for (DType dt : {DType::f32, DType::f64, DType::f16, DType::bf16}) {
    // 300 x 700: several parallel chunks, rows not a multiple of the tile or vector width.
    const Tensor a = transposed(300, 700, 1, dt), b = transposed(300, 700, 2, dt);
    const Tensor out = add(a, b);
    CHECK(out.strides() == a.strides());
    CHECK(!out.is_contiguous());
    // Naive f64 reference of the stored (rounded) operands, rounded once to dt.
    const std::vector<double> va = a.to_vector<double>(), vb = b.to_vector<double>();
    std::vector<double> ref(va.size());
    for (size_t i = 0; i < ref.size(); ++i) ref[i] = va[i] + vb[i];
    const Tensor expected = from_vector<double>(ref, a.sizes()).to(dt);
    CHECK(out.to_vector<double>() == expected.to_vector<double>());
    // Every other kind of element-wise op follows, with the values of the contiguous computation.
    const Tensor ac = a.contiguous(), bc = b.contiguous();
    CHECK(mul(a, b).strides() == a.strides());
    CHECK(mul(a, b).to_vector<double>() == mul(ac, bc).to_vector<double>());
    CHECK(gt(a, b).strides() == a.strides());
    CHECK(gt(a, b).to_vector<bool>() == gt(ac, bc).to_vector<bool>());
    CHECK(where(gt(a, b), a, b).strides() == a.strides());
    CHECK(where(gt(a, b), a, b).to_vector<double>() == where(gt(ac, bc), ac, bc).to_vector<double>());
    CHECK(exp(a).strides() == a.strides());
    CHECK(exp(a).to_vector<double>() == exp(ac).to_vector<double>());
  }
}

TEST_CASE("element-wise ops on channels-last operands stay channels-last", "[ops][layout]") {
  const Tensor x = channels_last({4, 24, 9, 11}, 3), y = channels_last({4, 24, 9, 11}, 4);
  const Tensor xc = x.contiguous(), yc = y.contiguous();
  const Shape nhwc_strides = x.strides();
  CHECK(nhwc_strides == Shape{9 * 11 * 24, 1, 11 * 24, 24});
  CHECK(relu(x).strides() == nhwc_strides);
  CHECK(relu(x).to_vector<float>() == relu(xc).to_vector<float>());
  CHECK(add(x, y).strides() == nhwc_strides);
  CHECK(add(x, y).to_vector<float>() == add(xc, yc).to_vector<float>());
  // A broadcast bias (1, C, 1, 1) or a scalar has no say: the output stays channels-last.
  const Tensor bias = randn_input({1, 24, 1, 1}, false, 5, DType::f32);
  CHECK(add(x, bias).strides() == nhwc_strides);
  CHECK(add(x, bias).to_vector<float>() == add(xc, bias).to_vector<float>());
  CHECK(mul(x, 0.5).strides() == nhwc_strides);
  CHECK(sigmoid(x).strides() == nhwc_strides);
  CHECK(gelu(x).strides() == nhwc_strides);
  CHECK(gelu(x).to_vector<float>() == gelu(xc).to_vector<float>());
  // masked_fill follows x, whatever the mask's layout (PyTorch: a masked_fill_ on a clone of x).
  const Tensor mask = gt(yc, 0.0);
  CHECK(masked_fill(x, mask, 7).strides() == nhwc_strides);
  CHECK(masked_fill(x, mask, 7).to_vector<float>() == masked_fill(xc, mask, 7).to_vector<float>());
  // f16 / bf16 channels-last compute through the block buffers.
  for (DType dt : {DType::f16, DType::bf16}) {
    const Tensor xl = x.to(DType::f32).contiguous().permute({0, 2, 3, 1}).contiguous().to(dt).permute({0, 3, 1, 2});
    CHECK(xl.strides() == nhwc_strides);
    CHECK(tanh(xl).strides() == nhwc_strides);
    CHECK(tanh(xl).to_vector<double>() == tanh(xl.contiguous()).to_vector<double>());
  }
}

TEST_CASE("element-wise outputs stay contiguous when operand layouts differ or have gaps", "[ops][layout]") {
  const Tensor a = randn_input({64, 48}, false, 6, DType::f32), bt = transposed(64, 48, 7);
  // One row-major and one column-major operand: PyTorch picks by the first operand; the rule
  // here keeps the output contiguous when the full-size operands disagree.
  CHECK(add(a, bt).is_contiguous());
  CHECK(add(bt, a).is_contiguous());
  CHECK(add(bt, a).to_vector<float>() == add(a, bt.contiguous()).to_vector<float>());
  // Gaps (every other column) or overlap (an expanded operand): no dense layout to copy.
  const Tensor sliced = randn_input({64, 96}, false, 8, DType::f32).slice(1, 0, 96, 2);
  CHECK(relu(sliced).is_contiguous());
  CHECK(relu(sliced).to_vector<float>() == relu(sliced.contiguous()).to_vector<float>());
  const Tensor row = randn_input({1, 48}, false, 9, DType::f32).expand({64, 48});
  CHECK(neg(row).is_contiguous());
  // A transposed operand with only broadcast company keeps its layout.
  CHECK(add(bt, randn_input({48}, false, 10, DType::f32)).strides() == bt.strides());
  // A size-1 dim with an odd stride does not stop a transposed layout from being recognised.
  const Tensor t3 = transposed(5, 7, 11).unsqueeze(0);
  CHECK(!relu(t3).is_contiguous());
  CHECK(relu(t3).to_vector<float>() == relu(t3.contiguous()).to_vector<float>());
  // Empty and 0-d operands.
  CHECK(relu(zeros({0, 3}).t()).sizes() == Shape{3, 0});
  CHECK(relu(scalar_tensor(2.0)).item<double>() == 2.0);
}

TEST_CASE("views and reshapes of a transposed element-wise result", "[ops][layout]") {
  const Tensor a = transposed(6, 4, 12), b = transposed(6, 4, 13);
  const Tensor out = add(a, b);
  // view() cannot merge the dims of a column-major tensor (as in PyTorch); reshape() copies;
  // splitting a dim or adding a unit dim is still a view.
  CHECK_THROWS_AS(out.view({24}), ShapeError);
  CHECK(out.reshape({24}).to_vector<float>() == add(a.contiguous(), b.contiguous()).reshape({24}).to_vector<float>());
  CHECK(out.view({3, 2, 4}).sizes() == Shape{3, 2, 4});
  CHECK(out.unsqueeze(0).view({1, 6, 4}).sizes() == Shape{1, 6, 4});
}

TEST_CASE("gradients through transposed and channels-last element-wise ops", "[ops][layout][gradcheck]") {
  // f64 gradcheck with operands in permuted dense layouts (outputs and gradients follow them).
  const Tensor a = randn_input({4, 5}, true, 14).t().detach().requires_grad_(true);
  const Tensor b = randn_input({4, 5}, true, 15).t().detach().requires_grad_(true);
  const Tensor x = randn_input({2, 3, 4, 5}, false, 16).permute({0, 3, 1, 2}).detach().requires_grad_(true);
  auto r = autograd::gradcheck([](const TensorList& in) { return TensorList{mul(in[0], in[1])}; }, {a, b});
  INFO(r.message);
  CHECK(r.ok);
  r = autograd::gradcheck([](const TensorList& in) { return TensorList{div(in[0], in[1])}; }, {a, b});
  INFO(r.message);
  CHECK(r.ok);
  r = autograd::gradcheck([](const TensorList& in) { return TensorList{where(gt(in[0], in[1]), in[0], in[1])}; }, {a, b});
  INFO(r.message);
  CHECK(r.ok);
  r = autograd::gradcheck([](const TensorList& in) { return TensorList{sigmoid(mul(in[0], in[0]))}; }, {x});
  INFO(r.message);
  CHECK(r.ok);
  r = autograd::gradcheck([](const TensorList& in) { return TensorList{gelu(in[0], "tanh")}; }, {x});
  INFO(r.message);
  CHECK(r.ok);
  // A leaf's .grad is contiguous even when the gradient reaching it is channels-last (the
  // optimizers and GradScaler need dense row-major gradients), and holds the right values.
  const Tensor w = randn_input({2, 5, 3, 4}, true, 17);
  const Tensor xd = x.detach();
  sum(mul(w, xd)).backward();
  REQUIRE(w.grad().defined());
  CHECK(w.grad().is_contiguous());
  CHECK(w.grad().to_vector<double>() == xd.contiguous().to_vector<double>());
  sum(mul(w, xd)).backward();  // accumulates in place into the contiguous .grad
  CHECK(w.grad().is_contiguous());
  CHECK(w.grad().to_vector<double>() == mul(xd.contiguous(), 2.0).to_vector<double>());
}
