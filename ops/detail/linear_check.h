#pragma once
// linear's operand checks, shared by the ops that take linear's operands (linear, linear_gelu):
// one wording for every such op.
#include "tensor/tensor.h"

namespace precis::detail {

/// Throws DeviceError, DTypeError or ShapeError, naming `op` and every operand's shape, dtype and
/// device, unless x (*, in), weight (out, in) and bias (out) or undefined are floating, of one
/// dtype and on one device.
void check_linear_operands(const char* op, const Tensor& x, const Tensor& weight, const Tensor& bias);

}  // namespace precis::detail
