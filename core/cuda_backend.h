#pragma once
// The CUDA backend as a library loaded at run time. The CUDA, cuBLAS(Lt), cuDNN and NCCL code
// (every */cuda/ folder) is built into libprecis_cuda.so, which libprecis opens on the first
// request for a CUDA device, as PyTorch and oneDNN open their GPU runtimes. A program linked
// against libprecis therefore links no CUDA library and runs on a machine that has none; asking it
// for a CUDA device then throws one DeviceError that says why the backend is missing.
//
// Where the backend is looked for, first match wins:
//   1. $PRECIS_CUDA_BACKEND, a path to the library (for tests and unusual installs); read once,
//      at the first CUDA request, and honoured in a build without CUDA too, so that the tests'
//      fake device (tests/support/fake_cuda) runs everywhere;
//   2. the folder of libprecis.so itself (the build tree and an install keep them side by side);
//   3. the dynamic loader's search path (LD_LIBRARY_PATH, ldconfig).
// The backend links the shared libprecis.so: a program linked with the static libprecis.a would
// get a second copy of precis beside its own, so there the backend is refused with that reason.
//
// Each layer asks for the backend's entry points it needs by name (cuda_backend_symbol), so the
// loader in core/ knows nothing of the layers above it.
#include <cstdint>
#include <string>

namespace precis {

class Allocator;

/// Whether the CUDA backend library is loaded; the first call tries to load it. Never throws.
/// Loaded does not mean a GPU is usable: cuda_device_count() says that.
bool cuda_backend_available();

/// Why the CUDA backend could not be loaded (empty when it is loaded). The first line of every
/// "no CUDA" error.
std::string cuda_backend_unavailable_reason();

namespace detail {

/// The backend's exported C symbol `name`, loading the backend first; nullptr when the backend
/// cannot be loaded or does not export it.
void* cuda_backend_symbol(const char* name);

/// What core/ itself calls in the backend (device count, allocators, synchronisation). The backend
/// exports `precis_cuda_core_hooks`, a function returning a pointer to one of these.
struct CudaCoreHooks {
  int (*device_count)();                ///< visible devices; 0 without a driver or GPU
  const char* (*unavailable_reason)();  ///< why no device is visible ("" when one is)
  void (*register_allocators)();        ///< allocator_for's first CUDA request
  Allocator& (*pinned_allocator)();     ///< pinned host memory
  void (*synchronize_device)(int index);
  int (*compute_capability)(int index);  ///< major·10 + minor of a visible device
  /// CUDA graphs (core/cuda_graph.h); null where the backend cannot capture. graph_begin starts
  /// capturing the calling thread's current stream of `device`, its allocations routed to private
  /// pool `pool`, and returns the capture's handle; graph_end finishes it (the graph is ready to
  /// replay); graph_abandon ends a capture that failed and frees what it made; graph_replay
  /// launches a finished graph on the device's current stream; graph_destroy frees a graph (after
  /// its replays have run) and releases its pool.
  void* (*graph_begin)(int device, uint64_t pool);
  void (*graph_end)(void* graph);
  void (*graph_abandon)(void* graph) noexcept;
  void (*graph_replay)(void* graph);
  void (*graph_destroy)(void* graph) noexcept;
  /// Writes `value` to the 8 bytes of device memory at `dst` on `device`'s current stream, in
  /// stream order and without a host wait (the offset base of a graph's random draws before each
  /// replay, core/cuda_graph.cpp). Null where graph_begin is.
  void (*write_u64_async)(int device, void* dst, uint64_t value);
  /// Makes `index` the calling thread's current device (cudaSetDevice); null where the backend
  /// has no notion of one (the tests' fake device checks the index only).
  void (*set_device)(int index);
};

/// The loaded backend's hooks, or nullptr when it cannot be loaded.
const CudaCoreHooks* cuda_core_hooks();

}  // namespace detail
}  // namespace precis
