#pragma once
// Kernel signatures shared by every backend. The functional API (ops/*.cpp) checks operands,
// allocates outputs and brings inputs to the shape the kernel expects; a kernel only computes.
// Kernels are looked up by (op, device type, dtype) with kernel<Fn>() from ops/op_table.h; the
// dtype key is the input dtype unless a comment says otherwise. Floating kernels for f16/bf16
// compute in fp32, f64 in f64.
#include <cstdint>
#include <vector>

#include "tensor/tensor.h"

namespace precis::kernels {

/// dst[i] = src[i] converted to dst's dtype. Same shape and device, any strides (src may be
/// expanded with stride 0). Keyed by dst's dtype.
using CopyKernel = void(const Tensor& dst, const Tensor& src);
/// Every element of dst (any strides) set to value.
using FillKernel = void(const Tensor& dst, Scalar value);

/// out = f(x). out: contiguous or dense in x's layout (ops/detail/broadcast.h empty_elementwise); x
/// same shape (any strides). `param`: pow's exponent; gelu's approximation (0 = erf, 1 = tanh);
/// unused otherwise.
using UnaryKernel = void(const Tensor& out, const Tensor& x, double param);

/// out = f(a, b). a, b expanded to out's shape (any strides, stride 0 allowed), same dtype.
/// out: contiguous or dense in the operands' shared layout (empty_elementwise); same dtype for
/// arithmetic, bool for comparisons. `alpha`: add/sub's b multiplier; for relu_backward and
/// gelu_backward (a = grad, b = x) gelu's approximation flag.
/// out may be a itself (AccumulateGrad's in-place grad += g): each a[i] is read before out[i]
/// is written.
using BinaryKernel = void(const Tensor& out, const Tensor& a, const Tensor& b, double alpha);

/// out = cond ? a : b; all expanded to out's shape; cond bool. Keyed by a's dtype.
using WhereKernel = void(const Tensor& out, const Tensor& cond, const Tensor& a, const Tensor& b);
/// out = mask ? value : x; x and mask expanded to out's shape.
using MaskedFillKernel = void(const Tensor& out, const Tensor& x, const Tensor& mask, Scalar value);

/// Reductions over `dims` (sorted, unique, non-empty). out has x's shape with those dims set to
/// 1 (keepdim form), contiguous. Floating accumulation in fp32 (f64 for f64). Keyed by x's dtype;
/// sum of integers/bool writes i64.
using ReduceKernel = void(const Tensor& out, const Tensor& x, const std::vector<int64_t>& dims);
/// var with `correction` (N - correction in the denominator).
using VarKernel = void(const Tensor& out, const Tensor& x, const std::vector<int64_t>& dims, int64_t correction);
/// Max along one dim: values (x's dtype) and indices (i64) in keepdim form, contiguous; the first
/// index of the maximum; NaN wins.
using MaxDimKernel = void(const Tensor& values, const Tensor& indices, const Tensor& x, int64_t dim);

/// Batched GEMM. a: (Ba, n, k), b: (Bb, k, m), Ba and Bb each 1 or B (size-1 batches broadcast),
/// any strides; out: (B, n, m) contiguous. Same floating dtype; fp32 accumulation.
/// The CPU kernel also takes two batch dims, a: (Ba1, Ba2, n, k), b: (Bb1, Bb2, k, m), out:
/// (B1, B2, n, m): matmul passes that form on the CPU where the batch dims merge into no single
/// stride (attention's heads), so nothing is copied; other backends get 3-D copies.
using MatmulKernel = void(const Tensor& out, const Tensor& a, const Tensor& b);
/// out = x·wᵀ + bias. x: (M, in) contiguous, w: (out, in) contiguous, bias: (out) or undefined,
/// out: (M, out) contiguous.
using LinearKernel = void(const Tensor& out, const Tensor& x, const Tensor& w, const Tensor& bias);

/// FP8 GEMM (scaled_matmul, docs/fp8.md): out = (a_scale_inv · b_scale_inv) · (a·b), rounded once
/// to out's dtype (bf16 or f32). a: (M, K) f8_e4m3 or f8_e5m2, b: (K, N) fp8 (not both e5m2), any
/// strides (a kernel copies what its library cannot take); a_scale_inv, b_scale_inv: f32 with one
/// element, on a's device (read there: no host sync); out: (M, N) contiguous. Every product of
/// two fp8 values is exact in fp32, and the sums accumulate in fp32; `fast_accum` lets the CUDA
/// kernel use cuBLASLt's fast fp8 accumulation (Transformer Engine's choice for the forward GEMM),
/// the CPU ignores it. Keyed by a's dtype.
using ScaledMatmulKernel = void(const Tensor& out, const Tensor& a, const Tensor& b, const Tensor& a_scale_inv,
                                const Tensor& b_scale_inv, bool fast_accum);

/// The fp8 recipe's scaled cast, one pass over x: out[i] = f32(x[i]) · scale rounded to out's fp8
/// dtype by the saturating rule (core/float8.h: ±max past the range and for ±inf; NaN kept), and
/// amax = max |x[i]| (NaN when an element is NaN, 0 for an empty x). out: (n) contiguous f8_e4m3
/// or f8_e5m2; x: (n) contiguous f32, f64 (rounded to f32 first), f16 or bf16; scale, amax: 0-d
/// f32; all on one device. Keyed by x's dtype. The multiply is one f32 rounding, as an f32 mul.
using Fp8ScaledCastKernel = void(const Tensor& out, const Tensor& amax, const Tensor& x, const Tensor& scale);

/// Copies each input into out along dim at its offset; inputs already have out's dtype.
using CatKernel = void(const Tensor& out, const std::vector<Tensor>& inputs, int64_t dim);
/// out = x.index_select(dim, index); index 1-D i64 (already range-checked).
using IndexSelectKernel = void(const Tensor& out, const Tensor& x, int64_t dim, const Tensor& index);
/// out = x.gather(dim, index); index i64 with out's shape (range-checked).
using GatherKernel = void(const Tensor& out, const Tensor& x, int64_t dim, const Tensor& index);
/// out (contiguous: a copy of x, or zeros) += src's slices at rows index along dim, in increasing index order.
using IndexAddKernel = void(const Tensor& out, int64_t dim, const Tensor& index, const Tensor& src);
/// out (already holding a copy of x): out[index[i..]] along dim += src[i..].
using ScatterAddKernel = void(const Tensor& out, int64_t dim, const Tensor& index, const Tensor& src);

}  // namespace precis::kernels
