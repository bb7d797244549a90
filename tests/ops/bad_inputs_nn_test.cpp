// Bad-input cases (tests/support/op_cases.h) for the neural-network ops and their backward rows,
// and for the loss scaler's fused pass. A backward row is reached only through backward(), so
// its bad inputs are the ways a backward call can be wrong: running it a second time after the
// graph was freed, after a tensor it saved was modified in place, or with a gradient that cannot
// be one (an integer tensor).
#include <functional>
#include <limits>

#include "amp/grad_scaler.h"
#include "autograd/grad_mode.h"
#include "ops/functional.h"
#include "optim/sgd.h"
#include "tests/support/op_cases.h"
#include "tests/support/tensor_testing.h"

namespace precis::testing {
namespace {

using Fn = std::function<Tensor(const Tensor&)>;

Tensor f32(const Shape& s) { return ones(s); }
Tensor i64(const Shape& s) { return zeros(s, {.dtype = DType::i64}); }
Tensor image() { return randn_input({2, 4, 6, 6}, true, 3, DType::f32); }

void backward_twice(const Fn& fn) {
  Tensor y = fn(image());
  y.backward(ones_like(y));
  y.backward(ones_like(y));
}

// Modifies the input and the output in place (whichever the op saved), then runs backward.
void backward_after_inplace(const Fn& fn) {
  Tensor x = image();
  Tensor y = fn(x);
  const Tensor g = ones_like(y);
  {
    NoGradGuard no_grad;
    x.fill_(0.5);
    y.fill_(0.5);
  }
  y.backward(g);
}

void backward_with_integer_gradient(const Fn& fn) {
  Tensor y = fn(image());
  y.backward(zeros(y.sizes(), {.dtype = DType::i64}));
}

Tensor conv(const Tensor& x) { return conv2d(x, randn_input({3, 4, 3, 3}, true, 4, DType::f32)); }
Tensor conv_t(const Tensor& x) { return conv_transpose2d(x, randn_input({4, 3, 3, 3}, true, 5, DType::f32)); }
Tensor maxpool(const Tensor& x) { return max_pool2d(x, {2}); }
Tensor avgpool(const Tensor& x) { return avg_pool2d(x, {2}); }
Tensor adaptive(const Tensor& x) { return adaptive_avg_pool2d(x, {2, 3}); }
Tensor bn(const Tensor& x) { return batch_norm(x, Tensor(), Tensor(), f32({4}), f32({4}), true); }
Tensor ln(const Tensor& x) { return layer_norm(x, {6, 6}); }
Tensor gn(const Tensor& x) { return group_norm(x, 2); }
Tensor smax(const Tensor& x) { return softmax(x, 1); }
Tensor lsmax(const Tensor& x) { return log_softmax(x, 1); }
Tensor ce(const Tensor& x) { return cross_entropy(x, i64({2, 6, 6}), Tensor(), -100, Reduction::none); }

const bool kConvPool = register_error_cases({
    PRECIS_BAD_INPUT(conv2d, ShapeError, "channels that do not match the weight",
                     conv2d(f32({1, 3, 5, 5}), f32({2, 4, 3, 3})), "conv2d", "3 channels"),
    PRECIS_BAD_INPUT(conv2d, ShapeError, "a kernel larger than the padded input",
                     conv2d(f32({1, 1, 2, 2}), f32({1, 1, 3, 3})), "conv2d", "larger than the padded input"),
    PRECIS_BAD_INPUT(conv2d, ValueError, "a padding whose double overflows int64",
                     conv2d(f32({1, 1, 2, 2}), f32({1, 1, 1, 1}), Tensor(), {1}, {int64_t{1} << 62}), "conv2d",
                     "overflows int64"),
    PRECIS_BAD_INPUT(conv2d, ValueError, "a zero stride", conv2d(f32({1, 1, 3, 3}), f32({1, 1, 1, 1}), Tensor(), {0}),
                     "conv2d", "stride"),
    PRECIS_BAD_INPUT(conv2d, ShapeError, "groups whose product with the weight's channels overflows",
                     conv2d(f32({1, 2, 3, 3}), f32({0, 2, 1, 1}), Tensor(), {1}, {0}, {1},
                            std::numeric_limits<int64_t>::max()),
                     "conv2d", "more than int64 holds"),
    PRECIS_BAD_INPUT(conv1d, ShapeError, "channels that do not match the weight", conv1d(f32({1, 3, 5}), f32({2, 4, 3})),
                     "conv1d", "3 channels"),
    PRECIS_BAD_INPUT(conv1d, ShapeError, "a 4-D input", conv1d(f32({1, 3, 5, 5}), f32({2, 3, 3})), "conv1d",
                     "3-D (N, C, L)"),
    PRECIS_BAD_INPUT(conv1d, ShapeError, "a kernel longer than the padded input", conv1d(f32({1, 1, 2}), f32({1, 1, 3})),
                     "conv1d", "larger than the padded input"),
    PRECIS_BAD_INPUT(conv_transpose2d, ShapeError, "channels that do not match the weight's first dim",
                     conv_transpose2d(f32({1, 3, 5, 5}), f32({4, 2, 3, 3})), "conv_transpose2d", "3 channels",
                     "weight.size(0) is 4"),
    PRECIS_BAD_INPUT(conv_transpose2d, ValueError, "output_padding not below stride",
                     conv_transpose2d(f32({1, 1, 3, 3}), f32({1, 1, 3, 3}), Tensor(), {1}, {0}, {1}),
                     "conv_transpose2d", "output_padding", "smaller than stride"),
    PRECIS_BAD_INPUT(conv_transpose2d, ValueError, "a stride whose product with the input overflows int64",
                     conv_transpose2d(f32({1, 1, 3, 3}), f32({1, 1, 1, 1}), Tensor(), {int64_t{1} << 62}),
                     "conv_transpose2d", "overflows int64"),
    PRECIS_BAD_INPUT(conv_transpose2d, ShapeError, "groups that do not divide the input channels",
                     conv_transpose2d(f32({1, 2, 3, 3}), f32({2, 1, 1, 1}), Tensor(), {1}, {0}, {0},
                                      std::numeric_limits<int64_t>::max()),
                     "conv_transpose2d", "divisible by groups"),
    PRECIS_BAD_INPUT(conv_transpose2d, StateError, "the saved input modified in place",
                     backward_after_inplace(conv_t), "modified by an in-place operation"),
    PRECIS_BAD_INPUT(conv2d_backward, StateError, "backward a second time", backward_twice(conv), "conv2d_backward",
                     "second time"),
    PRECIS_BAD_INPUT(conv2d_backward, StateError, "the saved input modified in place", backward_after_inplace(conv),
                     "modified by an in-place operation"),
    PRECIS_BAD_INPUT(max_pool1d, ShapeError, "a 4-D input", max_pool1d(f32({1, 1, 4, 4}), 2), "max_pool1d",
                     "3-D (N, C, L)"),
    PRECIS_BAD_INPUT(max_pool1d, ShapeError, "a window longer than the input", max_pool1d(f32({1, 1, 2}), 3),
                     "max_pool1d", "larger than the padded input"),
    PRECIS_BAD_INPUT(max_pool1d, ValueError, "padding over half the kernel", max_pool1d(f32({1, 1, 4}), 2, {}, 2),
                     "max_pool1d", "at most half"),
    PRECIS_BAD_INPUT(avg_pool1d, ShapeError, "a 1-D input", avg_pool1d(f32({4}), 2), "avg_pool1d", "3-D (N, C, L)"),
    PRECIS_BAD_INPUT(avg_pool1d, ValueError, "a zero stride", avg_pool1d(f32({1, 1, 4}), 2, 0), "avg_pool1d",
                     "stride"),
    PRECIS_BAD_INPUT(max_pool2d, ShapeError, "a window larger than the input", max_pool2d(f32({1, 1, 2, 2}), {3}),
                     "max_pool2d", "larger than the padded input"),
    PRECIS_BAD_INPUT(max_pool2d, ValueError, "padding over half the kernel", max_pool2d(f32({1, 1, 4, 4}), {2}, {}, {2}),
                     "max_pool2d", "padding"),
    PRECIS_BAD_INPUT(max_pool2d, ValueError, "a dilation that overflows the window arithmetic",
                     max_pool2d(f32({1, 1, 4, 4}), {3}, {}, {0}, {int64_t{1} << 62}), "max_pool2d", "overflows int64"),
    PRECIS_BAD_INPUT(max_pool2d_backward, StateError, "backward a second time", backward_twice(maxpool),
                     "max_pool2d_backward", "second time"),
    PRECIS_BAD_INPUT(max_pool2d_backward, DTypeError, "an integer gradient", backward_with_integer_gradient(maxpool),
                     "backward", "i64", "must be floating"),
    PRECIS_BAD_INPUT(avg_pool2d, ValueError, "a zero kernel", avg_pool2d(f32({1, 1, 4, 4}), {0}), "avg_pool2d",
                     "kernel_size"),
    PRECIS_BAD_INPUT(avg_pool2d, ShapeError, "a 2-D input", avg_pool2d(f32({4, 4}), {2}), "avg_pool2d", "4-D"),
    PRECIS_BAD_INPUT(avg_pool2d_backward, StateError, "backward a second time", backward_twice(avgpool),
                     "avg_pool2d_backward", "second time"),
    PRECIS_BAD_INPUT(avg_pool2d_backward, DTypeError, "an integer gradient", backward_with_integer_gradient(avgpool),
                     "backward", "i64", "must be floating"),
    PRECIS_BAD_INPUT(adaptive_avg_pool2d, ValueError, "a zero output size", adaptive_avg_pool2d(f32({1, 1, 4, 4}), {0}),
                     "adaptive_avg_pool2d", "output_size"),
    PRECIS_BAD_INPUT(adaptive_avg_pool2d, ValueError, "three output sizes",
                     adaptive_avg_pool2d(f32({1, 1, 4, 4}), {1, 2, 3}), "adaptive_avg_pool2d", "1 or 2 values"),
    PRECIS_BAD_INPUT(adaptive_avg_pool2d_backward, StateError, "backward a second time", backward_twice(adaptive),
                     "adaptive_avg_pool2d_backward", "second time"),
    PRECIS_BAD_INPUT(adaptive_avg_pool2d_backward, DTypeError, "an integer gradient",
                     backward_with_integer_gradient(adaptive), "backward", "i64", "must be floating"),
});

const bool kNorm = register_error_cases({
    PRECIS_BAD_INPUT(batch_norm, ShapeError, "a weight of the wrong size",
                     batch_norm(f32({2, 3, 4}), Tensor(), Tensor(), f32({4}), Tensor(), true), "batch_norm", "[4]"),
    PRECIS_BAD_INPUT(batch_norm, ValueError, "eval mode without running statistics",
                     batch_norm(f32({2, 3, 4}), Tensor(), Tensor(), Tensor(), Tensor(), false), "batch_norm",
                     "running"),
    PRECIS_BAD_INPUT(batch_norm_backward, StateError, "backward a second time", backward_twice(bn),
                     "batch_norm_backward", "second time"),
    PRECIS_BAD_INPUT(batch_norm_backward, StateError, "the saved input modified in place", backward_after_inplace(bn),
                     "modified by an in-place operation"),
    PRECIS_BAD_INPUT(layer_norm, ShapeError, "a normalized_shape the input does not end with",
                     layer_norm(f32({2, 3}), {4}), "layer_norm", "[4]"),
    PRECIS_BAD_INPUT(layer_norm, ShapeError, "a weight of the wrong shape", layer_norm(f32({2, 3}), {3}, f32({2})),
                     "layer_norm", "[2]"),
    PRECIS_BAD_INPUT(layer_norm_backward, StateError, "backward a second time", backward_twice(ln),
                     "layer_norm_backward", "second time"),
    PRECIS_BAD_INPUT(layer_norm_backward, StateError, "the saved input modified in place", backward_after_inplace(ln),
                     "modified by an in-place operation"),
    PRECIS_BAD_INPUT(group_norm, ValueError, "channels not divisible by the groups", group_norm(f32({2, 3, 4}), 2),
                     "group_norm", "C = 3"),
    PRECIS_BAD_INPUT(group_norm, ValueError, "zero groups", group_norm(f32({2, 4, 4}), 0), "group_norm"),
    PRECIS_BAD_INPUT(group_norm_backward, StateError, "backward a second time", backward_twice(gn),
                     "group_norm_backward", "second time"),
    PRECIS_BAD_INPUT(group_norm_backward, StateError, "the saved input modified in place", backward_after_inplace(gn),
                     "modified by an in-place operation"),
    PRECIS_BAD_INPUT(softmax, IndexError, "a dim out of range", softmax(f32({2, 3}), 2), "softmax", "dimension 2"),
    PRECIS_BAD_INPUT(softmax, DTypeError, "an integer tensor", softmax(i64({2, 3}), 1), "softmax", "i64"),
    PRECIS_BAD_INPUT(softmax_backward, StateError, "backward a second time", backward_twice(smax), "softmax_backward",
                     "second time"),
    PRECIS_BAD_INPUT(softmax_backward, StateError, "the saved output modified in place", backward_after_inplace(smax),
                     "modified by an in-place operation"),
    PRECIS_BAD_INPUT(log_softmax, IndexError, "a dim out of range", log_softmax(f32({2, 3}), -3), "log_softmax",
                     "dimension -3"),
    PRECIS_BAD_INPUT(log_softmax, DTypeError, "an integer tensor", log_softmax(i64({2, 3}), 0), "log_softmax", "i64"),
    PRECIS_BAD_INPUT(log_softmax_backward, StateError, "backward a second time", backward_twice(lsmax),
                     "log_softmax_backward", "second time"),
    PRECIS_BAD_INPUT(log_softmax_backward, StateError, "the saved output modified in place",
                     backward_after_inplace(lsmax), "modified by an in-place operation"),
});

const bool kLosses = register_error_cases({
    PRECIS_BAD_INPUT(cross_entropy, IndexError, "a target outside [0, C)", cross_entropy(f32({2, 3}), i64({2}) + 3),
                     "cross_entropy", "3"),
    PRECIS_BAD_INPUT(cross_entropy, DTypeError, "a floating target", cross_entropy(f32({2, 3}), f32({2})),
                     "cross_entropy", "f32"),
    PRECIS_BAD_INPUT(cross_entropy, ShapeError, "a target of the wrong batch size",
                     cross_entropy(f32({2, 3}), i64({5})), "cross_entropy", "[5]"),
    PRECIS_BAD_INPUT(cross_entropy_backward, StateError, "backward a second time", backward_twice(ce),
                     "cross_entropy_backward", "second time"),
    PRECIS_BAD_INPUT(cross_entropy_backward, StateError, "the saved input modified in place",
                     backward_after_inplace(ce), "modified by an in-place operation"),
    PRECIS_BAD_INPUT(nll_loss, IndexError, "a target outside [0, C)", nll_loss(f32({2, 3}), i64({2}) - 2),
                     "nll_loss", "-2"),
    PRECIS_BAD_INPUT(nll_loss, ShapeError, "a class weight of the wrong size",
                     nll_loss(f32({2, 3}), i64({2}), f32({4})), "nll_loss", "[4]"),
    PRECIS_BAD_INPUT(mse_loss, ShapeError, "shapes that differ", mse_loss(f32({2, 3}), f32({3})), "mse_loss", "[3]"),
    PRECIS_BAD_INPUT(mse_loss, DTypeError, "an integer target", mse_loss(f32({2}), i64({2})), "mse_loss", "i64"),
    PRECIS_BAD_INPUT(l1_loss, ShapeError, "shapes that differ", l1_loss(f32({2, 3}), f32({3})), "l1_loss", "[3]"),
    PRECIS_BAD_INPUT(l1_loss, DTypeError, "an integer target", l1_loss(f32({2}), i64({2})), "l1_loss", "i64"),
    PRECIS_BAD_INPUT(smooth_l1_loss, ValueError, "a negative beta",
                     smooth_l1_loss(f32({2}), f32({2}), Reduction::mean, -1.0), "smooth_l1_loss", "beta", ">= 0"),
    PRECIS_BAD_INPUT(smooth_l1_loss, ShapeError, "shapes that differ", smooth_l1_loss(f32({2, 3}), f32({2})),
                     "smooth_l1_loss", "[2]"),
    PRECIS_BAD_INPUT(huber_loss, ValueError, "a zero delta", huber_loss(f32({2}), f32({2}), Reduction::mean, 0.0),
                     "huber_loss", "delta", "> 0"),
    PRECIS_BAD_INPUT(huber_loss, DTypeError, "an integer input", huber_loss(i64({2}), f32({2})), "huber_loss", "i64"),
    PRECIS_BAD_INPUT(binary_cross_entropy_with_logits, ShapeError, "a target of another shape",
                     binary_cross_entropy_with_logits(f32({2, 3}), f32({3, 2})), "binary_cross_entropy_with_logits"),
    PRECIS_BAD_INPUT(binary_cross_entropy_with_logits, ShapeError, "a pos_weight that does not broadcast",
                     binary_cross_entropy_with_logits(f32({2, 3}), f32({2, 3}), Tensor(), f32({4})),
                     "binary_cross_entropy_with_logits"),
    PRECIS_BAD_INPUT(binary_cross_entropy, ShapeError, "a target of another shape",
                     binary_cross_entropy(f32({2}) * 0.5, f32({3})), "binary_cross_entropy"),
    PRECIS_BAD_INPUT(binary_cross_entropy, DTypeError, "an integer input", binary_cross_entropy(i64({2}), f32({2})),
                     "binary_cross_entropy", "i64"),
});

const bool kOther = register_error_cases({
    PRECIS_BAD_INPUT(embedding, IndexError, "an index past the vocabulary", embedding(i64({3}) + 10, f32({10, 4})),
                     "embedding", "10"),
    PRECIS_BAD_INPUT(embedding, DTypeError, "floating indices", embedding(f32({3}), f32({10, 4})), "embedding", "f32"),
    PRECIS_BAD_INPUT(embedding, IndexError, "a padding_idx outside [-V, V)", embedding(i64({3}), f32({10, 4}), 10),
                     "embedding", "padding_idx 10"),
    PRECIS_BAD_INPUT(dropout, ValueError, "p above 1", dropout(f32({4}), 1.5), "dropout", "1.5"),
    PRECIS_BAD_INPUT(dropout, DTypeError, "an integer tensor", dropout(i64({4}), 0.5), "dropout", "i64"),
    PRECIS_BAD_INPUT(scaled_dot_product_attention, ShapeError, "keys of another embedding size",
                     scaled_dot_product_attention(f32({2, 3, 4}), f32({2, 5, 6}), f32({2, 5, 4})),
                     "scaled_dot_product_attention"),
    PRECIS_BAD_INPUT(scaled_dot_product_attention, ValueError, "is_causal with a mask",
                     scaled_dot_product_attention(f32({2, 3, 4}), f32({2, 3, 4}), f32({2, 3, 4}),
                                                  ones({3, 3}, {.dtype = DType::boolean}), 0.0, true),
                     "scaled_dot_product_attention", "is_causal"),
    PRECIS_BAD_INPUT(pad, ShapeError, "an odd number of amounts", pad(f32({2, 3}), {1, 2, 3}), "pad", "even"),
    PRECIS_BAD_INPUT(pad, ValueError, "a value the integer dtype cannot hold", pad(i64({2, 3}), {1, 1}, 1e19), "pad",
                     "padding value 1e+19", "[2, 3] i64 cpu"),
    PRECIS_BAD_INPUT(interpolate, ShapeError, "bilinear on 3-D input",
                     interpolate(f32({1, 2, 5}), {.size = {4}, .mode = InterpolateMode::bilinear}), "interpolate",
                     "bilinear needs 4-D", "[1, 2, 5] f32 cpu"),
    PRECIS_BAD_INPUT(interpolate, ValueError, "both size and scale_factor",
                     interpolate(f32({1, 2, 5, 5}), {.size = {4}, .scale_factor = {2.0}}), "interpolate", "both"),
    PRECIS_BAD_INPUT(interpolate, ValueError, "neither size nor scale_factor", interpolate(f32({1, 2, 5, 5}), {}),
                     "interpolate", "neither"),
    PRECIS_BAD_INPUT(interpolate, ValueError, "align_corners with nearest",
                     interpolate(f32({1, 2, 5, 5}), {.size = {4}, .align_corners = false}), "interpolate",
                     "align_corners", "nearest"),
    PRECIS_BAD_INPUT(interpolate, DTypeError, "an integer input to bilinear",
                     interpolate(i64({1, 2, 5, 5}), {.size = {4}, .mode = InterpolateMode::bilinear}), "interpolate",
                     "floating", "i64"),
    PRECIS_BAD_INPUT(interpolate, ShapeError, "a scale_factor that leaves no output",
                     interpolate(f32({1, 2, 5, 5}), {.scale_factor = {0.1}}), "interpolate", "positive",
                     "output size 0"),
    PRECIS_BAD_INPUT(interpolate, ValueError, "a negative scale_factor",
                     interpolate(f32({1, 2, 5, 5}), {.scale_factor = {-2.0}}), "interpolate", "positive and finite"),
    PRECIS_BAD_INPUT(interpolate, ShapeError, "an output past int64 elements",
                     interpolate(f32({2, 2, 5, 5}), {.size = {std::numeric_limits<int64_t>::max() / 2, 4}}),
                     "interpolate", "2^63", "[2, 2, 5, 5] f32 cpu"),
    // 2^45 indices of 8 bytes: past the 47-bit address space, so no overcommit policy serves it.
    PRECIS_BAD_INPUT(interpolate, OutOfMemoryError, "an output past memory",
                     interpolate(f32({1, 1, 4}), {.size = {int64_t{1} << 45}}), "interpolate", "[1, 1, 4] f32 cpu",
                     "[1, 1, 35184372088832]", "out of memory"),
    PRECIS_BAD_INPUT(interpolate, ValueError, "three sizes for two spatial dims",
                     interpolate(f32({1, 2, 5, 5}), {.size = {4, 4, 4}}), "interpolate", "1 or 2 values"),
    PRECIS_BAD_INPUT(pad, ShapeError, "a crop past the size", pad(f32({2, 3}), {-2, -2}), "pad", "negative size"),
    PRECIS_BAD_INPUT(pad, ShapeError, "amounts that overflow int64",
                     pad(f32({2, 3}), {std::numeric_limits<int64_t>::max(), 1}), "pad", "overflows int64"),
});

// The loss scaler's fused unscale pass (GradScaler::unscale_).
void unscale_non_contiguous_grad() {
  Tensor w = zeros({3, 4}, {.requires_grad = true});
  w.set_grad(ones({4, 3}).t());
  optim::SGD opt({w}, {.lr = 0.1});
  amp::GradScaler scaler;
  scaler.unscale_(opt);
}

void unscale_after_step() {
  Tensor w = zeros({3}, {.requires_grad = true});
  w.set_grad(ones({3}));
  optim::SGD opt({w}, {.lr = 0.1});
  amp::GradScaler scaler;
  scaler.step(opt);
  scaler.unscale_(opt);
}

const bool kUnscale = register_error_cases({
    PRECIS_BAD_INPUT(unscale_grads, ValueError, "a non-contiguous gradient", unscale_non_contiguous_grad(),
                     "GradScaler", "not contiguous"),
    PRECIS_BAD_INPUT(unscale_grads, StateError, "unscale_ after step()", unscale_after_step(), "GradScaler::unscale_",
                     "after step()"),
});

}  // namespace
}  // namespace precis::testing
