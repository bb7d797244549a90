#pragma once
// Host-side operand checks and scratch of the row-wise CUDA kernels' entries (norm_entries.cpp,
// softmax_entries.cpp, loss_entries.cpp): the functional code (ops/norm.cpp, softmax.cpp,
// loss.cpp) has checked shapes and made the operands contiguous (batch_norm keeps a channels-last
// input as channels-last rows); these check that every operand is on one CUDA device with the
// dtypes the kernel signatures promise, and allocate the launches' scratch. Internal.
#include <cstdint>
#include <initializer_list>
#include <string>

#include "tensor/factory.h"
#include "tensor/tensor.h"

namespace precis::cuda::rows {

inline DType acc_of(DType x) { return x == DType::f64 ? DType::f64 : DType::f32; }

// Whether t, an (N, C, S) tensor, is channels-last rows: element (n, c, s) at (n·S + s)·C + c (what
// ops/norm.cpp makes of a channels-last 4-D input).
inline bool channels_last_rows(const Tensor& t) {
  return t.dim() == 3 && !t.is_contiguous() && t.strides()[0] == t.size(1) * t.size(2) && t.strides()[1] == 1 &&
         t.strides()[2] == t.size(1);
}

// How check_operands wants x and the operands of x's dtype laid out: contiguous, channels-last
// rows (batch_norm), or x with any strides (nll_loss reads x through both of its strides).
enum class XLayout : uint8_t { contiguous, channels_last, any_strides };

// Every defined operand on x's CUDA device; the T operands of x's dtype, the acc ones of its acc
// dtype, all contiguous — except that x and the T operands are laid out as `layout` says.
inline void check_operands(const char* op, const Tensor& x, std::initializer_list<const Tensor*> same_dtype,
                           std::initializer_list<const Tensor*> acc_dtype, XLayout layout = XLayout::contiguous) {
  const DType acc = acc_of(x.dtype());
  const auto laid_out = [&](const Tensor& t) {
    switch (layout) {
      case XLayout::contiguous: return t.is_contiguous();
      case XLayout::channels_last: return channels_last_rows(t);
      case XLayout::any_strides: return true;
    }
    return false;
  };
  bool ok = x.device().is_cuda() && is_floating(x.dtype()) && laid_out(x);
  for (const Tensor* t : same_dtype)
    if (t->defined()) ok = ok && t->device() == x.device() && t->dtype() == x.dtype() && laid_out(*t);
  for (const Tensor* t : acc_dtype)
    if (t->defined()) ok = ok && t->device() == x.device() && t->dtype() == acc && t->is_contiguous();
  if (ok) return;
  std::string all = "x " + x.describe();
  for (const Tensor* t : same_dtype) all += ", " + (t->defined() ? t->describe() : std::string("(undefined)"));
  for (const Tensor* t : acc_dtype) all += ", " + (t->defined() ? t->describe() : std::string("(undefined)"));
  throw DeviceError(precis::detail::str_cat(
      op, ": the CUDA kernel needs every operand contiguous (batch_norm: or x, out, grad, dx all channels-last rows; "
          "nll_loss: x any strides) "
          "on x's CUDA device, the data of x's floating dtype and "
          "statistics, parameters and per-row values in ",
      dtype_name(acc), "; got ", all));
}

inline void* ptr(const Tensor& t) { return t.defined() ? t.data_ptr() : nullptr; }

// Device scratch of n doubles, freed by the caller right after the launches (stream-ordered reuse).
inline Tensor scratch_doubles(int64_t n, Device device) {
  return empty({n > 0 ? n : 1}, {.dtype = DType::f64, .device = device});
}

}  // namespace precis::cuda::rows
