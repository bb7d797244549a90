#include "autograd/node.h"

#include <atomic>
#include <limits>

#include "autograd/autograd_meta.h"
#include "autograd/grad_mode.h"
#include "ops/contracts/kernels.h"
#include "ops/op_table.h"
#include "ops/functional.h"

namespace precis::autograd {

namespace {
std::atomic<uint64_t> g_next_sequence_nr{0};
}

uint64_t next_sequence_nr() { return g_next_sequence_nr.load(std::memory_order_relaxed); }

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

namespace {

// Whether `g` may become the leaf's first .grad without a copy. Nothing else may hold it: neither
// its TensorImpl (another edge's buffer, a hook that kept it) nor its memory (a view of a buffer
// another gradient also views, e.g. view_backward of a gradient that reached two leaves) — later
// backwards accumulate into .grad in place, which would otherwise change that other tensor too.
bool can_steal(const Tensor& g) {
  return g.impl_ptr().use_count() == 1 && g.storage().use_count() == 1 && g.is_contiguous();
}

// Whether g can be added into the existing `grad` in place (PyTorch's rule for a first-order
// backward): no graph is being recorded (create_graph would need the sum's graph), `grad` does not
// itself require grad, and the two agree in dtype, device and shape, with `grad` dense row-major
// (an expanded or strided .grad a user set cannot take an element-wise write). Other holders of
// `grad` (p.grad() kept by the user, a data-parallel bucket holding a view into a flat buffer) do
// not prevent it: they see the accumulated values, which is what keeps gradient buffers' identity.
bool can_accumulate_in_place(const Tensor& grad, const Tensor& g) {
  return !is_grad_enabled() && !grad.requires_grad() && grad.is_contiguous() && grad.dtype() == g.dtype() &&
         grad.device() == g.device() && grad.sizes() == g.sizes();
}

// grad += g through add's element-wise kernel with `grad` as both output and first operand (an
// element-wise kernel reads a[i] before it writes out[i]; ops/contracts/kernels.h), so no new buffer.
void add_in_place(const Tensor& grad, const Tensor& g) {
  kernel<kernels::BinaryKernel>(OpId::add, grad.device().type, grad.dtype())(grad, grad, g, 1.0);
  grad.bump_version();
}

}  // namespace

Tensor checked_hook_result(const Tensor& grad, const Tensor& replaced, const std::function<std::string()>& where) {
  if (!replaced.defined()) return grad;
  auto what = [&] { return " for a gradient " + grad.describe() + " (" + where() + "); a hook may change the "
                           "values only: return a tensor of the gradient's shape, dtype and device"; };
  PRECIS_CHECK_SHAPE(replaced.sizes() == grad.sizes(), "gradient hook: returned ", replaced.describe(), what());
  PRECIS_CHECK_DTYPE(replaced.dtype() == grad.dtype(), "gradient hook: returned ", replaced.describe(), what());
  PRECIS_CHECK_DEVICE(replaced.device() == grad.device(), "gradient hook: returned ", replaced.describe(), what());
  return replaced;
}

Tensor AccumulateGrad::run_hooks(Tensor g) const {
  const AutogradMeta* meta = leaf_.impl()->autograd_meta();
  if (meta == nullptr) return g;
  for (const auto& [id, hook] : meta->leaf_hooks)
    g = checked_hook_result(g, hook(g), [this] { return "a hook on leaf " + leaf_.describe(); });
  return g;
}

TensorList AccumulateGrad::apply(TensorList&& grad_outputs) {
  Tensor g = std::move(grad_outputs.at(0));
  if (!g.defined()) return {};
  g = run_hooks(std::move(g));
  AutogradMeta& meta = leaf_.impl()->ensure_autograd_meta();
  if (!meta.grad.defined()) {
    meta.grad = can_steal(g) ? g.detach() : g.detach().clone();
  } else if (can_accumulate_in_place(meta.grad, g)) {
    add_in_place(meta.grad, g);
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
