#pragma once
// Broadcasting rules shared by the ops that combine operands of different shapes (internal to
// ops/).
#include <initializer_list>

#include "tensor/tensor.h"

namespace precis {

/// PyTorch's broadcast shape of the operands (sizes aligned from the right; each size equal or
/// 1). Throws ShapeError naming `op` and every operand (shape, dtype, device) when incompatible.
/// `names` label the operands in the message ("a", "b", ...), one per tensor.
Shape broadcast_shapes(const char* op, std::initializer_list<const Tensor*> operands,
                       std::initializer_list<const char*> names);

}  // namespace precis
