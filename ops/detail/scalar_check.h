#pragma once
// The checks on a Scalar that an op writes into a tensor (a fill value, add's alpha) and on
// operands that must be defined: one wording for every op that raises them.
#include <string>

#include "tensor/scalar.h"
#include "tensor/tensor.h"

namespace precis {

/// Throws ValueError unless value.fits(dtype): an integer dtype cannot hold NaN, +-inf or a value
/// past its range (PyTorch raises "value cannot be converted to type ... without overflow"; a
/// plain conversion would be undefined behaviour). `role` names the value ("fill value",
/// "alpha"); `target` describes the tensor it goes into (describe(), or the shape, dtype and
/// device of one not made yet).
void check_scalar_fits(const char* op, const char* role, Scalar value, DType dtype, const std::string& target);

/// The value as text: integers exactly, floating values in the shortest form that reads back
/// as the same double, nan, inf.
std::string scalar_str(Scalar value);

/// Throws ValueError naming `op` when `t` is undefined (a default-constructed Tensor holds no
/// data). `name` is the operand's role ("input", "source"). Inline: every view calls it.
[[noreturn]] void throw_undefined(const char* op, const char* name);
inline void require_defined(const char* op, const Tensor& t, const char* name = "input") {
  if (!t.defined()) throw_undefined(op, name);
}

}  // namespace precis
