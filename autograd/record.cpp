#include "autograd/record.h"

#include <algorithm>

#include "autograd/autograd_meta.h"
#include "ops/functional.h"
#include "tensor/factory.h"

namespace precis::autograd {

namespace {
thread_local GradientUseObserver* t_use_observer = nullptr;

void report_uses(std::initializer_list<const Tensor*> inputs) {
  for (const Tensor* t : inputs)
    if (t != nullptr && t->defined() && t->requires_grad()) t_use_observer->on_use(*t);
}
}  // namespace

GradientUseObserver* set_gradient_use_observer(GradientUseObserver* observer) {
  GradientUseObserver* previous = t_use_observer;
  t_use_observer = observer;
  return previous;
}

namespace {
// A stale view (TensorImpl::stale_view) must not join a graph: its grad_fn is the replaced history.
void check_not_stale(const Tensor& t) {
  PRECIS_CHECK_T(StateError, !t.impl()->stale_view(), "a view ", t.describe(), " is used after the tensor it views was "
                 "modified in place under grad mode: its gradient would flow into the history that modification "
                 "replaced. Take the view again after the in-place op (PyTorch regenerates it; precis refuses)");
}
// "copy_" → "copy_backward"; "operator+=" → "operator+=_backward".
std::string node_name(std::string op) {
  if (!op.empty() && op.back() == '_') op.pop_back();
  return op + "_backward";
}
}  // namespace

bool needs_grad(std::initializer_list<const Tensor*> inputs) {
  if (!is_grad_enabled()) {
    if (t_use_observer != nullptr) [[unlikely]]
      report_uses(inputs);
    return false;
  }
  bool any = false;
  for (const Tensor* t : inputs) {
    if (t == nullptr || !t->defined()) continue;
    check_not_stale(*t);
    any = any || t->requires_grad();
  }
  return any;
}

bool needs_grad(std::span<const Tensor> inputs) {
  if (!is_grad_enabled()) {
    if (t_use_observer != nullptr) [[unlikely]]
      for (const Tensor& t : inputs) report_uses({&t});
    return false;
  }
  bool any = false;
  for (const Tensor& t : inputs) {
    if (!t.defined()) continue;
    check_not_stale(t);
    any = any || t.requires_grad();
  }
  return any;
}

Edge gradient_edge(const Tensor& t) {
  if (!t.defined()) return {};
  check_not_stale(t);
  if (!t.requires_grad()) return {};
  AutogradMeta& meta = t.impl()->ensure_autograd_meta();
  if (meta.grad_fn) return {meta.grad_fn, meta.output_nr};
  std::shared_ptr<AccumulateGrad> acc = meta.grad_accumulator.lock();
  if (!acc) {
    acc = std::make_shared<AccumulateGrad>(t);
    meta.grad_accumulator = acc;
  }
  return {acc, 0};
}

std::shared_ptr<Node> record(OpId op, const TensorList& inputs, const TensorList& outputs,
                             FunctionNode::Backward backward) {
  auto node = std::make_shared<FunctionNode>(op, std::move(backward));
  attach(node, inputs, outputs);
  return node;
}

void attach(const std::shared_ptr<Node>& node, const TensorList& inputs, const TensorList& outputs) {
  node->next_edges().reserve(inputs.size());
  for (const Tensor& in : inputs) {
    node->next_edges().push_back(gradient_edge(in));
    node->input_metadata().push_back(in.defined() ? InputMetadata{in.sizes(), in.dtype(), in.device()}
                                                  : InputMetadata{});
  }
  node->set_num_outputs(static_cast<uint32_t>(outputs.size()));
  for (size_t i = 0; i < outputs.size(); ++i) {
    const Tensor& out = outputs[i];
    if (!out.defined() || !is_floating(out.dtype())) continue;  // e.g. max's indices
    AutogradMeta& meta = out.impl()->ensure_autograd_meta();
    meta.grad_fn = node;
    meta.output_nr = static_cast<uint32_t>(i);
  }
}

void rebase_history(const Tensor& self, const Tensor& value, bool overwrite, const char* op) {
  const bool take_value = value.defined() && value.requires_grad();
  const bool zero_old = overwrite && self.requires_grad();
  if (!take_value && !zero_old) return;
  AutogradMeta& meta = self.impl()->ensure_autograd_meta();
  const std::shared_ptr<Node> old_fn = meta.grad_fn;
  if (!overwrite && value.grad_fn() != nullptr && value.dtype() == self.dtype() && value.device() == self.device() &&
      value.sizes() == self.sizes()) {
    // x += y: the value is a temporary whose node already reaches the old history (it read x), so
    // self takes that node. Never for copy_: its source lives on as a tensor of its own, and two
    // tensors on one graph output would share hooks, retain_grad and gradients.
    meta.grad_fn = value.grad_fn();
    meta.output_nr = value.impl()->autograd_meta()->output_nr;
  } else {
    TensorList inputs;
    if (take_value) inputs.push_back(value);
    if (zero_old) inputs.push_back(self);  // read before attach() makes self the node's output
    const Shape value_shape = take_value ? value.sizes() : Shape{};
    auto node = std::make_shared<FunctionNode>(
        OpId::copy,
        [take_value, zero_old, value_shape](const TensorList& g) -> TensorList {
          TensorList grads;
          // A broadcast value (copy_) gets the sum over the dims it was expanded along; the engine
          // casts the gradient to its dtype and moves it to its device.
          if (take_value) grads.push_back(g[0].sizes() == value_shape ? g[0] : sum_to(g[0], value_shape));
          if (zero_old) grads.push_back(zeros_like(g[0]));  // what self held before is overwritten
          return grads;
        },
        node_name(op));
    attach(node, inputs, {self});
  }
  // retain_grad() follows the tensor to its new history, as PyTorch's does; hooks registered before
  // stay with the old one (they see the gradient of the values self held then).
  if (meta.retains_grad && old_fn != nullptr) {
    std::erase_if(old_fn->retained(), [&](const auto& r) { return r.second.lock() == self.impl_ptr(); });
    meta.grad_fn->retained().emplace_back(meta.output_nr, self.impl_ptr());
  }
  self.impl()->version_counter()->history.fetch_add(1, std::memory_order_relaxed);
  if (self.impl()->is_view()) self.impl()->mark_view();  // self itself holds the new history
}

}  // namespace precis::autograd
