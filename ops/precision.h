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
};

namespace detail {
// Constant-initialised, so reading it needs no TLS wrapper call.
inline thread_local PrecisionPolicy* t_precision_policy = nullptr;
}  // namespace detail

/// Installs `policy` on this thread (nullptr: none) and returns the previous one.
PrecisionPolicy* set_precision_policy(PrecisionPolicy* policy);
/// The policy installed on this thread, or nullptr.
inline PrecisionPolicy* precision_policy() { return detail::t_precision_policy; }

/// The op's inputs as the installed policy wants them; unchanged when none is installed.
template <typename... T>
std::array<Tensor, sizeof...(T)> apply_precision(OpId op, const T&... inputs) {
  std::array<Tensor, sizeof...(T)> out = {inputs...};
  if (PrecisionPolicy* p = detail::t_precision_policy) [[unlikely]]
    p->apply(op, out);
  return out;
}

/// The same for ops taking a list of tensors (cat, stack).
std::vector<Tensor> apply_precision_list(OpId op, const std::vector<Tensor>& inputs);

}  // namespace precis
