#pragma once
// Memory formats of 4-D (N, C, H, W) tensors, PyTorch's torch.memory_format: contiguous (NCHW) or
// channels-last (the (N, H, W, C) permutation contiguous). A channels-last input keeps its layout
// through conv2d, batch_norm and the pooling ops (docs/design/cpu-conv.md), which on the CPU saves
// oneDNN's per-call reorders of the activations.
#include <iosfwd>
#include <string>

#include "tensor/tensor.h"

namespace precis {

/// torch.contiguous_format, torch.channels_last, torch.preserve_format.
enum class MemoryFormat { Contiguous, ChannelsLast, Preserve };

/// "contiguous", "channels_last" or "preserve".
const char* memory_format_name(MemoryFormat format);
/// memory_format_name as a string.
std::string to_string(MemoryFormat format);
/// Writes memory_format_name(format): `std::cout << MemoryFormat::ChannelsLast` prints "channels_last".
std::ostream& operator<<(std::ostream& os, MemoryFormat format);

/// Whether t is dense in `format` (x.is_contiguous(memory_format=...)): ChannelsLast needs a 4-D
/// tensor whose (N, H, W, C) permutation is contiguous (size-1 dims' strides ignored); Preserve
/// asks whether t is dense in either format.
bool is_contiguous(const Tensor& t, MemoryFormat format);

/// t in `format` (x.contiguous(memory_format=...)): t itself when it already is, else a copy
/// (differentiable, like contiguous()). ChannelsLast needs a 4-D tensor (ShapeError otherwise);
/// Preserve keeps a dense channels-last t and makes anything else contiguous.
Tensor contiguous(const Tensor& t, MemoryFormat format);

/// The format t is dense in: Contiguous, ChannelsLast (dense channels-last and not contiguous), or
/// Preserve when neither (a strided view). torch.Tensor has no such query; conv2d and batch_norm
/// use it to decide which layout their outputs take.
MemoryFormat suggest_memory_format(const Tensor& t);

}  // namespace precis
