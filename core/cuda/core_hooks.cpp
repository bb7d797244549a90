// The CUDA backend's side of core/cuda_backend.h: what libprecis's core calls once it has loaded
// this library.
#include "core/cuda/cuda_allocator.h"
#include "core/cuda/cuda_context.h"
#include "core/cuda_backend.h"

namespace {

precis::Allocator& pinned() { return precis::cuda::pinned_allocator(); }

constexpr precis::detail::CudaCoreHooks kHooks{
    .device_count = &precis::cuda::device_count,
    .unavailable_reason = &precis::cuda::unavailable_reason,
    .register_allocators = &precis::cuda::register_allocators,
    .pinned_allocator = &pinned,
    .synchronize_device = &precis::cuda::synchronize_device,
};

}  // namespace

extern "C" const precis::detail::CudaCoreHooks* precis_cuda_core_hooks() { return &kHooks; }
