#include "core/cuda_allocator_mode.h"

#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>

#include "core/error.h"

namespace precis {

CudaAllocatorMode parse_cuda_allocator_mode(const char* value) {
  // An empty value counts as unset: `PRECIS_CUDA_ALLOCATOR= cmd` is the usual way to clear it for
  // one command.
  if (value == nullptr || *value == '\0') return CudaAllocatorMode::caching;
  const std::string_view v(value);
  if (v == "caching") return CudaAllocatorMode::caching;
  if (v == "direct") return CudaAllocatorMode::direct;
  throw ValueError(detail::str_cat(kCudaAllocatorVariable, "=\"", v,
                                   "\" is not an allocator; accepted values: \"caching\" (the default) or \"direct\" "
                                   "(one cudaMalloc per tensor, for compute-sanitizer memcheck); unset it to use the "
                                   "caching allocator"));
}

CudaAllocatorMode cuda_allocator_mode() {
  // The text is read once and kept; an invalid value is rejected at every call rather than once,
  // so a retry cannot quietly fall back to another allocator.
  static const std::optional<std::string> value = []() -> std::optional<std::string> {
    const char* v = std::getenv(kCudaAllocatorVariable);
    if (v == nullptr) return std::nullopt;
    return std::string(v);
  }();
  return parse_cuda_allocator_mode(value ? value->c_str() : nullptr);
}

const char* to_string(CudaAllocatorMode mode) { return mode == CudaAllocatorMode::direct ? "direct" : "caching"; }

}  // namespace precis
