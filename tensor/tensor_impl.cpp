#include "tensor/tensor_impl.h"

#include <limits>
#include <ostream>

#include "core/checked_math.h"
#include "core/error.h"

namespace precis {

Shape contiguous_strides(const Shape& sizes) {
  // shape_numel bounds the product of the sizes (zeros counted as ones), so no stride overflows.
  (void)shape_numel(sizes);
  Shape strides(sizes.size());
  int64_t s = 1;
  for (size_t i = sizes.size(); i-- > 0;) {
    strides[i] = s;
    s *= std::max<int64_t>(sizes[i], 1);
  }
  return strides;
}

int64_t shape_numel(const Shape& sizes) {
  const std::optional<int64_t> n = checked_numel(sizes);
  if (n) [[likely]]
    return *n;
  for (int64_t s : sizes) PRECIS_CHECK_SHAPE(s >= 0, "negative dimension size ", s, " in the shape ", shape_str(sizes));
  throw ShapeError(detail::str_cat("the shape ", shape_str(sizes),
                                   " has more elements than fit in 64 bits (the product of its sizes must be at most ",
                                   std::numeric_limits<int64_t>::max(), ")"));
}

std::string shape_str(const Shape& sizes) {
  std::string s = "[";
  for (size_t i = 0; i < sizes.size(); ++i) s += (i ? ", " : "") + std::to_string(sizes[i]);
  return s + "]";
}

std::string to_string(const Shape& sizes) { return shape_str(sizes); }

std::ostream& operator<<(std::ostream& os, const Shape& sizes) { return os << shape_str(sizes); }

namespace {
// Contiguous in the row-major sense; size-1 dims may have any stride.
bool compute_contiguous(const Shape& sizes, const Shape& strides, int64_t numel) {
  if (numel == 0) return true;
  int64_t expected = 1;
  for (size_t i = sizes.size(); i-- > 0;) {
    if (sizes[i] == 1) continue;
    if (strides[i] != expected) return false;
    expected *= sizes[i];
  }
  return true;
}
}  // namespace

TensorImpl::TensorImpl(Storage storage, Shape sizes, Shape strides, int64_t offset, DType dtype,
                       std::shared_ptr<VersionCounter> version)
    : storage_(std::move(storage)),
      sizes_(std::move(sizes)),
      strides_(std::move(strides)),
      offset_(offset),
      numel_(shape_numel(sizes_)),
      dtype_(dtype),
      contiguous_(compute_contiguous(sizes_, strides_, numel_)),
      version_(version ? std::move(version) : std::make_shared<VersionCounter>()) {
  PRECIS_INTERNAL_ASSERT(sizes_.size() == strides_.size(), "sizes and strides differ in length");
}

TensorImpl::~TensorImpl() = default;

void TensorImpl::set_data(const TensorImpl& src) {
  if (&src == this) return;
  storage_ = src.storage_;
  sizes_ = src.sizes_;
  strides_ = src.strides_;
  offset_ = src.offset_;
  numel_ = src.numel_;
  dtype_ = src.dtype_;
  contiguous_ = src.contiguous_;
  version_->value.fetch_add(1, std::memory_order_relaxed);
}

AutogradMetaInterface::~AutogradMetaInterface() = default;

void TensorImpl::reset_autograd_meta() { autograd_.reset(); }

}  // namespace precis
