#pragma once
// The ops' precision hook. Every op passes its inputs through apply_precision(OpId, ...) first
// thing; a precision policy installed on the thread may cast them (amp::Autocast installs one, and
// amp::Audit observes through the same hook). The policy lives above the ops (amp/), so the ops
// name only this interface: the layer rule of docs/design/architecture.md.
//
//   Tensor linear(const Tensor& x_in, const Tensor& w_in, const Tensor& b_in) {
//     const auto [x, w, b] = apply_precision(OpId::linear, x_in, w_in, b_in);
//     ...
//
// With no policy installed (no autocast region, no audit) the cost is one thread-local load.
#include <array>
#include <memory>
#include <span>
#include <vector>

#include "ops/op_table.h"
#include "tensor/tensor.h"

namespace precis {

/// What decides an op's input dtypes on this thread (implemented by amp's autocast).
class PrecisionPolicy {
 public:
  virtual ~PrecisionPolicy() = default;
  /// Casts `inputs` (the op's tensors, in argument order; undefined ones allowed) in place as the
  /// policy says for `op`; may throw (a banned op).
  virtual void apply(OpId op, std::span<Tensor> inputs) = 0;
  /// The same for an op taking a list of tensors (cat, stack); by default as apply.
  virtual void apply_list(OpId op, std::span<Tensor> inputs) { apply(op, inputs); }
  /// As apply, for an op whose kernel reads inputs[0] in f16/bf16 and computes in fp32 itself:
  /// where the policy would only widen inputs[0] from f16/bf16 to fp32, it may leave it as it is
  /// and return true (the op then computes and returns what the widened tensor would give; see
  /// apply_precision_widening_in_kernel). The other inputs are cast as apply casts them. By
  /// default: apply, and false.
  virtual bool apply_widening_in_kernel(OpId op, std::span<Tensor> inputs) {
    apply(op, inputs);
    return false;
  }
  /// The category the policy applies to `op`'s inputs on `device` now, without casting or
  /// recording anything: for an op that must know what another op would do (a fused op's result
  /// dtype). Passthrough where the policy casts nothing (autocast off for that device).
  virtual Category category(OpId op, DeviceType device) const {
    (void)op;
    (void)device;
    return Category::Passthrough;
  }
};

namespace detail {
// Constant-initialised, so reading it needs no TLS wrapper call.
inline thread_local PrecisionPolicy* t_precision_policy = nullptr;
}  // namespace detail

/// Installs `policy` on this thread (nullptr: none) and returns the previous one.
PrecisionPolicy* set_precision_policy(PrecisionPolicy* policy);
/// The policy installed on this thread, or nullptr.
inline PrecisionPolicy* precision_policy() { return detail::t_precision_policy; }

/// Installs `policy` (nullptr: none) on this thread for its scope and restores the previous one:
/// a composite whose inputs its own category has cast runs its parts under no policy, so the
/// parts' categories (which a user may override) do not cast them again.
class PrecisionPolicyGuard {
 public:
  /// Installs `policy` (nullptr: none) until the guard goes out of scope.
  explicit PrecisionPolicyGuard(PrecisionPolicy* policy) : previous_(set_precision_policy(policy)) {}
  /// Puts the previous policy back.
  ~PrecisionPolicyGuard() { set_precision_policy(previous_); }
  PrecisionPolicyGuard(const PrecisionPolicyGuard&) = delete;
  PrecisionPolicyGuard& operator=(const PrecisionPolicyGuard&) = delete;

 private:
  PrecisionPolicy* previous_;
};

/// The category the installed policy applies to `op` on `device` now (PrecisionPolicy::category);
/// Passthrough when none is installed. A query: nothing is cast, no audit records it.
inline Category precision_category(OpId op, DeviceType device) {
  const PrecisionPolicy* p = detail::t_precision_policy;
  return p == nullptr ? Category::Passthrough : p->category(op, device);
}

/// The op's inputs as the installed policy wants them; unchanged when none is installed.
template <typename... T>
std::array<Tensor, sizeof...(T)> apply_precision(OpId op, const T&... inputs) {
  std::array<Tensor, sizeof...(T)> out = {inputs...};
  if (PrecisionPolicy* p = detail::t_precision_policy) [[unlikely]]
    p->apply(op, out);
  return out;
}

/// The op's inputs as the installed policy wants them, for an op whose kernel widens its first
/// input from f16/bf16 to fp32 element by element as it reads it (cross_entropy's logits). Where
/// the policy asks for that widening (autocast's FP32 category, or Promote beside an fp32 operand:
/// dropout_add's bf16 x and fp32 residual), `first` is returned in its own
/// dtype and `*computes_in_fp32` is set: the op must then give exactly what it gives for
/// first.to(f32) — an fp32 result, a gradient in first's dtype as the cast's backward would round
/// it. The widening is exact, so the numbers are the cast's (up to the kernel's summation order),
/// without the extra pass over the tensor and its fp32 copy. Otherwise as apply_precision, and
/// *computes_in_fp32 is false.
template <typename... T>
std::array<Tensor, 1 + sizeof...(T)> apply_precision_widening_in_kernel(OpId op, bool* computes_in_fp32,
                                                                        const Tensor& first, const T&... others) {
  std::array<Tensor, 1 + sizeof...(T)> out = {first, others...};
  *computes_in_fp32 = false;
  if (PrecisionPolicy* p = detail::t_precision_policy) [[unlikely]]
    *computes_in_fp32 = p->apply_widening_in_kernel(op, out);
  return out;
}

/// The same for ops taking a list of tensors (cat, stack).
std::vector<Tensor> apply_precision_list(OpId op, const std::vector<Tensor>& inputs);

/// What the precision policy keeps of one checkpointed region (autograd/checkpoint.h) so that the
/// region's recomputation, run later from backward, casts exactly as its forward did: the
/// thread's policy settings when the region began (autocast's dtypes, its category overrides) and
/// the low-precision copies of parameters the forward was served from the policy's cache. amp
/// implements it; the checkpoint only brackets the two runs. Each begin is paired with its end on
/// the same thread, and regions nest as the checkpoints that own them do.
class PrecisionRegion {
 public:
  virtual ~PrecisionRegion() = default;
  /// Around the region's forward (run under NoGradGuard): records what the recomputation needs.
  virtual void begin_forward() = 0;
  /// Ends what begin_forward began.
  virtual void end_forward() noexcept = 0;
  /// Around a recomputation: makes the settings captured at construction the thread's, whatever
  /// they are now (the backward may run outside the region's autocast, or inside another), and
  /// serves the recorded parameter copies again. The precision audit does not record the
  /// recomputation: it recorded the forward, whose ops this repeats.
  virtual void begin_recompute() = 0;
  /// Restores the thread's settings found by begin_recompute.
  virtual void end_recompute() noexcept = 0;
};

/// Makes a PrecisionRegion capturing this thread's settings now (installed by amp).
using PrecisionRegionFactory = std::unique_ptr<PrecisionRegion> (*)();
/// Installs the factory (amp does, when it is linked); nullptr removes it.
void set_precision_region_factory(PrecisionRegionFactory factory);
/// A region from the installed factory, or null when none is installed: without amp linked no
/// policy exists, so there is nothing to capture.
std::unique_ptr<PrecisionRegion> make_precision_region();

}  // namespace precis
