#pragma once
// Argument checks every backend applies before a collective, so that a bad call fails the same
// way (and on every rank alike, before any rank enters the collective) whatever the transport.
#include "dist/process_group.h"

namespace precis::dist::detail {

/// ValueError unless `t` is defined, contiguous and on the CPU-or-`backend`-supported device.
void check_collective_tensor(const char* collective, const Tensor& t);
/// DTypeError for avg on a non-floating dtype and for sum/avg on booleans.
void check_reduce_dtype(const Tensor& t, ReduceOp op);
/// ShapeError unless out is contiguous, in's dtype, shape [world, *in.shape].
void check_all_gather_shapes(const Tensor& in, const Tensor& out, int world);

}  // namespace precis::dist::detail
