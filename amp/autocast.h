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
#include <tuple>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/dtype.h"
#include "ops/op_table.h"
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
  /// `device_type`, with the weight cache on. Note the argument order differs from torch.autocast's.
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
bool is_autocast_enabled(DeviceType device_type);
DType autocast_dtype(DeviceType device_type);
/// True if autocast is on for any device type on this thread (the ops' fast-path test).
bool any_autocast_enabled();

// ---- the policy table --------------------------------------------------------------------------
/// The category autocast applies to `op` on `device_type`: the op table's, unless overridden.
Category category(OpId op, DeviceType device_type = DeviceType::cpu);
/// Overrides an op's category at run time (e.g. pin a Lower op to FP32 after an audit).
void set_category(OpId op, Category category, DeviceType device_type = DeviceType::cpu);
/// Drops every override.
void reset_categories();

/// A user-defined op's registration with the policy: its name appears in audits and errors.
struct CustomOp {
  int id;  ///< the registration's index, as returned by register_custom_op
};
/// Registers a user op with its category; call once (e.g. a function-local static).
CustomOp register_custom_op(const std::string& name, Category category);

// ---- the hook every op calls -------------------------------------------------------------------
namespace detail {
/// Installs amp's policy in the ops' precision hook (ops/precision.h) while an Autocast guard or an
/// Audit is open on this thread, and removes it when none is. Called by their constructors and
/// destructors.
void refresh_precision_policy();
Tensor cast_for(Category category, const std::string* op_name, const Tensor& t, DType widest, DeviceType device);
DType widest_floating(std::initializer_list<const Tensor*> tensors);
DeviceType device_of(std::initializer_list<const Tensor*> tensors, bool* found);
void throw_banned(OpId op);
void throw_banned_custom(CustomOp op);
/// True when an amp::Audit records on this thread.
bool audit_active();
void audit_observe(OpId op, std::initializer_list<const Tensor*> inputs);
Category custom_category(CustomOp op);
const std::string& custom_name(CustomOp op);
}  // namespace detail

/// Returns the op's inputs cast as its category says when autocast is on for their device;
/// otherwise the inputs unchanged. Only floating, non-f64 tensors are cast; undefined tensors pass
/// through. Banned ops throw, naming the safe alternative.
template <typename... T>
std::array<Tensor, sizeof...(T)> autocast(OpId op, const T&... inputs) {
  if (!any_autocast_enabled()) {
    if (detail::audit_active()) [[unlikely]]
      detail::audit_observe(op, {&inputs...});
    return {inputs...};
  }
  std::array<Tensor, sizeof...(T)> out = {inputs...};
  bool found = false;
  const DeviceType device = detail::device_of({&inputs...}, &found);
  if (found && is_autocast_enabled(device)) {
    const Category c = category(op, device);
    if (c == Category::Banned) detail::throw_banned(op);
    if (c != Category::Passthrough) {
      const DType widest = detail::widest_floating({&inputs...});
      out = {detail::cast_for(c, nullptr, inputs, widest, device)...};
    }
  }
  if (detail::audit_active()) [[unlikely]]
    std::apply([&](const auto&... t) { detail::audit_observe(op, {&t...}); }, out);
  return out;
}

/// The same for a user-defined op registered with register_custom_op.
template <typename... T>
std::array<Tensor, sizeof...(T)> autocast(CustomOp op, const T&... inputs) {
  if (!any_autocast_enabled()) return {inputs...};
  bool found = false;
  const DeviceType device = detail::device_of({&inputs...}, &found);
  if (!found || !is_autocast_enabled(device)) return {inputs...};
  const Category c = detail::custom_category(op);
  if (c == Category::Banned) detail::throw_banned_custom(op);
  if (c == Category::Passthrough) return {inputs...};
  const DType widest = detail::widest_floating({&inputs...});
  return {detail::cast_for(c, &detail::custom_name(op), inputs, widest, device)...};
}

/// For ops taking a list of tensors (cat, stack): casts each element.
std::vector<Tensor> autocast_list(OpId op, const std::vector<Tensor>& inputs);

/// Entries in the weight-cast cache of this thread (for tests and diagnostics).
size_t cache_size();

}  // namespace precis::amp
