#pragma once
// Error checks for CUDA runtime and cuBLAS calls (internal to the CUDA backend). A failing call
// throws DeviceError carrying the CUDA error name and string, what precis was doing, and
// file:line; nothing aborts.
//
//   PRECIS_CUDA_CHECK(cudaMemcpyAsync(...), "copy D2H of ", n, " bytes");
//   PRECIS_CUBLAS_CHECK(cublasSgemm(...), "matmul ", a.describe());
#include <cublas_api.h>
#include <cuda_runtime_api.h>

#include "core/error.h"

namespace precis::cuda::detail {
[[noreturn]] void throw_cuda_error(cudaError_t err, const char* call, const char* file, int line,
                                   const std::string& context);
[[noreturn]] void throw_cublas_error(cublasStatus_t status, const char* call, const char* file, int line,
                                     const std::string& context);
}  // namespace precis::cuda::detail

#define PRECIS_CUDA_CHECK(call, ...)                                                              \
  do {                                                                                            \
    const cudaError_t precis_err_ = (call);                                                       \
    if (precis_err_ != cudaSuccess) [[unlikely]]                                                  \
      ::precis::cuda::detail::throw_cuda_error(precis_err_, #call, __FILE__, __LINE__,            \
                                               ::precis::detail::str_cat("" __VA_OPT__(, ) __VA_ARGS__)); \
  } while (0)

#define PRECIS_CUBLAS_CHECK(call, ...)                                                            \
  do {                                                                                            \
    const cublasStatus_t precis_status_ = (call);                                                 \
    if (precis_status_ != CUBLAS_STATUS_SUCCESS) [[unlikely]]                                     \
      ::precis::cuda::detail::throw_cublas_error(precis_status_, #call, __FILE__, __LINE__,       \
                                                 ::precis::detail::str_cat("" __VA_OPT__(, ) __VA_ARGS__)); \
  } while (0)
