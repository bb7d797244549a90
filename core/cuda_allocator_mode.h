#pragma once
// Which allocator hands out CUDA device memory, chosen by the environment variable
// PRECIS_CUDA_ALLOCATOR (read once, when the first CUDA allocator is made):
//   unset, empty or "caching"  the stream-ordered caching allocator (core/device_caching_allocator.h)
//   "direct"                   one cudaMalloc of exactly the requested size per tensor and a cudaFree
//                              when it is freed (core/direct_device_allocator.h), so that
//                              compute-sanitizer memcheck sees an access one byte past a tensor, or
//                              into a freed one, which a cached segment would hide.
// Host code with no CUDA call, so that the parsing is tested without a GPU
// (tests/core/cuda_allocator_mode_test.cpp). Pinned host memory stays caching in either mode.

namespace precis {

enum class CudaAllocatorMode { caching, direct };

/// The environment variable that selects the mode.
inline constexpr const char* kCudaAllocatorVariable = "PRECIS_CUDA_ALLOCATOR";

/// The mode named by `value` (the variable's text; nullptr when unset). Throws ValueError naming
/// the variable, the value and the accepted values for anything else.
CudaAllocatorMode parse_cuda_allocator_mode(const char* value);

/// The mode of this process: PRECIS_CUDA_ALLOCATOR as read the first time this is called (later
/// changes to the environment are ignored, so every device gets the same kind of allocator).
/// Throws the ValueError of parse_cuda_allocator_mode, at every call, when the value is invalid.
CudaAllocatorMode cuda_allocator_mode();

/// "caching" or "direct".
const char* to_string(CudaAllocatorMode mode);

}  // namespace precis
