// Tensor members that compute: copies, conversions, in-place fill/copy, the operators and the
// PyTorch-style reductions (x.sum(1), x.argmax(1)), and argmax. The differentiable copies (cast,
// to_device, clone, pin_memory) are declared for the op front-end (ops/frontend.h).
#include <optional>

#include "core/cuda_backend.h"
#include "ops/backends.h"
#include "ops/detail/broadcast.h"
#include "ops/device_asserts.h"
#include "ops/frontend.h"
#include "ops/functional.h"
#include "ops/contracts/kernels.h"
#include "ops/profiler.h"
#include "ops/detail/scalar_check.h"
#include "tensor/factory.h"

namespace precis {

using autograd::TensorList;

using detail::Domain;
using detail::OpContext;

namespace {
DeviceCopyFn* g_device_copy = nullptr;

bool shares_memory(const Tensor& a, const Tensor& b) {
  return a.defined() && b.defined() && a.impl()->storage() == b.impl()->storage();
}

// Whether an in-place write of `src` (null: a constant, fill_'s) into self must give self a new
// autograd history (autograd::rebase_history): under grad mode, when self or src requires grad.
// Refused then: a leaf that requires grad (its .grad would no longer be the gradient of what it
// holds; optimizers write under NoGradGuard) and a view of memory another tensor holds (that
// tensor's history would have to change with it, PyTorch's CopySlices, which precis does not have).
bool inplace_takes_history(const char* op, const Tensor& self, const Tensor* src = nullptr) {
  require_defined(op, self, "destination");
  if (!is_grad_enabled()) return false;
  const bool self_grad = self.requires_grad(), src_grad = src != nullptr && src->requires_grad();
  if (!self_grad && !src_grad) return false;
  PRECIS_CHECK_T(StateError, !(self_grad && self.is_leaf()), op, ": in-place modification of a leaf that requires "
                 "grad (", self.describe(), ") under grad mode; its .grad would no longer be the gradient of the "
                 "values it holds. Run it under NoGradGuard (as optimizers do) or modify a clone()");
  // A view that alone holds its memory (an op's result reshaped on its way out) is no view of
  // anything a user can reach, so it takes a history like any tensor.
  const bool view_of_shared = self.impl()->is_view() && self.impl()->storage().use_count() > 1;
  PRECIS_CHECK_T(StateError, !view_of_shared, op, ": in-place modification of a view (", self.describe(), ") ",
                 self_grad ? "that requires grad" : "with a value that requires grad",
                 " is not supported under grad mode (the tensor it views would need a new history too); "
                 "build the result out of place (cat, where, masked_fill), write into a clone(), "
                 "or run it under NoGradGuard");
  return true;
}

// Several elements of an expanded destination share one memory location: which value lands there
// would depend on the order of the (parallel) writes. PyTorch refuses this too.
void check_not_expanded(const char* op, const Tensor& dst) {
  for (int64_t d = 0; d < dst.dim(); ++d)
    PRECIS_CHECK(!(dst.strides()[d] == 0 && dst.sizes()[d] > 1), op, ": the destination ", dst.describe(),
                 " is expanded (stride 0 in dim ", d, "), so several of its elements share memory; write into a "
                 "clone() or contiguous() of it instead");
}

// dst (any strides) = src converted; same device; src broadcast to dst's shape.
void copy_same_device(const Tensor& dst, const Tensor& src) {
  kernel<kernels::CopyKernel>(OpId::copy, dst.device().type, dst.dtype())(dst, src.expand(dst.sizes()));
}
}  // namespace

void set_device_copy(DeviceCopyFn* fn) { g_device_copy = fn; }
// The CUDA backend registers the copy when its kernels are registered, on the first CUDA kernel
// lookup; a copy to a device can be a process's first op (it looks nothing up), so it does that too.
DeviceCopyFn* device_copy() {
  init_cuda_kernels();
  return g_device_copy;
}

Tensor& Tensor::fill_(Scalar value) {
  const bool history = inplace_takes_history("fill_", *this);
  check_scalar_fits("fill_", "fill value", value, dtype(), "the tensor " + describe());
  kernel<kernels::FillKernel>(OpId::fill, device().type, dtype())(*this, value);
  bump_version();
  if (history) autograd::rebase_history(*this, Tensor(), /*overwrite=*/true, "fill_");
  return *this;
}

namespace {
// True when `from` broadcasts to exactly `to` (trailing dims equal or 1, no extra dims).
bool broadcasts_to(const Shape& from, const Shape& to) {
  if (from.size() > to.size()) return false;
  for (size_t i = 0; i < from.size(); ++i) {
    const int64_t f = from[from.size() - 1 - i], t = to[to.size() - 1 - i];
    if (f != t && f != 1) return false;
  }
  return true;
}
}  // namespace

Tensor& Tensor::copy_(const Tensor& src, bool non_blocking) {
  require_defined("copy_", *this, "destination");
  // An undefined source is a bad value, not a shape mismatch (PyTorch: "Expected a proper Tensor").
  PRECIS_CHECK(src.defined(), "copy_: the source tensor is undefined (a default-constructed Tensor holds no data), "
               "destination ", describe(), "; pass a tensor made by a factory or returned by an op");
  const bool history = inplace_takes_history("copy_", *this, &src);
  PRECIS_CHECK_SHAPE(broadcasts_to(src.sizes(), sizes()), "copy_: the source ", src.describe(),
                     " does not broadcast to the destination ", describe());
  check_not_expanded("copy_", *this);
  {
    NoGradGuard no_grad;  // the broadcast and conversions below are internal
    if (src.device() == device()) {
      // A source sharing the destination's memory in another layout (a.copy_(a.t())) would be
      // read after parts of it were written: copy it out first. PyTorch refuses such a copy.
      const bool same_window = shares_memory(*this, src) && src.storage_offset() == storage_offset() &&
                               src.strides() == strides() && src.sizes() == sizes();
      copy_same_device(*this, shares_memory(*this, src) && !same_window ? src.clone() : src);
    } else {
      // Cross-device: convert and broadcast on the source device, move contiguous bytes, then
      // scatter into this tensor's strides on its own device if needed.
      Tensor s = src.expand(sizes()).to(dtype()).contiguous();
      DeviceCopyFn* fn = device_copy();
      PRECIS_CHECK_DEVICE(fn != nullptr, "copy_: cannot copy from ", src.describe(), " to ", describe(), ": ",
                          cuda_backend_unavailable_reason());
      // Not an op-table kernel, so the profile's to_device row is opened here, on the clock of the
      // device side of the copy (its stream holds the copy).
      std::optional<profiler::Scope> profile;
      if (profiler::enabled()) {
        const Device d = device().is_cpu() ? src.device() : device();
        profile.emplace(OpId::to_device, d.type, static_cast<int>(d.index));
      }
      // A blocking download is where the host reads the device anyway: the device-side index
      // checks pending there are reported after it (ops/device_asserts.h).
      const bool blocking_download = s.device().is_cuda() && device().is_cpu() && !(non_blocking && is_pinned());
      std::optional<detail::DeviceAssertProbe> probe;
      if (blocking_download) probe.emplace(s.device());
      if (is_contiguous()) {
        fn(*this, s, non_blocking);
      } else {
        Tensor tmp = empty(sizes(), {.dtype = dtype(), .device = device()});
        fn(tmp, s, non_blocking);
        copy_same_device(*this, tmp);
      }
      if (probe) probe->report();
    }
  }
  bump_version();
  if (history) autograd::rebase_history(*this, src, /*overwrite=*/true, "copy_");
  return *this;
}

namespace {

// The copies below are what a precision policy casts with: they declare precision_hook = false,
// so the hook never sees its own casts (they never ran it).

// x converted to another dtype; the gradient is converted back.
struct Cast {
  static constexpr OpId id = OpId::cast;
  static constexpr Domain domain = Domain::any;
  static constexpr bool precision_hook = false;
  struct Saved {
    DType src{};
  };
  static Tensor forward(OpContext<Saved>& ctx, const std::array<Tensor, 1>& in, DType dtype) {
    const Tensor& x = in[0];
    // An integer or bool result is not differentiable: it simply does not require grad (PyTorch's
    // x.long(), argmax-style bookkeeping on a tensor in the graph).
    if (!is_floating(dtype)) ctx.grad = false;
    // The result keeps x's dense memory order (PyTorch's preserve_format): a channels-last
    // activation cast by autocast stays channels-last for the conv that reads it.
    Tensor out = empty_elementwise(x.sizes(), dtype, x.device(), {&x}, "cast");
    kernel<kernels::CopyKernel>(OpId::copy, x.device().type, dtype)(out, x);
    if (ctx.grad) ctx.saved = {x.dtype()};
    return out;
  }
  static TensorList backward(const Saved& s, const TensorList& g) { return {g[0].to(s.src)}; }
};

// x moved to another device; the gradient is moved back.
struct ToDevice {
  static constexpr OpId id = OpId::to_device;
  static constexpr Domain domain = Domain::any;
  static constexpr bool precision_hook = false;
  struct Saved {
    Device src;
  };
  static Tensor forward(OpContext<Saved>& ctx, const std::array<Tensor, 1>& in, Device device, bool non_blocking) {
    const Tensor& x = in[0];
    Tensor out;
    if (non_blocking && device.is_cpu() && x.device().is_cuda()) {
      // Lands in pinned memory, so the device copy can stay queued (the caller synchronises:
      // precis::cuda::synchronize, see tensor.h).
      const size_t nbytes = static_cast<size_t>(x.numel()) * x.element_size();  // fits: the device holds it
      out = Tensor(std::make_shared<TensorImpl>(std::make_shared<StorageImpl>(nbytes, pinned_allocator()), x.sizes(),
                                                contiguous_strides(x.sizes()), 0, x.dtype()));
    } else {
      out = empty(x.sizes(), {.dtype = x.dtype(), .device = device});
    }
    {
      NoGradGuard no_grad;
      out.copy_(x, non_blocking);
    }
    if (ctx.grad) ctx.saved = {x.device()};
    return out;
  }
  static TensorList backward(const Saved& s, const TensorList& g) { return {g[0].to(s.src)}; }
};

// clone (Pinned = false) and pin_memory (true): a copy into new memory (pinned host memory for
// pin_memory); the gradient is the incoming one.
template <bool Pinned>
struct Copy {
  static constexpr OpId id = OpId::clone;
  static constexpr Domain domain = Domain::any;
  static constexpr bool precision_hook = false;
  struct Saved {};
  static Tensor forward(OpContext<Saved>&, const std::array<Tensor, 1>& in) {
    const Tensor& x = in[0];
    Tensor out;
    if constexpr (Pinned) {
      Allocator& pinned = pinned_allocator();  // DeviceError without CUDA or without a device
      const size_t nbytes = static_cast<size_t>(x.numel()) * x.element_size();  // numel fits: a CPU tensor has it
      auto storage = std::make_shared<StorageImpl>(nbytes, pinned);
      out = Tensor(
          std::make_shared<TensorImpl>(std::move(storage), x.sizes(), contiguous_strides(x.sizes()), 0, x.dtype()));
    } else {
      out = empty(x.sizes(), {.dtype = x.dtype(), .device = x.device()});
    }
    copy_same_device(out, x);
    return out;
  }
  static TensorList backward(const Saved&, const TensorList& g) { return {g[0]}; }
};

}  // namespace

Tensor cast(const Tensor& x, DType dtype) {
  require_defined("cast", x);
  if (x.dtype() == dtype) return x;
  return detail::call<Cast>({x}, dtype);
}

Tensor Tensor::to(DType dtype) const {
  require_defined("to", *this);
  return cast(*this, dtype);
}

Tensor Tensor::to(Device device, bool non_blocking) const {
  require_defined("to", *this);
  if (this->device() == device) return *this;
  return detail::call<ToDevice>({*this}, device, non_blocking);
}

Tensor Tensor::pin_memory() const {
  require_defined("pin_memory", *this);
  PRECIS_CHECK_DEVICE(device().is_cpu(), "pin_memory: only CPU tensors can be pinned; got ", describe(),
                      " (pin a tensor before moving it to a device: x.pin_memory().to(device, true))");
  if (is_pinned()) return *this;
  return detail::call<Copy<true>>({*this});
}

Tensor Tensor::clone() const {
  require_defined("clone", *this);
  return detail::call<Copy<false>>({*this});
}

// ---- reductions as members, and argmax -------------------------------------------------------------
Tensor Tensor::sum() const { return precis::sum(*this); }
Tensor Tensor::sum(int64_t dim, bool keepdim) const { return precis::sum(*this, {dim}, keepdim); }
Tensor Tensor::sum(std::initializer_list<int64_t> dims, bool keepdim) const {
  return precis::sum(*this, std::vector<int64_t>(dims), keepdim);
}
Tensor Tensor::sum(const std::vector<int64_t>& dims, bool keepdim) const { return precis::sum(*this, dims, keepdim); }
Tensor Tensor::mean() const { return precis::mean(*this); }
Tensor Tensor::mean(int64_t dim, bool keepdim) const { return precis::mean(*this, {dim}, keepdim); }
Tensor Tensor::mean(std::initializer_list<int64_t> dims, bool keepdim) const {
  return precis::mean(*this, std::vector<int64_t>(dims), keepdim);
}
Tensor Tensor::mean(const std::vector<int64_t>& dims, bool keepdim) const { return precis::mean(*this, dims, keepdim); }
Tensor Tensor::argmax() const { return precis::argmax(*this); }
Tensor Tensor::argmax(int64_t dim, bool keepdim) const { return precis::argmax(*this, dim, keepdim); }

Tensor argmax(const Tensor& x, std::optional<int64_t> dim, bool keepdim) {
  PRECIS_CHECK(x.defined(), "argmax: undefined tensor");
  NoGradGuard no_grad;  // an index is not differentiable; no graph for max's values
  if (!dim) {
    Tensor index = std::get<1>(max(x.reshape({-1}), 0, false));
    return keepdim ? index.reshape(Shape(static_cast<size_t>(x.dim()), 1)) : index;
  }
  return std::get<1>(max(x, *dim, keepdim));
}

// ---- operators ----------------------------------------------------------------------------------
Tensor Tensor::operator-() const { return neg(*this); }

namespace {
// bool < integer < floating: PyTorch's in-place rule lets a result into a tensor of its kind or
// a higher one only.
int kind_rank(DType t) { return t == DType::boolean ? 0 : is_integral(t) ? 1 : 2; }

Tensor& assign_inplace(Tensor& self, const Tensor& result, const char* op) {
  const bool history = inplace_takes_history(op, self, &result);  // named as the user wrote it, not as copy_
  check_not_expanded(op, self);
  PRECIS_CHECK_SHAPE(result.sizes() == self.sizes(), op, ": the result of shape ", shape_str(result.sizes()),
                     " does not fit in-place into a tensor ", self.describe());
  PRECIS_CHECK_DTYPE(kind_rank(result.dtype()) <= kind_rank(self.dtype()), op, ": the result is ",
                     dtype_name(result.dtype()), ", which cannot be stored in place into ", self.describe(),
                     " without truncation; convert first, e.g. x = x.to(DType::", dtype_name(result.dtype()),
                     "), or use the out-of-place operator");
  {
    NoGradGuard no_grad;  // the data only: result's graph already reaches self's old history
    self.copy_(result);
  }
  if (history) autograd::rebase_history(self, result, /*overwrite=*/false, op);
  return self;
}

// x *= o and x /= o: mul and div keep self for o's gradient and o for self's, and the write into
// self's memory would change what they kept. So under grad mode they keep a copy of self when o
// takes a gradient (PyTorch saves self's original value the same way), and a copy of o when o is
// self or a view of its memory (x *= x, x *= x.t()) and self takes a gradient. The copies keep
// their originals' values, layout and graph (a detached o stays detached).
Tensor mul_into_self(const Tensor& self, const Tensor& o, bool divide) {
  const bool grad = is_grad_enabled();
  const Tensor a = grad && o.requires_grad() ? self.clone() : self;
  const Tensor b = grad && self.requires_grad() && shares_memory(self, o) ? o.clone() : o;
  return divide ? div(a, b) : mul(a, b);
}
}  // namespace

Tensor& Tensor::operator+=(const Tensor& o) { return assign_inplace(*this, add(*this, o), "operator+="); }
Tensor& Tensor::operator-=(const Tensor& o) { return assign_inplace(*this, sub(*this, o), "operator-="); }
Tensor& Tensor::operator*=(const Tensor& o) { return assign_inplace(*this, mul_into_self(*this, o, false), "operator*="); }
Tensor& Tensor::operator/=(const Tensor& o) { return assign_inplace(*this, mul_into_self(*this, o, true), "operator/="); }
Tensor& Tensor::operator+=(Scalar o) { return assign_inplace(*this, add(*this, o), "operator+="); }
Tensor& Tensor::operator-=(Scalar o) { return assign_inplace(*this, sub(*this, o), "operator-="); }
Tensor& Tensor::operator*=(Scalar o) { return assign_inplace(*this, mul(*this, o), "operator*="); }
Tensor& Tensor::operator/=(Scalar o) { return assign_inplace(*this, div(*this, o), "operator/="); }

Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
Tensor operator+(const Tensor& a, Scalar b) { return add(a, b); }
Tensor operator-(const Tensor& a, Scalar b) { return sub(a, b); }
Tensor operator*(const Tensor& a, Scalar b) { return mul(a, b); }
Tensor operator/(const Tensor& a, Scalar b) { return div(a, b); }
Tensor operator+(Scalar a, const Tensor& b) { return add(b, a); }
Tensor operator-(Scalar a, const Tensor& b) { return add(neg(b), a); }
Tensor operator*(Scalar a, const Tensor& b) { return mul(b, a); }
Tensor operator/(Scalar a, const Tensor& b) {
  return div(full(b.sizes(), a, {.dtype = is_floating(b.dtype()) ? b.dtype() : DType::f32, .device = b.device()}), b);
}

}  // namespace precis
