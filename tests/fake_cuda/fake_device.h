#pragma once
// Helpers of the tests that run on the fake CUDA device (tests/support/fake_cuda/fake_cuda.cpp),
// selected by ctest's PRECIS_CUDA_BACKEND for this executable.
#include <catch2/catch.hpp>

#include <string>

#include "core/cuda_backend.h"
#include "core/device.h"
#include "core/sync_debug.h"

namespace precis::fake_cuda_testing {

/// Fails the test unless the CUDA backend in this process is the fake one: these tests must never
/// pass vacuously without it, nor run on a real GPU (whose backend lacks precis_fake_cuda).
inline void require_fake_device() {
  INFO("run through ctest, which sets PRECIS_CUDA_BACKEND to libprecis_fake_cuda.so; backend: "
       << (cuda_backend_available() ? "loaded" : cuda_backend_unavailable_reason()));
  REQUIRE(detail::cuda_backend_symbol("precis_fake_cuda") != nullptr);
  REQUIRE(cuda_device_count() >= 1);
}

/// Restores the sync debug mode at scope exit.
struct SyncModeGuard {
  cuda::SyncDebugMode saved;
  explicit SyncModeGuard(cuda::SyncDebugMode mode) : saved(cuda::set_sync_debug_mode(mode)) {}
  ~SyncModeGuard() { cuda::set_sync_debug_mode(saved); }
};

}  // namespace precis::fake_cuda_testing
