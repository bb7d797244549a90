#pragma once
// cuBLASLt pieces shared by the kernels that call it (linear, scaled_matmul): the per-thread
// handle and owners of its descriptors. Internal to ops/cuda.
#include <cublasLt.h>

#include <cstddef>
#include <cstdint>

#include "core/cuda/cuda_check.h"

namespace precis::cuda {

/// The calling thread's cuBLASLt handle of the device (core/cuda/handle_pool.h: one per thread
/// and device, like the cuBLAS and cuDNN ones; cublasLtMatmul takes the stream as an argument).
cublasLtHandle_t lt_handle(int index);

/// Upper bound on the workspace an algorithm may ask for (the caching allocator provides it).
constexpr size_t kMaxWorkspace = size_t{32} << 20;

// Owners of cuBLASLt descriptors.
struct MatmulDesc {
  cublasLtMatmulDesc_t d = nullptr;
  MatmulDesc(cublasComputeType_t compute, cudaDataType_t scale) {
    PRECIS_CUBLAS_CHECK(cublasLtMatmulDescCreate(&d, compute, scale), "creating a cuBLASLt matmul descriptor");
  }
  ~MatmulDesc() { cublasLtMatmulDescDestroy(d); }
  MatmulDesc(const MatmulDesc&) = delete;
  MatmulDesc& operator=(const MatmulDesc&) = delete;
  template <typename T>
  void set(cublasLtMatmulDescAttributes_t attr, const T& value) {
    PRECIS_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(d, attr, &value, sizeof value),
                        "setting cuBLASLt matmul attribute ", static_cast<int>(attr));
  }
};
struct Layout {
  cublasLtMatrixLayout_t d = nullptr;
  Layout(cudaDataType_t t, uint64_t rows, uint64_t cols, int64_t ld) {
    PRECIS_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&d, t, rows, cols, ld), "creating a cuBLASLt layout of ", rows,
                        " x ", cols);
  }
  ~Layout() { cublasLtMatrixLayoutDestroy(d); }
  Layout(const Layout&) = delete;
  Layout& operator=(const Layout&) = delete;
};
struct Preference {
  cublasLtMatmulPreference_t d = nullptr;
  Preference() { PRECIS_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&d), "creating a cuBLASLt preference"); }
  ~Preference() { cublasLtMatmulPreferenceDestroy(d); }
  Preference(const Preference&) = delete;
  Preference& operator=(const Preference&) = delete;
  template <typename T>
  void set(cublasLtMatmulPreferenceAttributes_t attr, const T& value) {
    PRECIS_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(d, attr, &value, sizeof value),
                        "setting cuBLASLt preference ", static_cast<int>(attr));
  }
};

}  // namespace precis::cuda
