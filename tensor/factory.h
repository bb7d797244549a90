#pragma once
// Tensor factories, as in PyTorch: precis::zeros({2, 3}), precis::randn({4}, {.dtype = DType::f64}).
#include <cstdint>
#include <vector>

#include "core/rng.h"
#include "tensor/tensor.h"

namespace precis {
/// Uninitialised memory (from the device's caching allocator).
Tensor empty(const Shape& sizes, TensorOptions options = {});
Tensor zeros(const Shape& sizes, TensorOptions options = {});
Tensor ones(const Shape& sizes, TensorOptions options = {});
Tensor full(const Shape& sizes, Scalar value, TensorOptions options = {});
Tensor empty_like(const Tensor& t);
Tensor zeros_like(const Tensor& t);
Tensor ones_like(const Tensor& t);
Tensor full_like(const Tensor& t, Scalar value);
/// 0, 1, ..., end-1 (dtype from options; default f32, use {.dtype = DType::i64} for indices).
Tensor arange(double end, TensorOptions options = {});
/// start, start+step, ... < end; step may be negative, never 0.
Tensor arange(double start, double end, double step = 1.0, TensorOptions options = {});
/// Uniform in [0, 1). Floating dtypes only.
Tensor rand(const Shape& sizes, TensorOptions options = {}, Generator* gen = nullptr);
/// Standard normal (Box–Muller on Philox draws). Floating dtypes only.
Tensor randn(const Shape& sizes, TensorOptions options = {}, Generator* gen = nullptr);
/// Uniform integers in [low, high), for any int64 bounds.
Tensor randint(int64_t low, int64_t high, const Shape& sizes, TensorOptions options = {.dtype = DType::i64},
               Generator* gen = nullptr);

/// A tensor holding a copy of `values` with the given shape (numel must match). The dtype is
/// T's unless options say otherwise (then the values are converted).
template <typename T>
Tensor from_vector(const std::vector<T>& values, const Shape& sizes, TensorOptions options = {.dtype = dtype_of<T>()});
/// A 1-D tensor holding `values`.
template <typename T>
Tensor from_vector(const std::vector<T>& values) { return from_vector<T>(values, {static_cast<int64_t>(values.size())}); }
/// A 0-d tensor holding `value`.
Tensor scalar_tensor(Scalar value, TensorOptions options = {});

/// Wraps memory owned by the caller (no copy, no ownership): it must outlive the tensor.
Tensor from_blob(void* data, const Shape& sizes, DType dtype, Device device = Device::cpu());

/// `t`'s values on `device` without making the host wait for it: a CPU tensor goes through pinned
/// memory and a non-blocking copy where pinned memory exists (a pageable upload waits until the
/// device has read it, docs/gpu.md); otherwise t.to(device).
Tensor upload(const Tensor& t, Device device);

extern template Tensor from_vector<float>(const std::vector<float>&, const Shape&, TensorOptions);
extern template Tensor from_vector<double>(const std::vector<double>&, const Shape&, TensorOptions);
extern template Tensor from_vector<int64_t>(const std::vector<int64_t>&, const Shape&, TensorOptions);
extern template Tensor from_vector<int32_t>(const std::vector<int32_t>&, const Shape&, TensorOptions);
extern template Tensor from_vector<bool>(const std::vector<bool>&, const Shape&, TensorOptions);
extern template Tensor from_vector<Half>(const std::vector<Half>&, const Shape&, TensorOptions);
extern template Tensor from_vector<BFloat16>(const std::vector<BFloat16>&, const Shape&, TensorOptions);

}  // namespace precis
