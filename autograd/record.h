#pragma once
// What an op's forward calls to join the graph. Pattern (see ops/*.cpp):
//
//   Tensor out = <run kernel>;
//   if (autograd::needs_grad({&a, &b})) {
//     autograd::record(OpId::mul, {a, b}, {out},
//         [sa = SavedTensor(a), sb = SavedTensor(b)](const TensorList& g) -> TensorList {
//           return {g[0] * sb.unpack(), g[0] * sa.unpack()};
//         });
//   }
//
// Backward closures run with grad mode off and compute with public ops, so they work on every
// device that has the forward kernels.
#include <initializer_list>
#include <span>

#include "autograd/grad_mode.h"
#include "autograd/node.h"

namespace precis::autograd {

/// True when grad mode is on and any defined input requires grad. Every op asks it before it
/// records, so with grad mode off it is also where a GradientUseObserver learns of the tensors
/// requiring grad that the ops read.
bool needs_grad(std::initializer_list<const Tensor*> inputs);
bool needs_grad(std::span<const Tensor> inputs);

/// Sees, while installed on a thread with grad mode off, every tensor requiring grad that an op
/// reads there (through needs_grad): the tensors whose gradient edges the op would have recorded
/// with grad mode on. A checkpoint's forward runs under NoGradGuard and learns this way where its
/// recomputed graph will join the graph outside it (its inputs, and the parameters its function
/// captured).
class GradientUseObserver {
 public:
  virtual ~GradientUseObserver() = default;
  /// `t` is defined and requires grad.
  virtual void on_use(const Tensor& t) = 0;
};
/// Installs `observer` on this thread (nullptr: none); returns the previous one.
GradientUseObserver* set_gradient_use_observer(GradientUseObserver* observer);

/// Creates a FunctionNode for `op` with an edge per input (invalid for inputs that need no
/// gradient), and makes it the grad_fn of each output (output_nr = position). Outputs become
/// requires_grad. The backward returns one gradient per input (undefined allowed).
std::shared_ptr<Node> record(OpId op, const TensorList& inputs, const TensorList& outputs,
                             FunctionNode::Backward backward);

/// Connects an existing node (e.g. a custom Function's) to its inputs and outputs as record() does.
void attach(const std::shared_ptr<Node>& node, const TensorList& inputs, const TensorList& outputs);

/// Gives `self`, whose data an in-place op (`op`, for messages) has just replaced with `value`'s
/// (`value` broadcasts to self's shape; undefined for a constant such as fill_'s), the history of
/// that value, as PyTorch's rebase_history: a gradient reaching self flows to `value` (summed to its
/// shape, cast to its dtype). `overwrite`: the values self held before are gone (copy_, fill_), so
/// when self required grad its old history gets a zero gradient (PyTorch's CopyBackwards); false
/// when `value` was computed from self (x += y) and reaches that history itself. Views of self's
/// storage made before become stale (TensorImpl::stale_view): needs_grad and gradient_edge refuse
/// them with a StateError. Does nothing when neither self nor value requires grad.
void rebase_history(const Tensor& self, const Tensor& value, bool overwrite, const char* op);

/// The edge a gradient for `t` must flow along: its grad_fn, or its leaf's AccumulateGrad
/// (created on first use), or an invalid edge when t does not require grad.
Edge gradient_edge(const Tensor& t);

}  // namespace precis::autograd
