#include "tensor/tensor.h"

#include <optional>

#include "core/checked_math.h"
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

// The bytes of a tensor of `sizes` and `dtype`; OutOfMemoryError when they exceed what a 64-bit
// offset addresses (a shape of 2^62 f32 elements fits in int64, its 2^64 bytes do not).
static size_t storage_bytes(const Shape& sizes, DType dtype, Device device, const char* op) {
  const int64_t n = shape_numel(sizes);
  const size_t elem = element_size(dtype);
  if (const std::optional<uint64_t> nbytes = checked_nbytes(n, elem)) [[likely]]
    return static_cast<size_t>(*nbytes);
  uint64_t requested = 0;
  if (__builtin_mul_overflow(static_cast<uint64_t>(n), static_cast<uint64_t>(elem), &requested))
    requested = UINT64_MAX;
  throw OutOfMemoryError(detail::str_cat(op, ": a tensor of shape ", shape_str(sizes), " and dtype ", dtype_name(dtype),
                                         " needs ", n, " x ", elem, " bytes, more than the ", kMaxAllocationBytes,
                                         " a 64-bit offset can address; cannot allocate it on ", device.str()),
                         requested, device.str());
}

Tensor new_contiguous(const Shape& sizes, DType dtype, Device device, const char* op) {
  auto storage = std::make_shared<StorageImpl>(storage_bytes(sizes, dtype, device, op), device);
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
  PRECIS_CHECK(defined(), "detach: the input tensor is undefined (a default-constructed Tensor holds no data); pass "
               "a tensor made by a factory (empty, zeros, ...) or returned by an op");
  return detail::make_alias(*this, sizes(), strides(), storage_offset());
}

bool Tensor::is_pinned() const {
  if (!defined()) return false;
  const Allocator* a = impl()->storage()->allocator();
  return a != nullptr && a->is_pinned();
}

std::string Tensor::describe() const {
  if (!defined()) return "(undefined)";
  return shape_str(sizes()) + " " + std::string(dtype_name(dtype())) + " " + device().str();
}

}  // namespace precis
