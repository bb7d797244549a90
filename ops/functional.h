#pragma once
// The functional API: precis::add, precis::matmul, ... Every function here checks its operands
// (throwing a precis::Error that names the op and each operand's shape, dtype and device), runs
// the kernel for (device, dtype) from the op table, and records a backward node when an input
// requires grad. Each comment gives the shapes, dtypes and the autocast category (docs/design/precision.md).
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "tensor/tensor.h"

namespace precis {

// ---- unary element-wise: same shape and dtype out (floating inputs) --------------------------
// exp, log, sqrt, rsqrt, tanh, sigmoid and erf also take integer and bool tensors, converted to f32
// first (PyTorch's rule: torch.sqrt(torch.tensor([4])) is f32); silu and gelu refuse them, as
// PyTorch's; neg, abs and relu keep integer dtypes.
Tensor neg(const Tensor& x);                         ///< -x. Passthrough.
Tensor abs(const Tensor& x);                         ///< |x|. Passthrough; grad at 0 is 0.
Tensor exp(const Tensor& x);                         ///< FP32.
Tensor log(const Tensor& x);                         ///< FP32.
Tensor sqrt(const Tensor& x);                        ///< FP32.
Tensor rsqrt(const Tensor& x);                       ///< 1/sqrt(x). FP32.
Tensor tanh(const Tensor& x);                        ///< Passthrough.
Tensor sigmoid(const Tensor& x);                     ///< Passthrough.
Tensor silu(const Tensor& x);                        ///< x·σ(x) (SiLU, swish). Passthrough.
Tensor relu(const Tensor& x);                        ///< max(x, 0). Passthrough; grad at 0 is 0.
/// x where x > 0, negative_slope·x elsewhere (torch.nn.functional.leaky_relu; the gradient at 0
/// is negative_slope, as PyTorch's). Floating x; a comparison and where, so every device has it.
/// Passthrough.
Tensor leaky_relu(const Tensor& x, double negative_slope = 0.01);
/// GELU; approximate = "none" (x·Φ(x), erf form) or "tanh". Passthrough.
Tensor gelu(const Tensor& x, const std::string& approximate = "none");
/// x^exponent. FP32. An integer x to a fractional power is f32 (as PyTorch); to an integral power
/// it is a DTypeError (PyTorch computes that in the integer type): convert with .to(DType::f32).
Tensor pow(const Tensor& x, Scalar exponent);

// ---- binary element-wise: operands broadcast; result dtype as PyTorch's result_type: the ----------
// promotion (promote_types) of the dimensioned operands; a zero-dim tensor operand only counts
// when of a higher category (bool < integer < floating): bf16 (N) * f32 () is bf16.
Tensor add(const Tensor& a, const Tensor& b, Scalar alpha = 1.0);  ///< a + alpha·b. Promote.
Tensor sub(const Tensor& a, const Tensor& b, Scalar alpha = 1.0);  ///< a - alpha·b. Promote.
Tensor mul(const Tensor& a, const Tensor& b);                      ///< Promote.
Tensor div(const Tensor& a, const Tensor& b);                      ///< Promote.
/// Element-wise max/min; NaN propagates; on ties the gradient is split evenly. Promote.
Tensor maximum(const Tensor& a, const Tensor& b);
Tensor minimum(const Tensor& a, const Tensor& b);
// Scalar forms: the scalar takes the tensor's dtype (a floating scalar with an integer tensor
// gives f32), as in PyTorch. Next to f16/bf16, a scalar the dtype cannot hold is rounded to it by
// add, sub, maximum, minimum and the comparisons, and kept in fp32 by mul and div (PyTorch's CPU
// choices: 0.1 · x_f16 is computed with 0.1, x_f16 == 0.1 compares with f16's 0.1).
Tensor add(const Tensor& a, Scalar b);
Tensor sub(const Tensor& a, Scalar b);
Tensor mul(const Tensor& a, Scalar b);
Tensor div(const Tensor& a, Scalar b);
Tensor maximum(const Tensor& a, Scalar b);
Tensor minimum(const Tensor& a, Scalar b);

// ---- comparisons: broadcast, bool out, not differentiable ------------------------------------
Tensor eq(const Tensor& a, const Tensor& b);
Tensor ne(const Tensor& a, const Tensor& b);
Tensor lt(const Tensor& a, const Tensor& b);
Tensor le(const Tensor& a, const Tensor& b);
Tensor gt(const Tensor& a, const Tensor& b);
Tensor ge(const Tensor& a, const Tensor& b);
Tensor eq(const Tensor& a, Scalar b);
Tensor ne(const Tensor& a, Scalar b);
Tensor lt(const Tensor& a, Scalar b);
Tensor le(const Tensor& a, Scalar b);
Tensor gt(const Tensor& a, Scalar b);
Tensor ge(const Tensor& a, Scalar b);

// ---- selection ------------------------------------------------------------------------------
/// cond ? a : b element-wise; cond is bool; all three broadcast. Promote.
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);
Tensor where(const Tensor& cond, const Tensor& a, Scalar b);
/// x with `value` where mask (bool) is true; x and mask broadcast together (as torch.masked_fill).
/// The value is converted to x's dtype. Passthrough.
Tensor masked_fill(const Tensor& x, const Tensor& mask, Scalar value);
/// torch.clamp: x with elements below min set to min and above max set to max (either bound
/// optional, at least one given; min > max gives max everywhere, as PyTorch). NaN stays NaN; a NaN
/// bound makes every element NaN. The gradient passes where min < x < max, strictly (PyTorch's
/// with scalar bounds; for a NaN element it passes too, where PyTorch's is 0). The result's dtype
/// is PyTorch's: a bound of a higher kind promotes (an i64 tensor clamped at 1.5 gives f32), and
/// the bounds are converted to it. Composed of le/ge and masked_fill.
Tensor clamp(const Tensor& x, std::optional<Scalar> min, std::optional<Scalar> max = std::nullopt);

// ---- reductions -----------------------------------------------------------------------------
// dims may be negative; an empty dims list reduces over every dim. Floating results accumulate in
// fp32 (f64 for f64 inputs). Integer and bool sums give i64.
Tensor sum(const Tensor& x, const std::vector<int64_t>& dims = {}, bool keepdim = false);   ///< FP32.
Tensor mean(const Tensor& x, const std::vector<int64_t>& dims = {}, bool keepdim = false);  ///< FP32.
/// Variance with Bessel's correction by default (correction = 1, as torch.var). FP32.
/// Two-pass (mean, then squared deviations), so data with a large mean keeps its precision.
/// N - correction <= 0 divides by zero or a negative count: inf/NaN, as PyTorch (no error).
Tensor var(const Tensor& x, const std::vector<int64_t>& dims = {}, int64_t correction = 1, bool keepdim = false);
/// Maximum of all elements (0-d); NaN if any element is NaN; ValueError for an empty tensor. The
/// gradient is shared evenly by all elements equal to the maximum. Passthrough.
Tensor max(const Tensor& x);
/// Maximum along dim and the i64 index of its first occurrence (a NaN wins, at its first index);
/// ValueError when that dim has size 0. The gradient goes to the returned index. Passthrough.
std::tuple<Tensor, Tensor> max(const Tensor& x, int64_t dim, bool keepdim = false);
/// Index (i64) of the maximum along dim, the first one on ties (a NaN counts as the maximum), as
/// torch.argmax; without dim, the index into the flattened tensor (0-d; with keepdim, x.dim() ones). Not
/// differentiable. Passthrough (it is max's index output).
Tensor argmax(const Tensor& x, std::optional<int64_t> dim = std::nullopt, bool keepdim = false);
/// Sums `x` down to `shape` (the inverse of broadcasting): used by backward of broadcasting ops.
Tensor sum_to(const Tensor& x, const Shape& shape);

// ---- linear algebra -------------------------------------------------------------------------
/// torch.matmul: 1-D·1-D dot, 2-D GEMM, 1-D promoted to a matrix and squeezed back, and batched
/// (..., n, k) @ (..., k, m) with the batch dims broadcast. Floating, same dtype. Lower.
Tensor matmul(const Tensor& a, const Tensor& b);
/// y = x·weightᵀ + bias. x: (..., in), weight: (out, in), bias: (out) or undefined. Lower.
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());
/// gelu(linear(x, weight, bias), approximate) as one op (a GEMM epilogue, issue 16): shapes, dtype
/// and device rules and errors as linear's (named linear_gelu), approximate as gelu's ("none" or
/// "tanh", else ValueError). Lower. On the CPU the GEMM (bias fused) is followed by one pass that
/// writes gelu and keeps gelu' (fp32 for f16/bf16), and the backward by one pass that forms the
/// gradient at the GEMM's output and the bias gradient together; output and gradients are bit
/// for bit the unfused pair's (for a contiguous incoming gradient). Elsewhere (CUDA) it runs as
/// gelu(linear()).
Tensor linear_gelu(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(),
                   const std::string& approximate = "none");

/// scaled_matmul's options (docs/fp8.md); fill only what you change: {.out_dtype = DType::f32}.
struct ScaledMatmulOptions {
  DType out_dtype = DType::bf16;  ///< bf16 or f32
  bool compute_amax = false;      ///< also return max |out| (ScaledMatmulResult::amax)
  /// cuBLASLt's fast fp8 accumulation on CUDA (Transformer Engine uses it for the forward GEMM,
  /// not for the gradients); the CPU accumulates exactly in fp32 either way.
  bool fast_accum = false;
};
/// scaled_matmul's outputs.
struct ScaledMatmulResult {
  Tensor out;   ///< (M, N) in options.out_dtype
  Tensor amax;  ///< max |out| over the stored (rounded) out, an f32 0-d tensor on out's device
                ///< (NaN when out holds a NaN); undefined unless options.compute_amax
};
/// The fp8 GEMM with per-tensor scales, as torch._scaled_mm: out = (a_scale_inv · b_scale_inv) ·
/// (a @ b). a: (M, K), b: (K, N), each f8_e4m3 or f8_e5m2 (not both e5m2: no GPU library has that
/// GEMM; the fp8 recipes pair E5M2 gradients with E4M3), any strides; a_scale_inv, b_scale_inv:
/// f32 tensors of one element on the operands' device: the factors that undo the scaling the
/// operands were cast with (x_fp8 = saturate(x · scale), scale_inv = 1 / scale). Products are exact
/// and accumulate in fp32, so on the CPU (an exact upcast to bf16 and oneDNN's bf16 GEMM) the
/// result differs from a GPU's only by summation order. CUDA (sm_89 and newer): cuBLASLt's fp8
/// GEMM; what it cannot take (a dimension not a multiple of 16, sm < 89) runs as an f32 GEMM of the
/// exactly widened values and warns once. Not differentiable; under autocast it is left alone.
/// Errors: ShapeError, DTypeError, DeviceError naming the operands.
ScaledMatmulResult scaled_matmul(const Tensor& a, const Tensor& b, const Tensor& a_scale_inv,
                                 const Tensor& b_scale_inv, const ScaledMatmulOptions& options = {});

/// scaled_fp8_cast's outputs.
struct ScaledFp8Cast {
  Tensor data;  ///< saturate(x · scale) in the fp8 dtype asked for, x's shape, contiguous
  Tensor amax;  ///< max |x| as an f32 0-d tensor on x's device (NaN when x holds one; 0 if empty)
};
/// The fp8 recipes' cast (Transformer Engine's cast-transpose without the transpose): x times a
/// per-tensor scale, rounded to `fp8_dtype` (f8_e4m3 or f8_e5m2) by the saturating rule (a finite
/// value past the format's range and ±inf give ±max; NaN stays NaN), and the amax of x for the
/// next scale, in one pass over x instead of five (what `(x * scale).clamp(-max, max).to(fp8)`
/// and `x.abs().max()` cost). x: floating, any shape and strides; scale: an f32 tensor of one
/// element on x's device (read there: no host sync). Equal bit for bit to the composed ops.
/// Passthrough; not differentiable. Errors: DTypeError, DeviceError, ShapeError naming x and scale.
ScaledFp8Cast scaled_fp8_cast(const Tensor& x, const Tensor& scale, DType fp8_dtype);

// ---- joining and indexing -------------------------------------------------------------------
/// Concatenates along an existing dim; other sizes must match. Promote.
Tensor cat(const std::vector<Tensor>& tensors, int64_t dim = 0);
/// Stacks along a new dim; all shapes equal. Promote.
Tensor stack(const std::vector<Tensor>& tensors, int64_t dim = 0);
/// torch.split with one size: views of x along dim of split_size elements each, the last one
/// shorter when split_size does not divide the dim (one view of an empty dim). split_size > 0
/// (ValueError; 0 only for an empty dim, as PyTorch). Gradients flow to x as through narrow.
std::vector<Tensor> split(const Tensor& x, int64_t split_size, int64_t dim = 0);
/// torch.chunk: at most `chunks` views of x along dim, each ceil(size / chunks) long but the last
/// (so fewer than `chunks` when the size does not allow them all, as PyTorch). chunks > 0.
std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t dim = 0);
/// Rows of x along dim picked by index (1-D, i64 or i32). Passthrough.
Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index);
/// out[i][j][k] = x[index[i][j][k]][j][k] for dim 0, etc. index: i64 or i32, same ndim. Passthrough.
Tensor gather(const Tensor& x, int64_t dim, const Tensor& index);
/// x with src's slices added at rows index along dim (out-of-place). Passthrough.
Tensor index_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src);
/// x with src[i][j][k] added to out[index[i][j][k]][j][k] for dim 0, etc. (out-of-place). Passthrough.
Tensor scatter_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src);

/// x converted to dtype (differentiable; identity when equal), in x's dense memory order when it
/// has one (Tensor::to(DType)).
Tensor cast(const Tensor& x, DType dtype);

// ---- convolution and pooling ----------------------------------------------------------------
// Geometry arguments take one value (used for both dims, like PyTorch's int) or two ({h, w}).
// Inputs are (N, C, H, W) or unbatched (C, H, W) (the result is then unbatched too); any strides.
// f32, f64, bf16, f16 (low precision stores its dtype and computes in fp32).

/// 2-D convolution (cross-correlation, as torch.nn.functional.conv2d). input: (N, C, H, W),
/// weight: (O, C/groups, kH, kW), bias: (O) or undefined; out: (N, O, Ho, Wo) with
/// Ho = (H + 2·padding - dilation·(kH - 1) - 1) / stride + 1 (floor). groups must divide C and O.
/// All operands of one floating dtype and device. Lower (conv runs in the autocast dtype).
Tensor conv2d(const Tensor& input, const Tensor& weight, const Tensor& bias = Tensor(),
              const std::vector<int64_t>& stride = {1, 1}, const std::vector<int64_t>& padding = {0, 0},
              const std::vector<int64_t>& dilation = {1, 1}, int64_t groups = 1);
/// 1-D convolution (torch.nn.functional.conv1d). input: (N, C, L) or unbatched (C, L); weight:
/// (O, C/groups, K); bias: (O) or undefined; out: (N, O, Lo) with Lo as conv2d's Ho. One value
/// each for stride, padding and dilation. conv2d on the input seen as (N, C, 1, L) — views, no
/// copy of a contiguous input — so it has conv2d's devices, dtypes and accumulation. Lower.
Tensor conv1d(const Tensor& input, const Tensor& weight, const Tensor& bias = Tensor(), int64_t stride = 1,
              int64_t padding = 0, int64_t dilation = 1, int64_t groups = 1);
/// 2-D transposed convolution (torch.nn.functional.conv_transpose2d; the gradient of conv2d with
/// respect to its input, so `conv_transpose2d(conv2d(x, w, {}, s, p), w, {}, s, p)` has x's shape
/// for a suitable output_padding). input: (N, C, H, W) or unbatched (C, H, W); weight:
/// (C, O/groups, kH, kW) — conv2d's layout read the other way round; bias: (O) or undefined;
/// out: (N, O, Ho, Wo) with Ho = (H − 1)·stride − 2·padding + dilation·(kH − 1) + output_padding + 1.
/// output_padding (one value or two) must be below stride (PyTorch also allows it below dilation).
/// Note PyTorch's argument order: output_padding and groups come before dilation. Runs conv2d's
/// kernels (its input-gradient pass forward, its forward and weight-gradient passes backward), so
/// it has every device and layout conv2d has; a channels-last input gives a channels-last output.
/// Accumulates in fp32 (f64 for f64). Lower.
Tensor conv_transpose2d(const Tensor& input, const Tensor& weight, const Tensor& bias = Tensor(),
                        const std::vector<int64_t>& stride = {1}, const std::vector<int64_t>& padding = {0},
                        const std::vector<int64_t>& output_padding = {0}, int64_t groups = 1,
                        const std::vector<int64_t>& dilation = {1});

/// Max pooling: the maximum of each kernel_size window (dilated, over the input padded with -inf);
/// stride defaults ({}) to kernel_size; padding at most half the kernel; ceil_mode rounds the
/// output size up (a window must still start inside the input or its left padding). NaN in a
/// window propagates. The gradient goes to the position of each maximum. Passthrough.
Tensor max_pool2d(const Tensor& input, const std::vector<int64_t>& kernel_size, const std::vector<int64_t>& stride = {},
                  const std::vector<int64_t>& padding = {0, 0}, const std::vector<int64_t>& dilation = {1, 1},
                  bool ceil_mode = false);
/// max_pool2d and the i64 indices of the maxima: flat positions h·W + w within each (H, W) input
/// plane, as PyTorch's return_indices=True. Only the values are differentiable. Passthrough.
std::tuple<Tensor, Tensor> max_pool2d_with_indices(const Tensor& input, const std::vector<int64_t>& kernel_size,
                                                   const std::vector<int64_t>& stride = {},
                                                   const std::vector<int64_t>& padding = {0, 0},
                                                   const std::vector<int64_t>& dilation = {1, 1},
                                                   bool ceil_mode = false);
/// Average pooling over kernel_size windows (stride defaults to kernel_size; padding at most half
/// the kernel). The divisor is divisor_override when non-zero, else the window area including
/// the zero padding (count_include_pad) or only the input elements it covers. Accumulates in fp32
/// (f64 for f64). Passthrough.
Tensor avg_pool2d(const Tensor& input, const std::vector<int64_t>& kernel_size, const std::vector<int64_t>& stride = {},
                  const std::vector<int64_t>& padding = {0, 0}, bool ceil_mode = false,
                  bool count_include_pad = true, int64_t divisor_override = 0);
/// 1-D max pooling over (N, C, L) or unbatched (C, L) input (torch.nn.functional.max_pool1d):
/// max_pool2d over the (N, C, 1, L) view, so the same windows, NaN rule and gradient; stride
/// defaults (nullopt) to kernel_size. Passthrough.
Tensor max_pool1d(const Tensor& input, int64_t kernel_size, std::optional<int64_t> stride = std::nullopt,
                  int64_t padding = 0, int64_t dilation = 1, bool ceil_mode = false);
/// 1-D average pooling (torch.nn.functional.avg_pool1d): avg_pool2d over the (N, C, 1, L) view;
/// stride defaults (nullopt) to kernel_size. Accumulates in fp32 (f64 for f64). Passthrough.
Tensor avg_pool1d(const Tensor& input, int64_t kernel_size, std::optional<int64_t> stride = std::nullopt,
                  int64_t padding = 0, bool ceil_mode = false, bool count_include_pad = true);
/// Average pooling to a fixed output size (Ho, Wo): output (i, j) averages rows
/// [floor(i·H/Ho), ceil((i+1)·H/Ho)) and the same columns. output_size {1, 1} is global average
/// pooling. Passthrough.
Tensor adaptive_avg_pool2d(const Tensor& input, const std::vector<int64_t>& output_size);

// ---- normalisation and softmax --------------------------------------------------------------
// Floating inputs (f32, f64, f16, bf16). f16/bf16 inputs are stored in their dtype and computed
// in fp32; statistics (means, variances) are always fp32 (f64 for f64 inputs). Parameters
// (weight, bias, running statistics) may be in the input's dtype or fp32 (normalisation
// parameters stay fp32 in low-precision models); parameter gradients come back in each
// parameter's dtype. Under autocast batch_norm is Passthrough (its kernel already computes in
// fp32, and the activation keeps its dtype); the other four are FP32.

/// torch.nn.functional.batch_norm. input: (N, C, ...) with any number of spatial dims (at least
/// 2-D). running_mean, running_var, weight, bias: (C) or undefined. training: normalises with the
/// batch statistics over (N, ...) (biased variance) and, when the running statistics are given,
/// updates them in place (running = (1 − momentum)·running + momentum·batch, with the unbiased
/// batch variance; they are buffers and record no gradient); needs more than one value per
/// channel. Eval (training = false): normalises with the running statistics, which must be given.
/// Output: input's shape and dtype. Passthrough (computed in fp32 inside the kernel).
Tensor batch_norm(const Tensor& input, const Tensor& running_mean, const Tensor& running_var,
                  const Tensor& weight = Tensor(), const Tensor& bias = Tensor(), bool training = false,
                  double momentum = 0.1, double eps = 1e-5);
/// torch.nn.functional.layer_norm: normalises over the trailing dims given by normalized_shape
/// (input's shape must end with it); weight, bias: normalized_shape or undefined. FP32.
Tensor layer_norm(const Tensor& input, const Shape& normalized_shape, const Tensor& weight = Tensor(),
                  const Tensor& bias = Tensor(), double eps = 1e-5);
/// torch.nn.functional.group_norm. input: (N, C, ...); C divisible by num_groups; statistics per
/// (sample, group of C / num_groups channels); weight, bias: (C) or undefined. FP32.
Tensor group_norm(const Tensor& input, int64_t num_groups, const Tensor& weight = Tensor(),
                  const Tensor& bias = Tensor(), double eps = 1e-5);
/// softmax along dim (negative counts from the end), stable (max-subtracted). With dtype given the
/// input is first cast to it (as PyTorch's dtype=; e.g. fp32 softmax of bf16 scores). FP32.
Tensor softmax(const Tensor& x, int64_t dim, std::optional<DType> dtype = std::nullopt);
/// log(softmax(x)) along dim computed as x − max − log Σ exp(x − max). dtype as softmax. FP32.
Tensor log_softmax(const Tensor& x, int64_t dim, std::optional<DType> dtype = std::nullopt);

// ---- losses, embedding, dropout, attention ---------------------------------------------------
// Implemented in ops/loss.cpp, ops/embedding.cpp, ops/dropout.cpp, ops/attention.cpp.

class Generator;  // core/rng.h

/// How a loss reduces its per-element values (PyTorch's reduction = "none" | "mean" | "sum").
enum class Reduction { none, mean, sum };

/// Cross-entropy of logits against class indices, fused (log-softmax + NLL in one pass per row).
/// input: (N, C), (N, C, d1, ...) or (C); target: i64 (N), (N, d1, ...) or () with values in
/// [0, C) or ignore_index; weight: optional (C) class weights (not differentiated). With label
/// smoothing ε the target distribution is (1 − ε)·onehot + ε/C. reduction none gives target's
/// shape (0 at ignored positions); mean divides by Σ w[target] over the non-ignored positions
/// (their count without weights; NaN when all are ignored), as PyTorch. Result in input's dtype,
/// computed in fp32 (f64 for f64). Errors: IndexError for a CPU target outside [0, C) that is not
/// ignore_index (naming the value and C), DTypeError for a non-i64 target. A CUDA target is not
/// read back to be checked (that would wait for the device at every call): outside [0, C) and not
/// ignore_index, its row's loss and gradient are NaN, and so is a mean or sum. FP32.
Tensor cross_entropy(const Tensor& input, const Tensor& target, const Tensor& weight = Tensor(),
                     int64_t ignore_index = -100, Reduction reduction = Reduction::mean,
                     double label_smoothing = 0.0);
/// cross_entropy's keyword arguments, PyTorch's defaults; fill only what you change:
///   cross_entropy(logits, target, {.label_smoothing = 0.1})
struct CrossEntropyOptions {
  Tensor weight{};                        ///< (C) class weights, or undefined
  int64_t ignore_index = -100;            ///< target value that contributes no loss or gradient
  Reduction reduction = Reduction::mean;  ///< none, mean (weighted, over non-ignored positions) or sum
  double label_smoothing = 0.0;           ///< ε in [0, 1] (ValueError otherwise)
};
/// cross_entropy with its options as a struct (same semantics as the positional form above).
inline Tensor cross_entropy(const Tensor& input, const Tensor& target, const CrossEntropyOptions& options) {
  return cross_entropy(input, target, options.weight, options.ignore_index, options.reduction,
                       options.label_smoothing);
}
/// linear_cross_entropy's keyword arguments; fill only what you change: {.label_smoothing = 0.1}.
struct LinearCrossEntropyOptions {
  int64_t ignore_index = -100;            ///< target value that contributes no loss or gradient
  Reduction reduction = Reduction::mean;  ///< mean or sum (for none, call linear and cross_entropy)
  double label_smoothing = 0.0;           ///< ε in [0, 1]
  /// Rows of logits computed at a time; 0 (automatic) lets the backend choose (the CPU: about 8 M
  /// logits, 256-row chunks of 2048 rows at V = 30522; elsewhere about 4 M, 137 rows).
  int64_t chunk_rows = 0;
};
/// cross_entropy(linear(input, weight, bias), target) without the (M, V) logits: the rows go
/// through in chunks, and each chunk's logits are made, reduced to its loss and turned into its
/// gradient while they are in cache. On the CPU in f32 and bf16 (with oneDNN) each chunk's
/// gradient is multiplied out at once into input's, weight's and bias's gradients, so no (M, V)
/// tensor is made at all (ops/cpu/linear_cross_entropy.cpp). Elsewhere what stays is the (M, V)
/// logit gradient (for input's and weight's gradients, one GEMM each in backward) — half the
/// memory of the unfused pair, and four fewer passes over an (M, V) tensor.
/// input: (*, K); weight: (V, K); bias:
/// (V) or undefined; target: i64 of input's leading shape, values in [0, V) or ignore_index. The
/// loss is a 0-d tensor, exactly cross_entropy's up to summation order; under autocast (Lower:
/// the GEMMs run in f16/bf16) it is fp32, as cross_entropy's is there. The gradients are formed
/// in forward for an output gradient of 1 and scaled in backward — except in f16, whose range a
/// loss scale would leave: there the (M, V) logits stay and the gradients are formed in backward,
/// as the unfused pair's — so they are not differentiable again (no double backward). No class
/// weights. Errors: ValueError for reduction none, a bad label_smoothing or chunk_rows < 0; ShapeError, DTypeError, DeviceError, IndexError as linear
/// and cross_entropy.
Tensor linear_cross_entropy(const Tensor& input, const Tensor& weight, const Tensor& bias, const Tensor& target,
                            const LinearCrossEntropyOptions& options = {});
/// Negative log-likelihood of log-probabilities: loss = −weight[t]·input[t] per position. Shapes,
/// ignore_index, weights and reductions as cross_entropy. FP32.
Tensor nll_loss(const Tensor& input, const Tensor& target, const Tensor& weight = Tensor(), int64_t ignore_index = -100,
                Reduction reduction = Reduction::mean);
/// (input − target)² reduced; both floating with the same shape (no silent broadcasting). FP32.
Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::mean);
/// |input − target| reduced; operands as mse_loss. The gradient at input = target is 0. FP32.
Tensor l1_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::mean);
/// With d = |input − target|: 0.5·d²/beta where d < beta, d − 0.5·beta elsewhere (beta = 0 is
/// l1_loss; inf gives 0); beta >= 0 (ValueError otherwise). The gradient is finite wherever
/// PyTorch's is (an infinite d gets ±1). Operands as mse_loss. FP32.
Tensor smooth_l1_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::mean,
                      double beta = 1.0);
/// With d = |input − target|: 0.5·d² where d < delta, delta·(d − 0.5·delta) elsewhere (smooth_l1_loss
/// times beta = delta); delta > 0, inf allowed (ValueError otherwise). Operands as mse_loss. FP32.
Tensor huber_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::mean,
                  double delta = 1.0);
/// Binary cross-entropy on logits, stable for any magnitude:
///   loss = (1 − t)·x + (1 + (pos_weight − 1)·t)·(log(1 + exp(−|x|)) + max(−x, 0)), times weight.
/// target: input's shape, floating; weight: broadcastable to input; pos_weight: broadcastable to
/// input along the last (class) dim. Both optional; neither gets a gradient (as PyTorch). The input's
/// gradient is w·((1 + (pos_weight − 1)·t)·σ(x) − pos_weight·t), formed in fp32. FP32.
Tensor binary_cross_entropy_with_logits(const Tensor& input, const Tensor& target, const Tensor& weight = Tensor(),
                                        const Tensor& pos_weight = Tensor(), Reduction reduction = Reduction::mean);
/// Binary cross-entropy on probabilities in [0, 1]: −weight·(t·log p + (1 − t)·log(1 − p)) with
/// each log clamped at −100 (as PyTorch), so p = 0 or 1 gives a finite loss. target: input's shape;
/// weight broadcastable to it. Banned under autocast: use binary_cross_entropy_with_logits. On the
/// CPU an input outside [0, 1] (or NaN) is a ValueError, as PyTorch's.
Tensor binary_cross_entropy(const Tensor& input, const Tensor& target, const Tensor& weight = Tensor(),
                            Reduction reduction = Reduction::mean);

/// Rows of weight (V, D) picked by indices (any shape, i64 or i32): out (..., D) in weight's dtype.
/// The gradient of weight is dense (index_add of the output gradient). padding_idx marks a row
/// whose gradient stays zero: in [-V, V), negative counting from the end (as PyTorch); none when
/// empty. IndexError for an index outside [0, V). Passthrough.
Tensor embedding(const Tensor& indices, const Tensor& weight, std::optional<int64_t> padding_idx = std::nullopt);

/// Zeroes each element with probability p and scales the rest by 1/(1 − p), in training; returns
/// x itself when !training or p == 0, and zeros when p == 1. The mask is drawn from Philox blocks
/// reserved from `generator` (the default generator when null), so it depends on the seed and the
/// generator's offset only (not on the thread count); backward regenerates the same mask from
/// them. ValueError for p outside [0, 1]. Floating x. Passthrough.
Tensor dropout(const Tensor& x, double p = 0.5, bool training = true, Generator* generator = nullptr);

/// add(dropout(x, p, training, generator), residual) in one pass (a residual block's epilogue):
/// the same mask, drawn the same way (the generator advances exactly as dropout's), the result in
/// add's promoted dtype. Differs from the pair only in rounding: x·1/(1 − p) + residual is computed
/// in fp32 (f64 for f64) and rounded once, where the pair rounds the dropout to x's dtype first —
/// identical when x's dtype is the result's, closer to the exact value otherwise (a bf16 x with an
/// fp32 residual). Backward: residual's gradient is the output gradient (cast only if residual's
/// dtype differs), x's is mask·g·1/(1 − p) rounded once to x's dtype, in one pass that regenerates
/// the mask. !training or p == 0: add(x, residual); p == 1: add(dropout(x, 1), residual). Fast path:
/// CPU, same shapes, no f64 beside f32/f16/bf16; anything else (broadcasting, CUDA) runs the pair
/// itself. ValueError for p outside [0, 1]; DTypeError for non-floating operands; ShapeError for
/// shapes that do not broadcast; DeviceError for operands on two devices. Promote (an f16/bf16 x
/// beside an fp32 residual is read as it is, not cast first).
Tensor dropout_add(const Tensor& x, const Tensor& residual, double p = 0.5, bool training = true,
                   Generator* generator = nullptr);

/// softmax(q·kᵀ·scale + mask)·v over the last dim, as torch's F.scaled_dot_product_attention.
/// q: (..., L, E), k: (..., S, E), v: (..., S, Ev), batch dims broadcast; out: (..., L, Ev).
/// attn_mask: bool (true = attend) or floating (added to the scores), broadcastable to (..., L, S).
/// is_causal masks key positions after the query's (top-left aligned, like PyTorch); it cannot be
/// combined with attn_mask. scale = 0 means 1/√E. Scores and softmax in fp32 whatever q's dtype,
/// then dropout_p (training dropout on the attention weights, from `generator`). A query row whose
/// keys are all masked gets zero weights (PyTorch's math backend). Matmuls Lower.
Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                    const Tensor& attn_mask = Tensor(), double dropout_p = 0.0,
                                    bool is_causal = false, double scale = 0.0, Generator* generator = nullptr);

/// Gauss error function; grad 2/√π·exp(−x²). Floating. FP32.
Tensor erf(const Tensor& x);

/// Constant padding as torch's F.pad: pads = {left, right} for the last dim, then the dim before,
/// ... (at most 2·x.dim() entries, even count); negative amounts crop. value is converted to x's
/// dtype. ShapeError when a padded size would be negative. Passthrough.
Tensor pad(const Tensor& x, const std::vector<int64_t>& pads, Scalar value = 0.0);

/// How interpolate samples (torch.nn.functional.interpolate's mode): nearest (PyTorch's
/// floor(dst·in/out), its default), nearest_exact ("nearest-exact": floor((dst + 0.5)·in/out), the
/// pixel centres), or linear blending of the two nearest samples per spatial dim (linear for 3-D
/// input, bilinear for 4-D, trilinear for 5-D).
enum class InterpolateMode { nearest, nearest_exact, linear, bilinear, trilinear };
/// interpolate's keyword arguments, PyTorch's defaults; give size or scale_factor:
///   interpolate(x, {.scale_factor = {2}, .mode = InterpolateMode::bilinear})
struct InterpolateOptions {
  std::vector<int64_t> size{};          ///< output size of the spatial dims: one for all, or one per dim
  std::vector<double> scale_factor{};   ///< or their factors (one, or one per dim): out = floor(in·factor)
  InterpolateMode mode = InterpolateMode::nearest;  ///< nearest (the default), nearest_exact or a linear mode
  /// Linear modes only (ValueError with nearest): true maps the corner samples of input and output
  /// onto each other, false (the default when unset) their outer edges.
  std::optional<bool> align_corners{};
  /// With scale_factor: sample at in/out instead of 1/scale_factor (PyTorch's True; false is its
  /// default None).
  bool recompute_scale_factor = false;
};
/// Resizes the spatial dims of (N, C, L), (N, C, H, W) or (N, C, D, H, W) input, as
/// torch.nn.functional.interpolate: nearest modes take any dtype and copy values exactly; linear
/// modes take floating input and blend in f32 (f64 for f64). f16/bf16 run in f32 in every mode and
/// round once (nearest's gradient sums there). Source positions are computed as PyTorch's CPU
/// kernels do (in float; double for f64 in linear modes; its out == in and out == 2·in shortcuts
/// for 4-D input only), so nearest gives PyTorch's values bit for bit and linear within rounding.
/// A channels-last input gives a channels-last output. Differentiable (the gradient sums over the
/// outputs each input sample fed). ShapeError for a wrong rank, a mode that needs another rank, a
/// size that is not positive or an output past 2^63 bytes; ValueError for both or neither of size
/// and scale_factor, or align_corners with nearest; DTypeError for integer input to a linear mode;
/// OutOfMemoryError naming the input and output shapes. Passthrough.
Tensor interpolate(const Tensor& input, const InterpolateOptions& options);

}  // namespace precis
