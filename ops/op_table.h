#pragma once
// The op table (ops/op_list.def) as C++: OpId, each op's autocast category, and the kernel
// registry that maps (op, device type, dtype) to a kernel function.
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/dtype.h"

namespace precis {

/// What autocast does with an op's floating inputs (docs/design/precision.md).
enum class Category : uint8_t { Lower, FP32, Promote, Passthrough, Banned };
/// How an op is implemented: its own kernel, a view (metadata only), or composed of other ops.
enum class OpKind : uint8_t { Kernel, View, Composite };

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

struct OpInfo {
  const char* name;
  Category category;
  bool differentiable;
  OpKind kind;
};

/// The row of `op` in the table.
const OpInfo& op_info(OpId op);
inline const char* op_name(OpId op) { return op_info(op).name; }
const char* category_name(Category c);

// ---- kernel registry --------------------------------------------------------------------------
// Kernels are plain function pointers stored type-erased; each op family fixes its own kernel
// signature (e.g. ops/cpu/kernels.h: UnaryKernel) and looks kernels up with kernel<Fn>().
// Backends fill the registry from an explicit init call (init_backends()), never from static
// initialisers, so that a linker cannot drop a backend.

void register_kernel(OpId op, DeviceType device, DType dtype, void* fn);
/// The registered kernel or nullptr.
void* find_kernel(OpId op, DeviceType device, DType dtype);
/// dtypes with a kernel for (op, device).
std::vector<DType> registered_dtypes(OpId op, DeviceType device);
/// Throws NotImplementedError naming the op, device and dtype, and listing the dtypes that do
/// have a kernel there.
[[noreturn]] void throw_missing_kernel(OpId op, DeviceType device, DType dtype);

/// The kernel for (op, device, dtype) as a function pointer of type Fn*; throws when missing.
template <typename Fn>
Fn* kernel(OpId op, DeviceType device, DType dtype) {
  void* k = find_kernel(op, device, dtype);
  if (k == nullptr) throw_missing_kernel(op, device, dtype);
  return reinterpret_cast<Fn*>(k);
}

template <typename Fn>
void register_kernel(OpId op, DeviceType device, DType dtype, Fn* fn) {
  register_kernel(op, device, dtype, reinterpret_cast<void*>(fn));
}

/// Registers every compiled backend's kernels and allocators (idempotent, thread-safe). Called
/// on first use of the registry; users never need to call it.
void init_backends();

}  // namespace precis
