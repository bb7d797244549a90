#include "autograd/node.h"

#include <atomic>
#include <limits>

#include "autograd/autograd_meta.h"
#include "ops/functional.h"

namespace precis::autograd {

namespace {
std::atomic<uint64_t> g_next_sequence_nr{0};
}

Node::Node() : sequence_nr_(g_next_sequence_nr.fetch_add(1, std::memory_order_relaxed)) {}
// Destroying the last tensor of a long graph would otherwise free one node per stack frame
// (node → edge → node ...) and overflow the stack; children that die with this node are queued
// and freed in a loop instead.
Node::~Node() {
  thread_local std::vector<std::shared_ptr<Node>> pending;
  thread_local bool draining = false;
  for (Edge& e : next_edges_)
    if (e.fn && e.fn.use_count() == 1) pending.push_back(std::move(e.fn));
  if (draining) return;
  draining = true;
  while (!pending.empty()) {
    std::shared_ptr<Node> n = std::move(pending.back());
    pending.pop_back();
    n.reset();
  }
  draining = false;
}

FunctionNode::FunctionNode(OpId op, Backward backward, std::string name)
    : op_(op), backward_(std::move(backward)), name_(std::move(name)) {}

std::string FunctionNode::name() const { return name_.empty() ? std::string(op_name(op_)) + "_backward" : name_; }

TensorList FunctionNode::apply(TensorList&& grad_outputs) {
  PRECIS_CHECK_T(StateError, backward_ != nullptr, name(),
                 ": trying to run backward through this part of the graph a second time, after its saved "
                 "tensors were freed; pass retain_graph=true to the first backward() if you need to run it twice");
  return backward_(grad_outputs);
}

AccumulateGrad::AccumulateGrad(Tensor leaf) : leaf_(std::move(leaf)) {}

TensorList AccumulateGrad::apply(TensorList&& grad_outputs) {
  Tensor g = std::move(grad_outputs.at(0));
  if (!g.defined()) return {};
  AutogradMeta& meta = leaf_.impl()->ensure_autograd_meta();
  for (auto& [id, hook] : meta.leaf_hooks) {
    Tensor replaced = hook(g);
    if (replaced.defined()) g = replaced;
  }
  if (!meta.grad.defined()) {
    // Keep the incoming gradient when nobody else holds it; otherwise copy so that a later
    // accumulation or an in-place change by the user cannot alias another tensor.
    meta.grad = g.impl_ptr().use_count() == 1 && g.is_contiguous() ? g.detach() : g.detach().clone();
  } else {
    meta.grad = add(meta.grad, g);
  }
  for (auto& [id, hook] : meta.post_accumulate_hooks) hook(leaf_);
  return {};
}

SavedTensor::SavedTensor(const Tensor& t) {
  if (!t.defined()) return;
  tensor_ = t.detach();
  version_ = t.version();
}

Tensor SavedTensor::unpack(const char* op_name) const {
  if (!tensor_.defined()) return tensor_;
  PRECIS_CHECK_T(StateError, tensor_.version() == version_,
                 "one of the tensors needed for gradient computation", op_name ? " by " : "", op_name ? op_name : "",
                 " (", tensor_.describe(), ") has been modified by an in-place operation: it is at version ",
                 tensor_.version(), ", expected version ", version_,
                 ". Use an out-of-place op, or clone() the tensor before modifying it");
  return tensor_;
}

}  // namespace precis::autograd
