#pragma once
// Broadcasting and type-promotion rules shared by the ops that combine operands (internal to
// ops/ and amp/).
#include <initializer_list>
#include <span>

#include "tensor/tensor.h"

namespace precis {

/// PyTorch's broadcast shape of the operands (sizes aligned from the right; each size equal or
/// 1). Throws ShapeError naming `op` and every operand (shape, dtype, device) when incompatible.
/// `names` label the operands in the message ("a", "b", ...), one per tensor.
Shape broadcast_shapes(const char* op, std::initializer_list<const Tensor*> operands,
                       std::initializer_list<const char*> names);

/// PyTorch's result dtype of an op's tensor operands: the promotion of the dimensioned operands,
/// unless a zero-dim operand is of a higher category (bool < integer < floating); then it is
/// promoted with the zero-dim ones. So a (N) bf16 tensor times a () f32 tensor is bf16, a (N) i32
/// tensor plus a () f64 tensor is f64. Undefined operands are skipped; at least one is defined.
/// floating_only: only floating operands count, and f32 is returned when there are none (the
/// widest dtype of autocast's Promote category).
DType result_type(std::span<const Tensor* const> operands, bool floating_only = false);
inline DType result_type(std::initializer_list<const Tensor*> operands, bool floating_only = false) {
  return result_type(std::span<const Tensor* const>(operands.begin(), operands.size()), floating_only);
}

/// The uninitialised output of an element-wise op of `shape` (PyTorch's layout rule): when the
/// operands that span `shape` (its sizes, no broadcast dim) share one memory order and the first of
/// them is dense (no gaps, no overlap) in a non-row-major order — both transposed, both
/// channels-last, a unary op's input — the output is dense in that order; otherwise it is
/// contiguous. Broadcast operands (fewer dims, a size-1 or stride-0 dim) do not count, so NHWC +
/// a (1, C, 1, 1) bias stays NHWC. `op` names the op in an out-of-memory error.
Tensor empty_elementwise(const Shape& shape, DType dtype, Device device, std::initializer_list<const Tensor*> operands,
                         const char* op = "empty");

}  // namespace precis
