#pragma once
// The backward engine: counts dependencies from the roots, then runs nodes from a ready queue
// (highest sequence number first, i.e. reverse creation order), summing gradients that arrive
// along several edges. Iterative: no recursion, so long chains cannot overflow the stack.
#include <functional>

#include "autograd/node.h"

namespace precis::autograd {

/// Runs backward from `roots` with `grad_roots` (one per root, cast to its root's dtype; undefined
/// means ones for a one-element root, an error otherwise). Without retain_graph, saved tensors are
/// freed and a second backward through the same nodes raises StateError. A gradient hook may change
/// a gradient's values, not its shape, dtype or device (ShapeError / DTypeError / DeviceError).
void backward(const TensorList& roots, const TensorList& grad_roots = {}, bool retain_graph = false);

/// Returns d(sum(outputs * grad_outputs))/d(inputs) without touching .grad (torch.autograd.grad).
/// An input that the outputs do not depend on gets an undefined tensor when allow_unused, an
/// error otherwise. As PyTorch's, only the nodes with an input below them run (no other hook
/// fires, no other saved tensor is freed), and a leaf input's hooks apply to what is returned.
TensorList grad(const TensorList& outputs, const TensorList& inputs, const TensorList& grad_outputs = {},
                bool retain_graph = false, bool allow_unused = false);

/// Queues `callback` to run when the backward pass now running on this thread has run all its
/// nodes (torch.autograd's Variable._execution_engine.queue_callback): the point where every
/// gradient of the pass has been accumulated, e.g. for a data-parallel all-reduce started from
/// post-accumulate hooks. Callbacks run in the order queued, on this thread, with grad mode off;
/// one may queue more, which run in the same pass after those already queued. They belong to
/// the innermost pass (a backward run inside a callback or a hook has its own). When the pass
/// throws, its queued callbacks are dropped; when a callback throws, the ones after it are
/// dropped and the exception leaves backward(). StateError when no backward pass is running.
void queue_callback(std::function<void()> callback);

namespace detail {
/// The backward pass of a graph built inside another pass (a checkpoint's recomputation, run by
/// its node's apply): runs the graph below `roots` (with `grad_roots`, one per root, all defined)
/// down to `boundary`, the edges where it joins the enclosing graph, and returns the gradient
/// that reached each boundary edge (undefined where none did). Boundary nodes are neither run nor
/// walked below, and their hooks are left to the enclosing pass, which runs those nodes with the
/// gradients returned here; callbacks queued during this pass join the enclosing pass's. Saved
/// tensors are freed as the pass goes.
TensorList backward_to_boundary(const std::vector<Edge>& roots, const TensorList& grad_roots,
                                const std::vector<Edge>& boundary);
}  // namespace detail

}  // namespace precis::autograd
