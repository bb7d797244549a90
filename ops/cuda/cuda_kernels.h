#pragma once
// The launch interface between the CUDA backend's host code (ops/cuda/*.cpp: unpacks Tensors,
// checks, registers kernels) and its device code (ops/cuda/*.cu). It carries raw pointers, dtypes
// and a compact offset calculator only, so the .cu files include neither tensor.h nor anything
// heavy, and nvcc compiles as little as possible. No CUDA header here either.
#include <cstddef>
#include <cstdint>

#include "core/dtype.h"

typedef struct CUstream_st* cudaStream_t;  // NOLINT: identical to the runtime's own typedef

namespace precis::cuda {

inline constexpr int kMaxKernelDims = 8;
inline constexpr int kMaxOperands = 3;

/// Maps a linear index over a common iteration shape to the element offset of each operand.
/// Dims are coalesced and size-1 dims dropped on the host (make_elementwise_launch), so most
/// tensors need one or two dims here. Passed to kernels by value (264 bytes of parameters).
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

}  // namespace precis::cuda
