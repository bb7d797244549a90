#pragma once
// The object behind a Tensor handle: a strided window (sizes, strides, offset in elements) onto a
// Storage, its dtype, a version counter shared by all views of the storage, and a pointer to
// autograd metadata (null until autograd needs it).
#include <atomic>
#include <cstdint>
#include <iosfwd>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "tensor/storage.h"

namespace precis {

namespace autograd {
struct AutogradMeta;
}

using Shape = std::vector<int64_t>;

/// The base of what a TensorImpl keeps for autograd (autograd::AutogradMeta). The tensor layer only
/// owns and destroys it; autograd creates and reads it (the accessors below are defined there).
struct AutogradMetaInterface {
  virtual ~AutogradMetaInterface();
};

/// Counts in-place modifications of a storage; shared by every view of it. Autograd records the
/// version of each tensor it saves and refuses to use one that changed since.
struct VersionCounter {
  std::atomic<uint32_t> value{0};  ///< bumped by each in-place write (relaxed atomic)
  /// Bumped when an in-place write under grad mode gives a tensor of this storage a new autograd
  /// history (autograd::rebase_history): the views made before it still point at the old one.
  std::atomic<uint32_t> history{0};
};

/// Shared by every Tensor handle to it (a Tensor holds a shared_ptr<TensorImpl>). Layout fields
/// change only through set_data; the data itself is unsynchronised (concurrent writers race).
class TensorImpl {
 public:
  /// A window onto `storage`; strides and offset in elements. Computes numel (ShapeError on a
  /// negative size or an int64 overflow) and contiguity. The window is not checked against the
  /// storage's size: callers (views, factories) guarantee it fits. `version`: the counter of the
  /// tensor this one views; null makes a fresh one.
  TensorImpl(Storage storage, Shape sizes, Shape strides, int64_t offset, DType dtype,
             std::shared_ptr<VersionCounter> version = nullptr);
  ~TensorImpl();

  const Storage& storage() const { return storage_; }  ///< the buffer, shared with views
  const Shape& sizes() const { return sizes_; }  ///< one size per dimension (empty: 0-d)
  const Shape& strides() const { return strides_; }  ///< in elements, one per dimension
  int64_t offset() const { return offset_; }  ///< of element [0, 0, ...] in the storage, in elements
  DType dtype() const { return dtype_; }  ///< the element type
  Device device() const { return storage_->device(); }  ///< the storage's device
  int64_t numel() const { return numel_; }  ///< the product of sizes (1 for 0-d)
  /// Row-major dense: each stride is the product of the later sizes, size-1 dimensions excepted;
  /// a tensor with no elements is contiguous.
  bool is_contiguous() const { return contiguous_; }
  /// Address of element [0, 0, ...]. Null when the storage has no bytes (an empty tensor): its
  /// offset is not added then, since arithmetic on a null pointer is undefined behaviour (a slice
  /// or cat of empty tensors keeps a non-zero offset), and no element is ever read through it.
  void* data() const {
    char* base = static_cast<char*>(storage_->data());
    if (base == nullptr) return nullptr;
    return base + offset_ * static_cast<int64_t>(element_size(dtype_));
  }

  /// The in-place modification counter, shared with every view of this data.
  const std::shared_ptr<VersionCounter>& version_counter() const { return version_; }

  /// Marks this tensor as a differentiable view (made by a view op: view, permute, slice, expand)
  /// and notes its storage's history count, which stale_view() compares with.
  void mark_view() {
    view_ = true;
    view_history_ = version_->history.load(std::memory_order_relaxed);
  }
  /// Whether a view op made this tensor (mark_view).
  bool is_view() const { return view_; }
  /// Whether this is a view whose storage was given a new autograd history (an in-place write
  /// under grad mode into the tensor it views) after the view was made: its own grad_fn points at
  /// the history that write replaced.
  bool stale_view() const { return view_ && version_->history.load(std::memory_order_relaxed) != view_history_; }

  /// Makes this tensor hold `src`'s data (storage, sizes, strides, offset, dtype, hence device)
  /// while staying the same object: every handle to it, its autograd metadata (requires_grad,
  /// .grad, hooks) and its version counter are kept, and the version is bumped, so a graph or an
  /// autocast cache entry that saved the old data refuses it. PyTorch's `param.data = src`; what
  /// Module::to() uses so optimizers keep their parameters. Views made before keep the old data.
  void set_data(const TensorImpl& src);

  /// Null for tensors autograd has never touched. Defined in autograd/tensor_autograd.cpp.
  autograd::AutogradMeta* autograd_meta() const;
  /// Creates the metadata on first use. Defined in autograd/tensor_autograd.cpp.
  autograd::AutogradMeta& ensure_autograd_meta();
  /// Drops the autograd metadata (requires_grad, .grad, grad_fn, hooks): the tensor becomes a
  /// plain one autograd never touched.
  void reset_autograd_meta();

 private:
  Storage storage_;
  Shape sizes_;
  Shape strides_;
  int64_t offset_;
  int64_t numel_;
  DType dtype_;
  bool contiguous_;
  bool view_ = false;
  uint32_t view_history_ = 0;
  std::shared_ptr<VersionCounter> version_;
  std::unique_ptr<AutogradMetaInterface> autograd_;
};

/// Row-major (C-order) strides for `sizes`. Throws ShapeError where shape_numel does.
Shape contiguous_strides(const Shape& sizes);
/// Product of sizes (1 for a 0-d shape). Throws ShapeError on a negative size, or when the product
/// of the sizes with zeros counted as ones exceeds int64 (checked_numel in core/checked_math.h).
int64_t shape_numel(const Shape& sizes);
/// "[2, 3]".
std::string shape_str(const Shape& sizes);
/// shape_str(sizes): to_string(x.sizes()) == "[2, 3]".
std::string to_string(const Shape& sizes);
/// Writes shape_str(sizes): `std::cout << x.sizes()` prints "[2, 3]". Shape is a std::vector, so
/// argument-dependent lookup does not find this operator: it needs `using namespace precis;` (as
/// the examples have) or code inside namespace precis; to_string works the same way.
std::ostream& operator<<(std::ostream& os, const Shape& sizes);

}  // namespace precis
