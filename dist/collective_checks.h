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
/// ShapeError unless in and out are contiguous, of one dtype, with in.numel() == world · out.numel();
/// plus check_reduce_dtype.
void check_reduce_scatter_shapes(const Tensor& in, const Tensor& out, int world, ReduceOp op);

/// The buffer an all_reduce hands to its transport: `t` itself, or for f16/bf16 an f32 copy, so that
/// the sum over ranks is taken in f32 and rounded once (MPI has no half types; NCCL's half sums
/// would round at every hop).
Tensor reduce_buffer(const Tensor& t);
/// Completes a reduce_buffer: when `buf` is a staged copy, rounds it back into `t` (and bumps t's
/// version); when it is `t` itself, does nothing.
void finish_reduce_buffer(const Tensor& t, const Tensor& buf);

}  // namespace precis::dist::detail
