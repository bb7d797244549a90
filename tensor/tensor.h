#pragma once
// precis::Tensor: a cheap, shared handle to a TensorImpl (copying a Tensor shares the data, as in
// PyTorch). Views (view, transpose, slice, expand, ...) share storage and are differentiable.
// Member functions that compute (to, clone, operators) dispatch through the op table; see
// ops/functional.h for the full functional API.
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <iosfwd>
#include <memory>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/half.h"
#include "tensor/scalar.h"
#include "tensor/tensor_impl.h"

namespace precis {

namespace autograd {
class Node;
}

/// dtype / device / requires_grad for factories: `zeros({2, 3}, {.dtype = DType::f64})`.
struct TensorOptions {
  DType dtype = DType::f32;        ///< element type
  Device device = Device::cpu();   ///< where the storage lives
  bool requires_grad = false;      ///< whether the new tensor is a leaf that records gradients
};

/// C++ element type for a dtype: CType<DType::f32> is float, CType<DType::boolean> is bool.
template <typename T> constexpr DType dtype_of();
template <> constexpr DType dtype_of<float>() { return DType::f32; }
template <> constexpr DType dtype_of<double>() { return DType::f64; }
template <> constexpr DType dtype_of<Half>() { return DType::f16; }
template <> constexpr DType dtype_of<BFloat16>() { return DType::bf16; }
template <> constexpr DType dtype_of<int64_t>() { return DType::i64; }
template <> constexpr DType dtype_of<int32_t>() { return DType::i32; }
template <> constexpr DType dtype_of<bool>() { return DType::boolean; }

/// The tensor handle: a shared reference to a TensorImpl (storage, layout, dtype, device and
/// autograd state). Copies share the data, as in libtorch; clone() copies it.
class Tensor {
 public:
  Tensor() = default;  ///< An undefined tensor (defined() is false).
  /// A handle to an existing implementation (shares it).
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  /// False for an undefined (default-constructed) handle.
  bool defined() const { return impl_ != nullptr; }
  /// The implementation (null when undefined).
  TensorImpl* impl() const { return impl_.get(); }
  /// The shared implementation pointer.
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }
  /// True when both handles refer to the same TensorImpl.
  bool is_same(const Tensor& other) const { return impl_ == other.impl_; }

  // ---- metadata ---------------------------------------------------------------------------
  /// The size of every dimension.
  const Shape& sizes() const { return checked()->sizes(); }
  /// The stride of every dimension, in elements.
  const Shape& strides() const { return checked()->strides(); }
  /// Size of `dim`; negative dims count from the end.
  int64_t size(int64_t dim) const;
  /// Stride of `dim` in elements; negative dims count from the end.
  int64_t stride(int64_t dim) const;
  /// The number of dimensions.
  int64_t dim() const { return static_cast<int64_t>(sizes().size()); }
  /// The number of elements.
  int64_t numel() const { return checked()->numel(); }
  /// The element type.
  DType dtype() const { return checked()->dtype(); }
  /// The device of the storage.
  Device device() const { return checked()->device(); }
  /// Offset of the first element in the storage, in elements.
  int64_t storage_offset() const { return checked()->offset(); }
  /// Whether the elements are dense in row-major order.
  bool is_contiguous() const { return checked()->is_contiguous(); }
  /// Whether the dtype is f64, f32, f16 or bf16.
  bool is_floating_point() const { return is_floating(dtype()); }
  /// Bytes per element.
  size_t element_size() const { return precis::element_size(dtype()); }
  /// "[2, 3] f32 cpu": the description used in every error message.
  std::string describe() const;

  /// Address of the first element (device memory for a CUDA tensor; null when the storage holds
  /// no bytes); aliases the storage, valid while a tensor holds it. ValueError on an undefined
  /// tensor.
  void* data_ptr() const { return checked()->data(); }
  /// The same, typed: DTypeError unless T is the tensor's element type (Half for f16, ...).
  template <typename T> T* data_ptr() const {
    PRECIS_CHECK_DTYPE(dtype_of<T>() == dtype(), "data_ptr<", dtype_name(dtype_of<T>()),
                       ">() called on a tensor of dtype ", dtype_name(dtype()));
    return static_cast<T*>(data_ptr());
  }

  /// The storage shared with views.
  const Storage& storage() const { return checked()->storage(); }

  /// The in-place modification counter shared with views (autograd checks saved tensors with it).
  uint32_t version() const { return checked()->version_counter()->value.load(std::memory_order_relaxed); }
  /// Marks an in-place modification (done by every in-place op).
  void bump_version() const { checked()->version_counter()->value.fetch_add(1, std::memory_order_relaxed); }

  // ---- views (share storage; differentiable) ---------------------------------------------------
  /// Same data, new shape; one size may be -1. Requires view-compatible strides (else use reshape).
  Tensor view(const Shape& sizes) const;
  /// view() when possible, otherwise a contiguous copy.
  Tensor reshape(const Shape& sizes) const;
  /// Dims start_dim..end_dim merged into one (a view when possible).
  Tensor flatten(int64_t start_dim = 0, int64_t end_dim = -1) const;
  /// Swaps two dims (a view).
  Tensor transpose(int64_t dim0, int64_t dim1) const;
  /// Transpose of a 2-D tensor (0-D and 1-D are returned as they are).
  Tensor t() const;
  /// Reorders the dims: result dim i is this tensor's dims[i] (a view).
  Tensor permute(const Shape& dims) const;
  /// Elements start, start+step, ... < end along dim (PyTorch's x[..., start:end:step]); step > 0.
  Tensor slice(int64_t dim, int64_t start, int64_t end, int64_t step = 1) const;
  /// Elements start .. start+length-1 along dim (a view).
  Tensor narrow(int64_t dim, int64_t start, int64_t length) const;
  /// Removes `dim` by taking index `index` along it.
  Tensor select(int64_t dim, int64_t index) const;
  /// Broadcasts size-1 dims to `sizes` (-1 keeps a size); stride 0, no copy.
  Tensor expand(const Shape& sizes) const;
  /// expand() to other's sizes.
  Tensor expand_as(const Tensor& other) const { return expand(other.sizes()); }
  /// Removes every size-1 dim (a view).
  Tensor squeeze() const;
  /// Removes `dim` when its size is 1 (a view; unchanged otherwise).
  Tensor squeeze(int64_t dim) const;
  /// Inserts a size-1 dim at `dim` (a view).
  Tensor unsqueeze(int64_t dim) const;
  /// This tensor if contiguous, else a contiguous copy.
  Tensor contiguous() const;

  // ---- copies and conversion ------------------------------------------------------------------
  /// A new tensor with a copy of the data (differentiable).
  Tensor clone() const;
  /// Converts the dtype (differentiable; the gradient is cast back). Returns *this when equal. The
  /// result keeps a dense non-row-major layout of *this (transposed, channels-last), as PyTorch's
  /// preserve_format does; otherwise it is contiguous.
  Tensor to(DType dtype) const;
  /// Moves to a device (differentiable). Returns *this when equal. With non_blocking, a copy from
  /// pinned host memory (pin_memory()) to a CUDA device is queued on the device's copy stream and
  /// the call returns at once; work queued afterwards on the device's current stream waits for
  /// the copy, so the result can be used right away. With non_blocking, a copy from a CUDA
  /// device to the CPU lands in pinned host memory and stays queued on the device's current
  /// stream: as in PyTorch, the host must not read the result (data_ptr, item, to_vector, CPU
  /// ops) before precis::cuda::synchronize(index) (core/synchronize.h) has returned. Any other copy
  /// ignores non_blocking and is complete when the call returns (a copy from pageable memory
  /// cannot overlap).
  Tensor to(Device device, bool non_blocking = false) const;
  /// to(Device::cpu()).
  Tensor cpu() const { return to(Device::cpu()); }
  /// A copy of this CPU tensor in pinned (page-locked) host memory, from which to(cuda,
  /// /*non_blocking=*/true) copies asynchronously; *this when it is pinned already. Contiguous,
  /// differentiable like clone(). Throws DeviceError for a tensor not on the CPU, and when pinned
  /// memory cannot be had (a build without CUDA, or no visible CUDA device).
  Tensor pin_memory() const;
  /// Whether the storage is pinned host memory (from pin_memory()). Never throws.
  bool is_pinned() const;
  /// Same data, cut from the graph (requires_grad false); shares the version counter.
  Tensor detach() const;
  /// The single value of a one-element tensor, converted to T.
  template <typename T> T item() const;
  /// All values in row-major order, converted to T (copies to the CPU first if needed).
  template <typename T> std::vector<T> to_vector() const;

  // ---- in-place (bump the version) ------------------------------------------------------------
  /// Sets every element to value.
  Tensor& fill_(Scalar value);
  /// Sets every element to 0.
  Tensor& zero_() { return fill_(0.0); }
  /// Copies src into this tensor, broadcasting src and converting dtype and device. non_blocking:
  /// as for to(device, non_blocking) — asynchronous only from pinned host memory to a CUDA device,
  /// and from a CUDA device into a pinned CPU tensor (read it after precis::cuda::synchronize).
  Tensor& copy_(const Tensor& src, bool non_blocking = false);

  // ---- autograd ----------------------------------------------------------------------------
  /// Whether gradients flow to (leaf) or through this tensor.
  bool requires_grad() const;
  /// Makes a leaf require (or stop requiring) gradients. Only floating tensors can require grad.
  Tensor& requires_grad_(bool requires_grad = true);
  /// The accumulated gradient, undefined when there is none.
  Tensor grad() const;
  /// Replaces the accumulated gradient (undefined: clears it).
  void set_grad(const Tensor& grad) const;
  /// True for tensors not produced by a recorded op (user-created, or requires_grad false).
  bool is_leaf() const;
  /// The node that produced this tensor, or null for leaves.
  std::shared_ptr<autograd::Node> grad_fn() const;
  /// Runs backward from this tensor. `gradient` defaults to 1 for a one-element tensor.
  void backward(const Tensor& gradient = Tensor(), bool retain_graph = false) const;
  /// Keeps .grad for a non-leaf tensor after backward.
  void retain_grad() const;
  /// Calls hook(grad) when this tensor's gradient is computed; a defined return value replaces
  /// the gradient. Returns a handle for remove_hook.
  int register_hook(std::function<Tensor(const Tensor&)> hook) const;
  /// Removes a hook that register_hook returned the handle of.
  void remove_hook(int handle) const;
  /// For a leaf: calls hook(tensor) after its .grad has been accumulated.
  int register_post_accumulate_grad_hook(std::function<void(const Tensor&)> hook) const;

  // ---- PyTorch-style shorthands for functions in ops/functional.h ----------------------------
  /// The sizes (PyTorch's x.shape).
  const Shape& shape() const { return sizes(); }
  /// precis::sum over every element, one dim, or several: x.sum(), x.sum(1), x.sum({0, 2}, true)
  /// (an empty list, as in precis::sum, reduces every dim).
  Tensor sum() const;
  /// precis::sum over `dim` (kept as size 1 when keepdim).
  Tensor sum(int64_t dim, bool keepdim = false) const;
  /// precis::sum over `dims` (an empty list: every dim).
  Tensor sum(std::initializer_list<int64_t> dims, bool keepdim = false) const;
  /// precis::sum over `dims` (an empty list: every dim).
  Tensor sum(const std::vector<int64_t>& dims, bool keepdim = false) const;
  /// precis::mean, with the same forms as sum.
  Tensor mean() const;
  /// precis::mean over `dim`.
  Tensor mean(int64_t dim, bool keepdim = false) const;
  /// precis::mean over `dims` (an empty list: every dim).
  Tensor mean(std::initializer_list<int64_t> dims, bool keepdim = false) const;
  /// precis::mean over `dims` (an empty list: every dim).
  Tensor mean(const std::vector<int64_t>& dims, bool keepdim = false) const;
  /// precis::argmax: x.argmax() (into the flattened tensor), x.argmax(1).
  Tensor argmax() const;
  /// precis::argmax along `dim`.
  Tensor argmax(int64_t dim, bool keepdim = false) const;

  // ---- arithmetic shorthands (see ops/functional.h) ----------------------------------------
  /// precis::neg.
  Tensor operator-() const;
  /// In-place precis::add (other broadcasts to this tensor's shape). As in PyTorch, a result of a
  /// higher kind than this tensor (floating into an integer tensor, a number into a bool one) is
  /// a DTypeError, not a truncation; a wider floating result is rounded to this tensor's dtype.
  Tensor& operator+=(const Tensor& other);
  /// In-place precis::sub (the rules of operator+=).
  Tensor& operator-=(const Tensor& other);
  /// In-place precis::mul (the rules of operator+=).
  Tensor& operator*=(const Tensor& other);
  /// In-place precis::div (the rules of operator+=: dividing an integer tensor is a DTypeError).
  Tensor& operator/=(const Tensor& other);
  /// In-place precis::add of a scalar (`x += 0.5`; the rules of operator+=).
  Tensor& operator+=(Scalar other);
  /// In-place precis::sub of a scalar.
  Tensor& operator-=(Scalar other);
  /// In-place precis::mul by a scalar.
  Tensor& operator*=(Scalar other);
  /// In-place precis::div by a scalar.
  Tensor& operator/=(Scalar other);

  /// Printable form: values (summarised when large), shape, dtype, device, grad_fn.
  std::string str() const;

 private:
  TensorImpl* checked() const {
    PRECIS_CHECK(impl_ != nullptr, "operation on an undefined tensor");
    return impl_.get();
  }
  std::shared_ptr<TensorImpl> impl_;
};

std::ostream& operator<<(std::ostream& os, const Tensor& t);

Tensor operator+(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a, const Tensor& b);
Tensor operator*(const Tensor& a, const Tensor& b);
Tensor operator/(const Tensor& a, const Tensor& b);
Tensor operator+(const Tensor& a, Scalar b);
Tensor operator-(const Tensor& a, Scalar b);
Tensor operator*(const Tensor& a, Scalar b);
Tensor operator/(const Tensor& a, Scalar b);
Tensor operator+(Scalar a, const Tensor& b);
Tensor operator-(Scalar a, const Tensor& b);
Tensor operator*(Scalar a, const Tensor& b);
Tensor operator/(Scalar a, const Tensor& b);

// Explicit instantiations live in tensor/tensor.cpp for every dtype's C++ type.
extern template float Tensor::item<float>() const;
extern template double Tensor::item<double>() const;
extern template int64_t Tensor::item<int64_t>() const;
extern template int32_t Tensor::item<int32_t>() const;
extern template bool Tensor::item<bool>() const;
extern template std::vector<float> Tensor::to_vector<float>() const;
extern template std::vector<double> Tensor::to_vector<double>() const;
extern template std::vector<int64_t> Tensor::to_vector<int64_t>() const;
extern template std::vector<int32_t> Tensor::to_vector<int32_t>() const;
/// to_vector for bool: std::vector<bool> is a bit vector, so it has its own definition.
template <> std::vector<bool> Tensor::to_vector<bool>() const;

}  // namespace precis

namespace precis::detail {
/// A tensor sharing base's storage and version counter with new sizes, strides and offset (in
/// elements). No autograd: the differentiable view functions (ops/views.cpp) wrap this.
Tensor make_alias(const Tensor& base, Shape sizes, Shape strides, int64_t offset);
/// A new contiguous tensor on uninitialised memory from `device`'s allocator: what `empty` does
/// without autograd, for the layers below the ops (readers). Throws OutOfMemoryError, naming `op`,
/// when the byte size exceeds what a 64-bit offset addresses.
Tensor new_contiguous(const Shape& sizes, DType dtype, Device device, const char* op = "empty");
/// Checks and wraps a dim index for a tensor of `ndim` dims (negative counts from the end).
int64_t wrap_dim(int64_t dim, int64_t ndim, const char* op, const Tensor& t);
}  // namespace precis::detail
