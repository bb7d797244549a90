#pragma once
// The op table (ops/op_list.def) as C++: OpId, each op's autocast category, and the kernel
// registry that maps (op, device type, dtype) to a kernel function.
#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <typeinfo>
#include <utility>
#include <vector>

#include "core/device.h"
#include "core/dtype.h"
#include "ops/profiler.h"

namespace precis {

/// What autocast does with an op's floating inputs (docs/design/precision.md).
enum class Category : uint8_t { Lower, FP32, Promote, Passthrough, Banned };
/// How an op is implemented: its own kernel (per compute dtype, or per fp8 dtype of its first
/// operand for the fp8 ops), a view (metadata only), or composed of other ops.
enum class OpKind : uint8_t { Kernel, View, Composite, Fp8Kernel };

enum class OpId : uint16_t {
#define PRECIS_OP(name, category, differentiable, kind) name,
#include "ops/op_list.def"
#undef PRECIS_OP
};

inline constexpr int kNumOps = 0
#define PRECIS_OP(name, category, differentiable, kind) +1
#include "ops/op_list.def"
#undef PRECIS_OP
    ;

/// One row of the op table (ops/op_list.def); the rows are static, so references to them stay
/// valid.
struct OpInfo {
  const char* name;     ///< the op's identifier in op_list.def, e.g. "matmul"
  Category category;    ///< autocast's default category (amp::category may override it)
  bool differentiable;  ///< whether the op records a backward node
  OpKind kind;          ///< kernel, view or composite implementation
};

/// The row of `op` in the table.
const OpInfo& op_info(OpId op);
inline const char* op_name(OpId op) { return op_info(op).name; }
const char* category_name(Category c);

// ---- kernel registry --------------------------------------------------------------------------
// Kernels are plain function pointers stored type-erased; each op family fixes its own kernel
// signature (e.g. ops/contracts/kernels.h: UnaryKernel) and looks kernels up with kernel<Fn>().
// Backends fill the registry from an explicit init call (init_backends()), never from static
// initialisers, so that a linker cannot drop a backend.
//
// Each slot also keeps the signature it was registered with (the std::type_info of Fn), and
// kernel<Fn>() checks it: calling a kernel through another function type is undefined behaviour,
// so a family mix-up (say kernel<UnaryKernel> on a BinaryKernel row) must be an InternalError,
// not a call with the wrong arguments. The check is one pointer compare on the hot path.

/// Stores `fn` in the slot with the signature it has; use the typed register_kernel<Fn>() below.
void register_kernel(OpId op, DeviceType device, DType dtype, void* fn, const std::type_info& signature);
/// The registered kernel or nullptr.
void* find_kernel(OpId op, DeviceType device, DType dtype);
/// find_kernel for an optional fused kernel: some ops run one where the backend has it and compose
/// other ops where it has none (linear_gelu, dropout_add, linear_cross_entropy, attention's score
/// pass), and ask with this. nullptr while fused kernels are turned off
/// (detail::set_fused_kernels).
void* find_fused_kernel(OpId op, DeviceType device, DType dtype);
namespace detail {
/// Turns the optional fused kernels off (false) or on (true, the default) for the whole process
/// and returns the previous setting. Off, every op takes the composed path a backend without them
/// takes: what tests compare the fused kernels against, and what the CUDA coverage test must
/// record (its models run on the CPU).
bool set_fused_kernels(bool enabled);
}  // namespace detail
/// dtypes with a kernel for (op, device).
std::vector<DType> registered_dtypes(OpId op, DeviceType device);
/// Throws NotImplementedError naming the op, device and dtype, and listing the dtypes that do
/// have a kernel there.
[[noreturn]] void throw_missing_kernel(OpId op, DeviceType device, DType dtype);
/// Throws InternalError naming the op, device, dtype and both signatures.
[[noreturn]] void throw_kernel_signature_mismatch(OpId op, DeviceType device, DType dtype,
                                                  const std::type_info& registered,
                                                  const std::type_info& requested);

namespace detail {
/// One registry slot: the kernel and the signature it was registered with.
struct KernelSlot {
  void* fn = nullptr;
  const std::type_info* signature = nullptr;
};
/// The slot for (op, device, dtype); fn is nullptr when nothing is registered.
const KernelSlot& kernel_slot(OpId op, DeviceType device, DType dtype);
/// Registers every kernel of `from`'s slots in `to`'s, signatures included (`from`'s backend is
/// initialised first), except the slots of the ops in `except`, left empty. For the tests' fake
/// CUDA device (tests/support/fake_cuda), whose memory is host memory, so the CPU kernels run on
/// it. Call it from a backend's register function only.
void copy_kernels(DeviceType from, DeviceType to, std::span<const OpId> except = {});
}  // namespace detail

namespace detail {
/// The device index of a kernel operand that has one (a defined Tensor), else -1.
template <typename A>
int operand_device_index(const A& a) {
  if constexpr (requires { a.defined(); a.device().index; })
    return a.defined() ? a.device().index : -1;
  else
    return -1;
}
/// The device a kernel call runs on, for the profiler's device clock: its first operand with a
/// device; -1 (the current device) when none has one (e.g. a list of parameters).
template <typename... Args>
int call_device_index(const Args&... args) {
  int index = -1;
  ((index = index >= 0 ? index : operand_device_index(args)), ...);
  return index;
}
}  // namespace detail

/// What kernel<Fn>() returns: the kernel with its op and the device type it was looked up for,
/// called like the function itself. Every op-table kernel call passes here, so this is the
/// profiler's hook (ops/profiler.h): when it records, the call is timed under the op's row, on the
/// device's clock for a device kernel; when it is off, the call costs one relaxed load more than a
/// plain function pointer's.
template <typename Fn>
class KernelRef;

/// KernelRef for a kernel signature R(Args...): calls take the kernel's own arguments.
template <typename R, typename... Args>
class KernelRef<R(Args...)> {
 public:
  using Function = R(Args...);  ///< the kernel family's signature (ops/contracts/kernels.h)
  /// `fn`, the kernel registered for `op` on `device`.
  KernelRef(Function* fn, OpId op, DeviceType device = DeviceType::cpu) noexcept : fn_(fn), op_(op), device_(device) {}
  /// Runs the kernel (timed when the profiler records).
  R operator()(Args... args) const {
    if (!profiler::enabled()) [[likely]]
      return fn_(std::forward<Args>(args)...);
    profiler::Scope scope(op_, device_, device_ == DeviceType::cpu ? -1 : detail::call_device_index(args...));
    return fn_(std::forward<Args>(args)...);
  }
  /// The same kernel, timed under `row` instead of its own op: for an op that runs another op's
  /// kernel as its work (linear_gelu's and linear_cross_entropy's GEMMs on the linear kernel), so
  /// that the time lands in the row its front-end counts the FLOPs in.
  KernelRef timed_as(OpId row) const noexcept { return KernelRef(fn_, row, device_); }
  /// The plain function pointer: calls through it bypass the profiler.
  Function* get() const noexcept { return fn_; }
  /// The op-table row the kernel's calls are timed under: the row it belongs to, or timed_as's.
  OpId op() const noexcept { return op_; }
  /// The device type the kernel was registered for.
  DeviceType device() const noexcept { return device_; }

 private:
  Function* fn_;
  OpId op_;
  DeviceType device_;
};

/// The kernel for (op, device, dtype), callable as Fn; throws NotImplementedError when missing
/// and InternalError when the slot holds another signature.
template <typename Fn>
KernelRef<Fn> kernel(OpId op, DeviceType device, DType dtype) {
  const detail::KernelSlot& slot = detail::kernel_slot(op, device, dtype);
  if (slot.fn == nullptr) throw_missing_kernel(op, device, dtype);
  // type_info objects are normally unique per type, so the address compare decides; == is the
  // portable fallback for a toolchain that emits duplicates.
  if (slot.signature != &typeid(Fn) && *slot.signature != typeid(Fn))
    throw_kernel_signature_mismatch(op, device, dtype, *slot.signature, typeid(Fn));
  return KernelRef<Fn>(reinterpret_cast<Fn*>(slot.fn), op, device);
}

/// Registers `fn` for (op, device, dtype) under the signature Fn; kernel<Fn>() finds it.
template <typename Fn>
void register_kernel(OpId op, DeviceType device, DType dtype, Fn* fn) {
  register_kernel(op, device, dtype, reinterpret_cast<void*>(fn), typeid(Fn));
}

/// Registers the CPU kernels (idempotent, thread-safe). Called on first use of the registry; users
/// never need to call it. The CUDA kernels are registered on the first CUDA lookup, when the CUDA
/// backend library is loaded (core/cuda_backend.h).
void init_backends();

}  // namespace precis
