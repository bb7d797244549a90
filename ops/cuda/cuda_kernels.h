#pragma once
// The launch interface between the CUDA backend's host code (ops/cuda/*.cpp: unpacks Tensors,
// checks, registers kernels) and its device code (ops/cuda/*.cu). It carries raw pointers, dtypes
// and a compact offset calculator only, so the .cu files include neither tensor.h nor anything
// heavy, and nvcc compiles as little as possible. No CUDA header here either.
#include <cstddef>
#include <cstdint>

#include "core/dtype.h"
#include "ops/math/optim_math.h"

typedef struct CUstream_st* cudaStream_t;  // NOLINT: identical to the runtime's own typedef

namespace precis::cuda {

inline constexpr int kMaxKernelDims = 8;
inline constexpr int kMaxOperands = 4;  // where: out, cond, a, b

/// Maps a linear index over a common iteration shape to the element offset of each operand.
/// Dims are coalesced and size-1 dims dropped on the host (make_elementwise_launch), so most
/// tensors need one or two dims here. Passed to kernels by value (328 bytes of parameters).
struct OffsetCalc {
  int ndim = 0;
  int64_t sizes[kMaxKernelDims] = {};                   // outermost first
  int64_t strides[kMaxOperands][kMaxKernelDims] = {};   // per operand, in elements; 0 = broadcast
};

/// Where and how an element-wise kernel runs.
struct ElementwiseLaunch {
  int64_t numel = 0;
  /// Every operand contiguous with the same shape: the offset of element i is i (fast path).
  bool contiguous = false;
  OffsetCalc calc;  // used when !contiguous; operand 0 is the output
  cudaStream_t stream = nullptr;
};

/// dst[i] = convert<dst dtype>(src[i]). Any pair of dtypes; f16/bf16 convert through fp32 (f64
/// directly, to round once).
void launch_copy(DType dst_dtype, void* dst, DType src_dtype, const void* src, const ElementwiseLaunch& l);

/// dst[i] = the element whose bytes are the low elem_size bytes of `bits` (host-converted value).
void launch_fill(size_t elem_size, void* dst, uint64_t bits, const ElementwiseLaunch& l);

enum class BinaryOp : uint8_t { add, sub, mul, div, maximum, minimum, eq, ne, lt, le, gt, ge };
inline constexpr int kNumBinaryOps = 12;

/// True for eq ... ge: the output is bool.
constexpr bool is_comparison(BinaryOp op) { return op >= BinaryOp::eq; }
/// The dtypes launch_binary implements for `op`: arithmetic on f32, f64, f16, bf16, i32, i64
/// (div on floating dtypes only); comparisons on every dtype.
bool binary_supported(BinaryOp op, DType dtype);

/// out = op(a, b), all three described by `l` (operand order: out, a, b). a and b have `dtype`;
/// out has `dtype` (arithmetic) or bool (comparisons). add/sub compute a ± alpha·b. f16/bf16 are
/// computed in fp32, f64 in f64, integers in their own type.
void launch_binary(BinaryOp op, DType dtype, void* out, const void* a, const void* b, double alpha,
                   const ElementwiseLaunch& l);

/// out = cond ? a : b (operands: out, cond, a, b; cond bool). Moves element bits, so one kernel
/// per element size serves every dtype.
void launch_where(size_t elem_size, void* out, const bool* cond, const void* a, const void* b,
                  const ElementwiseLaunch& l);
/// out = mask ? value : x (operands: out, x, mask), value given as host-converted element bits.
void launch_masked_fill(size_t elem_size, void* out, const void* x, const bool* mask, uint64_t bits,
                        const ElementwiseLaunch& l);

// ---- unary (ops/cuda/unary.cu) ------------------------------------------------------------------
enum class UnaryOp : uint8_t { neg, abs, exp, log, sqrt, rsqrt, tanh, sigmoid, relu, gelu, pow, erf, silu };
inline constexpr int kNumUnaryOps = 13;

/// The dtypes launch_unary implements: f32, f64, f16, bf16 for every op; i32, i64 also for neg,
/// abs and relu.
bool unary_supported(UnaryOp op, DType dtype);

/// out = f(x) (operands: out, x), same dtype. `param`: pow's exponent, gelu's approximation flag
/// (0 = erf, 1 = tanh). f16/bf16 compute in fp32, f64 in f64, integers in their own type.
void launch_unary(UnaryOp op, DType dtype, void* out, const void* x, double param, const ElementwiseLaunch& l);

/// The backward kernels of relu and gelu: out = grad · f'(x) (operands: out, grad, x), floating
/// dtypes only; `param` is gelu's approximation flag.
enum class ActivationBackward : uint8_t { relu, gelu };
void launch_activation_backward(ActivationBackward op, DType dtype, void* out, const void* grad, const void* x,
                                double param, const ElementwiseLaunch& l);

// ---- reductions (ops/cuda/reduce.cu) -------------------------------------------------------------
/// A reduction of x to num_out outputs, each over red_numel elements. Output o (row-major over the
/// kept dims) starts at x's element offset kept(o); its r-th element (row-major over the reduced
/// dims) is at kept(o) + red(r). Both calculators use operand 0 only.
struct ReduceLaunch {
  int64_t num_out = 0;
  int64_t red_numel = 0;
  OffsetCalc kept;
  OffsetCalc red;
  /// Launch geometry, from reduce_geometry(): one thread per output (per_thread), or `chunks`
  /// blocks per output over `chunk` elements each, combined by a second kernel when chunks > 1.
  bool per_thread = true;
  int64_t chunk = 0;
  int64_t chunks = 1;
  cudaStream_t stream = nullptr;
};

/// Bytes of device scratch a launch needs for its per-block partials (0 unless chunks > 1).
inline constexpr size_t kReducePartialBytes = 16;
inline size_t reduce_scratch_bytes(const ReduceLaunch& l) {
  return l.per_thread || l.chunks <= 1 ? 0 : static_cast<size_t>(l.num_out * l.chunks) * kReducePartialBytes;
}

/// Fills the launch geometry of `l` from num_out and red_numel. The geometry depends on the shape
/// only, so a result never depends on the device it ran on: reductions are deterministic.
void reduce_geometry(ReduceLaunch& l);

enum class ReduceOp : uint8_t { sum, mean, max };

/// sum/mean: out[o] = Σ x (mean: · 1/red_numel); accumulates in fp32 (f64 for f64, i64 for
/// integers and bool, whose sum writes i64); out in x's dtype otherwise. max: values[o] (x's
/// dtype) and indices[o] (i64) of the first maximum, NaN winning. `scratch`: at least
/// reduce_scratch_bytes(l) bytes on the device.
void launch_reduce(ReduceOp op, DType dtype, void* out, int64_t* indices, const void* x, void* scratch,
                   const ReduceLaunch& l);

// ---- the loss scaler's unscale pass (ops/cuda/unscale.cu) ----------------------------------------
/// One gradient of a multi-tensor call (unscale_grads, grad_norms, clip_grad_*): contiguous,
/// `numel` elements of `dtype`.
struct GradBuffer {
  void* data = nullptr;
  int64_t numel = 0;
  DType dtype = DType::f32;
};

/// Elements per block of the unscale pass; every gradient takes max(1, ceil(numel / kUnscaleChunk))
/// blocks, whatever its dtype.
inline constexpr int64_t kUnscaleChunk = 65536;
/// Device scratch bytes for an unscale_grads call over `grads` (the per-block partials and the
/// per-gradient partial ranges).
size_t unscale_scratch_bytes(const GradBuffer* grads, int count);

/// The fused unscale pass (see ops/contracts/kernels_amp.h): u = g · inv_scale (in f64 for f64 gradients,
/// fp32 otherwise), g = u when `write`; counts[i] (f32) = non-finite elements of u_i;
/// sq_norms[i] = Σ u_i² summed in f64 (written as f64 when sq_norms_f64, else f32); found_inf (f32)
/// set to 1 when any count is non-zero, otherwise left as it is. inv_scale and found_inf are
/// device pointers read and written by the kernels: no host synchronisation. Deterministic: the
/// per-block partials are reduced in a fixed order by a second kernel.
void launch_unscale(const GradBuffer* grads, int count, const float* inv_scale, bool write, float* found_inf,
                    float* counts, void* sq_norms, bool sq_norms_f64, void* scratch, cudaStream_t stream);

// ---- optimizer updates (ops/cuda/optim.cu) ---------------------------------------------------------
/// The fused SGD / Adam(W) updates (ops/contracts/kernels_optim.h, element math ops/math/optim_math.h) of `count`
/// parameters on the current device, all with parameter dtype `param_dtype` and gradient dtype
/// `grad_dtype` (the same, or f32 for f16/bf16 parameters). Multi-tensor apply: a few launches
/// for any number of tensors. found_inf, grad_scale, the scheduled hyperparameters and the step
/// counters are read by the kernels (a second kernel bumps the counters after the updates): no
/// host synchronisation.
void launch_sgd_step(DType param_dtype, DType grad_dtype, const kernels::SgdTensor* tensors, int count,
                     const kernels::SgdHyper& hyper, const kernels::StepInputs& inputs, cudaStream_t stream);
void launch_adam_step(DType param_dtype, DType grad_dtype, const kernels::AdamTensor* tensors, int count,
                      const kernels::AdamHyper& hyper, const kernels::StepInputs& inputs, cudaStream_t stream);

// ---- gradient norms and clipping (ops/cuda/clip.cu) ------------------------------------------------
/// Elements per block of the norm and clipping passes; every gradient takes
/// max(1, ceil(numel / kClipChunk)) blocks.
inline constexpr int64_t kClipChunk = 65536;
/// Device scratch bytes for a launch_grad_norms call over `grads`.
size_t grad_norms_scratch_bytes(const GradBuffer* grads, int count);
/// out[i] (f64, device) = the power sum of grads[i] for the p-norm of `kind` (ops/math/optim_math.h),
/// in f64; deterministic (per-block partials combined in chunk order by a second kernel).
void launch_grad_norms(const GradBuffer* grads, int count, kernels::NormKind kind, double p, double* out,
                       void* scratch, cudaStream_t stream);
/// The clip of clip_grad_norm (ops/contracts/kernels_optim.h): the total norm from `count` power sums
/// (f64 or f32, device) into *total_out (a float, or a double when total_f64), then every gradient
/// scaled in place by clip_coefficient (f64 for f64 gradients) when clip_scales, decided on the
/// device. coef: 4 doubles of device scratch.
void launch_clip_grad_norm(const GradBuffer* grads, int count, const void* power_sums, bool sums_f64,
                           kernels::NormKind kind, double p, double max_norm, void* total_out, bool total_f64,
                           double* coef, cudaStream_t stream);
/// Every gradient element clamped to [-clip_value, clip_value] in place (NaN stays).
void launch_clip_grad_value(const GradBuffer* grads, int count, double clip_value, cudaStream_t stream);

// ---- the fp8 recipe's cast (ops/cuda/fp8_cast.cu) ---------------------------------------------
/// scaled_fp8_cast (ops/contracts/kernels.h, Fp8ScaledCastKernel): out[i] = saturate(f32(x[i]) ·
/// *scale) as E4M3 (e4m3) or E5M2 codes, *amax = max |x[i]| (NaN when one is NaN; 0 for n = 0).
/// x: n contiguous elements of x_dtype (floating); scale, amax: device pointers. No host wait.
void launch_fp8_scaled_cast(DType x_dtype, void* out, float* amax, const void* x, int64_t n, const float* scale,
                            bool e4m3, cudaStream_t stream);

}  // namespace precis::cuda
