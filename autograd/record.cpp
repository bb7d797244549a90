#include "autograd/record.h"

#include "autograd/autograd_meta.h"

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

bool needs_grad(std::initializer_list<const Tensor*> inputs) {
  if (!is_grad_enabled()) {
    if (t_use_observer != nullptr) [[unlikely]]
      report_uses(inputs);
    return false;
  }
  for (const Tensor* t : inputs)
    if (t != nullptr && t->defined() && t->requires_grad()) return true;
  return false;
}

bool needs_grad(std::span<const Tensor> inputs) {
  if (!is_grad_enabled()) {
    if (t_use_observer != nullptr) [[unlikely]]
      for (const Tensor& t : inputs) report_uses({&t});
    return false;
  }
  for (const Tensor& t : inputs)
    if (t.defined() && t.requires_grad()) return true;
  return false;
}

Edge gradient_edge(const Tensor& t) {
  if (!t.defined() || !t.requires_grad()) return {};
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

}  // namespace precis::autograd
