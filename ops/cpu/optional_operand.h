#pragma once
// Data pointers of optional kernel operands (bias, weight, a gradient nobody asked for): null for
// an undefined tensor, so the kernels test one pointer instead of the tensor.
#include "tensor/tensor.h"

namespace precis::cpu {

template <typename T>
const T* ptr_or_null(const Tensor& t) {
  return t.defined() ? t.data_ptr<T>() : nullptr;
}
template <typename T>
T* mut_ptr_or_null(const Tensor& t) {
  return t.defined() ? t.data_ptr<T>() : nullptr;
}
inline void* raw_ptr_or_null(const Tensor& t) { return t.defined() ? t.data_ptr() : nullptr; }

}  // namespace precis::cpu
