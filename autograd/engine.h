#pragma once
// The backward engine: counts dependencies from the roots, then runs nodes from a ready queue
// (highest sequence number first, i.e. reverse creation order), summing gradients that arrive
// along several edges. Iterative: no recursion, so long chains cannot overflow the stack.
#include "autograd/node.h"

namespace precis::autograd {

/// Runs backward from `roots` with `grad_roots` (one per root; undefined means ones for a
/// one-element root, an error otherwise). Without retain_graph, saved tensors are freed and a
/// second backward through the same nodes raises StateError.
void backward(const TensorList& roots, const TensorList& grad_roots = {}, bool retain_graph = false);

/// Returns d(sum(outputs * grad_outputs))/d(inputs) without touching .grad (torch.autograd.grad).
/// An input that the outputs do not depend on gets an undefined tensor when allow_unused, an
/// error otherwise.
TensorList grad(const TensorList& outputs, const TensorList& inputs, const TensorList& grad_outputs = {},
                bool retain_graph = false, bool allow_unused = false);

}  // namespace precis::autograd
