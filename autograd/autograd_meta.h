#pragma once
// Per-tensor autograd state, owned by the TensorImpl.
#include <functional>
#include <memory>
#include <vector>

#include "autograd/node.h"

namespace precis::autograd {

struct AutogradMeta final : AutogradMetaInterface {
  bool requires_grad = false;
  Tensor grad;
  /// Non-null for tensors produced by a recorded op.
  std::shared_ptr<Node> grad_fn;
  uint32_t output_nr = 0;
  /// Leaves only: the sink shared by every graph that uses this leaf (weak: graphs own it).
  std::weak_ptr<AccumulateGrad> grad_accumulator;
  bool retains_grad = false;
  /// Leaves only: hooks run on the incoming gradient before it is accumulated.
  std::vector<std::pair<int, std::function<Tensor(const Tensor&)>>> leaf_hooks;
  std::vector<std::pair<int, std::function<void(const Tensor&)>>> post_accumulate_hooks;
};

}  // namespace precis::autograd
