#pragma once
// Autocast: inside an amp::Autocast region, every op casts its floating inputs according to its
// category in the precision policy table (docs/design/precision.md) before it runs and records its backward:
//
//   {
//     amp::Autocast autocast(DType::bf16);          // CPU region; Autocast(DType::f16, DeviceType::cuda) on a GPU
//     Tensor logits = linear(x, w, b);              // Lower: x, w, b cast to bf16, fp32 accumulation
//     Tensor loss = cross_entropy(logits, target);  // FP32: logits cast back to fp32
//   }
//
// State is thread-local and nestable (an inner guard may disable or change the dtype). Casts are
// differentiable: gradients reach fp32 parameters as fp32. Low-precision copies of fp32 leaf
// parameters are cached for the region (Note [Autocast cache] in autocast.cpp).
#include <array>
#include <span>
#include <string>

#include "core/device.h"
#include "core/dtype.h"
#include "ops/op_table.h"
#include "ops/precision.h"
#include "tensor/tensor.h"

namespace precis::amp {

/// An Autocast region's settings, as torch.autocast's arguments (device_type, dtype, enabled,
/// cache_enabled); only the dtype's default differs per device (see default_autocast_dtype).
struct AutocastOptions {
  /// The device type whose ops this region affects.
  DeviceType device_type = DeviceType::cpu;
  /// The low-precision dtype for Lower ops: f16 or bf16. Default: bf16 on the CPU, f16 on CUDA.
  DType dtype = DType::bf16;
  bool enabled = true;  ///< false: a region without autocast for device_type (inside an enabled one)
  /// Keep low-precision copies of fp32 parameters for the region.
  bool cache_enabled = true;
};

/// RAII guard: enables (or, with enabled = false, disables) autocast for one device type until it
/// goes out of scope, restoring the previous state. Nestable; the weight cache is dropped when the
/// outermost guard exits.
class Autocast {
 public:
  /// Autocast to `dtype` (f16 or bf16, DTypeError otherwise, even when disabled) for ops on
  /// `device_type`, with the weight cache on. Note the argument order differs from torch.autocast's,
  /// and device_type defaults to the CPU: a GPU model needs DeviceType::cuda (an op autocast would
  /// lower that runs on CUDA tensors under a CPU-only region warns once per process).
  explicit Autocast(DType dtype, DeviceType device_type = DeviceType::cpu, bool enabled = true);
  /// The region `options` describes (DTypeError unless options.dtype is f16 or bf16).
  explicit Autocast(const AutocastOptions& options);
  ~Autocast();
  Autocast(const Autocast&) = delete;
  Autocast& operator=(const Autocast&) = delete;

 private:
  DeviceType device_type_;
  bool prev_enabled_;
  DType prev_dtype_;
  bool prev_cache_;
};

/// The default low-precision dtype of a device type: bf16 for the CPU, f16 for CUDA.
DType default_autocast_dtype(DeviceType device_type);
/// Whether autocast is on for `device_type` on this thread.
bool is_autocast_enabled(DeviceType device_type);
/// The low-precision dtype autocast uses for `device_type` on this thread.
DType autocast_dtype(DeviceType device_type);
/// True if autocast is on for any device type on this thread (outside backward).
bool any_autocast_enabled();

// ---- the policy table --------------------------------------------------------------------------
/// The category autocast applies to `op` on `device_type`: the op table's, unless overridden.
Category category(OpId op, DeviceType device_type = DeviceType::cpu);
/// Overrides an op's category at run time (e.g. pin a Lower op to FP32 after an audit).
void set_category(OpId op, Category category, DeviceType device_type = DeviceType::cpu);
/// Drops every override.
void reset_categories();

// ---- user-defined ops --------------------------------------------------------------------------
/// A user-defined op's registration with the policy: its name appears in audits and errors.
struct CustomOp {
  int id;  ///< the registration's index, as returned by register_custom_op
};
/// Registers a user op with its category; call once (e.g. a function-local static).
CustomOp register_custom_op(const std::string& name, Category category);

namespace detail {
/// Casts `inputs` in place as `op`'s category says and lets an open amp::Audit record the call:
/// the path the built-in ops take through their precision hook (ops/precision.h).
void apply_custom(CustomOp op, std::span<Tensor> inputs);
/// Installs amp's policy in the ops' precision hook (ops/precision.h) while an Autocast guard or an
/// Audit is open on this thread, and removes it when none is. Called by their constructors and
/// destructors.
void refresh_precision_policy();
}  // namespace detail

/// A user-defined op's inputs cast as its registered category says when autocast is on for their
/// device (otherwise unchanged), exactly as a built-in op of that category casts them; an open
/// amp::Audit records the call under the op's name. Banned ops throw DTypeError.
template <typename... T>
std::array<Tensor, sizeof...(T)> autocast(CustomOp op, const T&... inputs) {
  std::array<Tensor, sizeof...(T)> out = {inputs...};
  if (precision_policy() != nullptr) [[unlikely]]
    detail::apply_custom(op, out);
  return out;
}

/// Entries in the weight-cast cache of this thread (for tests and diagnostics).
size_t cache_size();

}  // namespace precis::amp
