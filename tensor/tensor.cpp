#include "tensor/tensor.h"

#include "core/error.h"

// The Tensor methods that only look at or re-describe metadata. Methods that run kernels (to,
// contiguous, item, printing, ...) are declared in tensor.h but defined in ops/
// (docs/design/architecture.md).

namespace precis {

namespace detail {
int64_t wrap_dim(int64_t dim, int64_t ndim, const char* op, const Tensor& t) {
  const int64_t n = std::max<int64_t>(ndim, 1);  // a 0-d tensor accepts dim 0 and -1, as in PyTorch
  PRECIS_CHECK_INDEX(dim >= -n && dim < n, op, ": dimension ", dim, " out of range for a tensor ", t.describe(),
                     " (valid: ", -n, " to ", n - 1, ")");
  return dim < 0 ? dim + n : dim;
}

Tensor new_contiguous(const Shape& sizes, DType dtype, Device device) {
  const int64_t n = shape_numel(sizes);
  size_t nbytes = 0;
  PRECIS_CHECK_T(ShapeError, !__builtin_mul_overflow(static_cast<size_t>(n), element_size(dtype), &nbytes),
                 "a tensor of shape ", shape_str(sizes), " and dtype ", dtype_name(dtype), " needs more than 2^64 bytes");
  auto storage = std::make_shared<StorageImpl>(nbytes, device);
  return Tensor(std::make_shared<TensorImpl>(std::move(storage), sizes, contiguous_strides(sizes), 0, dtype));
}

Tensor make_alias(const Tensor& base, Shape sizes, Shape strides, int64_t offset) {
  TensorImpl* b = base.impl();
  return Tensor(std::make_shared<TensorImpl>(b->storage(), std::move(sizes), std::move(strides), offset, b->dtype(),
                                             b->version_counter()));
}
}  // namespace detail

// wrap_dim accepts dim 0 / -1 on a 0-d tensor (for ops like sum), but a 0-d tensor has no size to
// read: check first, as PyTorch does.
int64_t Tensor::size(int64_t dim) const {
  PRECIS_CHECK_INDEX(this->dim() > 0, "size: dimension ", dim, " requested from a 0-d tensor ", describe());
  return sizes()[detail::wrap_dim(dim, this->dim(), "size", *this)];
}
int64_t Tensor::stride(int64_t dim) const {
  PRECIS_CHECK_INDEX(this->dim() > 0, "stride: dimension ", dim, " requested from a 0-d tensor ", describe());
  return strides()[detail::wrap_dim(dim, this->dim(), "stride", *this)];
}

Tensor Tensor::detach() const {
  return detail::make_alias(*this, sizes(), strides(), storage_offset());
}

std::string Tensor::describe() const {
  if (!defined()) return "(undefined)";
  return shape_str(sizes()) + " " + std::string(dtype_name(dtype())) + " " + device().str();
}

}  // namespace precis
