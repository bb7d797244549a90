#pragma once
// The random draw of an op whose kernels may run on a device (dropout, dropout_add,
// attention_softmax): Generator::draw, refused for a CPU tensor inside a CUDA graph capture, where
// the draw's offset base lives in device memory that a CPU kernel cannot read and the CPU work
// would not be replayed anyway.
#include <cstdint>

#include "core/cuda_graph.h"
#include "core/device.h"
#include "core/error.h"
#include "core/rng.h"

namespace precis::detail {

inline PhiloxDraw draw_for(Generator& generator, uint64_t n_blocks, const Device& device, const char* op) {
  PRECIS_CHECK_T(GraphCaptureError, device.is_cuda() || !cuda::is_capturing(), op,
                 ": a random draw for a CPU tensor while capturing a CUDA graph: CPU work inside a capture runs "
                 "once and is not replayed; draw on the CPU outside the captured region");
  return generator.draw(n_blocks);
}

}  // namespace precis::detail
