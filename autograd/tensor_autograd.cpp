// Tensor's autograd members.
#include <algorithm>
#include <atomic>

#include "autograd/autograd_meta.h"
#include "autograd/engine.h"
#include "tensor/tensor.h"

namespace precis {

using autograd::AutogradMeta;

// TensorImpl keeps its autograd state behind the tensor layer's AutogradMetaInterface; only
// autograd creates it, so the downcast is always to the right type.
autograd::AutogradMeta* TensorImpl::autograd_meta() const {
  return static_cast<autograd::AutogradMeta*>(autograd_.get());
}

autograd::AutogradMeta& TensorImpl::ensure_autograd_meta() {
  if (!autograd_) autograd_ = std::make_unique<autograd::AutogradMeta>();
  return *autograd_meta();
}

namespace {
std::atomic<int> g_next_hook_id{1};
}

bool Tensor::requires_grad() const {
  const AutogradMeta* m = checked()->autograd_meta();
  return m != nullptr && (m->requires_grad || m->grad_fn != nullptr);
}

Tensor& Tensor::requires_grad_(bool requires_grad) {
  AutogradMeta* m = checked()->autograd_meta();
  PRECIS_CHECK_T(StateError, m == nullptr || m->grad_fn == nullptr, "requires_grad_: only leaf tensors can change "
                 "requires_grad; ", describe(), " was produced by ", m ? m->grad_fn->name() : "",
                 ". Use detach().requires_grad_() for a new leaf");
  if (requires_grad)
    PRECIS_CHECK_DTYPE(is_floating(dtype()), "requires_grad_: only floating-point tensors can require gradients, got ",
                       describe());
  if (m == nullptr && !requires_grad) return *this;
  impl()->ensure_autograd_meta().requires_grad = requires_grad;
  return *this;
}

Tensor Tensor::grad() const {
  const AutogradMeta* m = checked()->autograd_meta();
  return m ? m->grad : Tensor();
}

void Tensor::set_grad(const Tensor& grad) const {
  if (grad.defined()) {
    PRECIS_CHECK_SHAPE(grad.sizes() == sizes(), "set_grad: gradient ", grad.describe(),
                       " does not match the tensor ", describe());
    PRECIS_CHECK_DEVICE(grad.device() == device(), "set_grad: gradient ", grad.describe(), " is on another device than ",
                        describe());
  }
  checked()->ensure_autograd_meta().grad = grad;
}

bool Tensor::is_leaf() const {
  const AutogradMeta* m = checked()->autograd_meta();
  return m == nullptr || m->grad_fn == nullptr;
}

std::shared_ptr<autograd::Node> Tensor::grad_fn() const {
  const AutogradMeta* m = checked()->autograd_meta();
  return m ? m->grad_fn : nullptr;
}

void Tensor::backward(const Tensor& gradient, bool retain_graph) const {
  autograd::backward({*this}, {gradient}, retain_graph);
}

void Tensor::retain_grad() const {
  PRECIS_CHECK_T(StateError, requires_grad(), "retain_grad: ", describe(), " does not require grad");
  AutogradMeta& m = checked()->ensure_autograd_meta();
  if (m.grad_fn == nullptr || m.retains_grad) return;  // leaves keep .grad anyway
  m.retains_grad = true;
  m.grad_fn->retained().emplace_back(m.output_nr, impl_ptr());
}

int Tensor::register_hook(std::function<Tensor(const Tensor&)> hook) const {
  PRECIS_CHECK_T(StateError, requires_grad(), "register_hook: ", describe(),
                 " does not require grad, so no gradient will ever reach the hook");
  AutogradMeta& m = checked()->ensure_autograd_meta();
  const int id = g_next_hook_id.fetch_add(1);
  if (m.grad_fn) {
    m.grad_fn->pre_hooks().push_back({id, m.output_nr, std::move(hook)});
  } else {
    m.leaf_hooks.emplace_back(id, std::move(hook));
  }
  return id;
}

void Tensor::remove_hook(int handle) const {
  AutogradMeta* m = checked()->autograd_meta();
  if (m == nullptr) return;
  std::erase_if(m->leaf_hooks, [handle](const auto& h) { return h.first == handle; });
  if (m->grad_fn) std::erase_if(m->grad_fn->pre_hooks(), [handle](const auto& h) { return h.id == handle; });
  std::erase_if(m->post_accumulate_hooks, [handle](const auto& h) { return h.first == handle; });
}

int Tensor::register_post_accumulate_grad_hook(std::function<void(const Tensor&)> hook) const {
  PRECIS_CHECK_T(StateError, requires_grad() && is_leaf(), "register_post_accumulate_grad_hook: only leaf tensors "
                 "that require grad accumulate gradients; got ", describe());
  const int id = g_next_hook_id.fetch_add(1);
  checked()->ensure_autograd_meta().post_accumulate_hooks.emplace_back(id, std::move(hook));
  return id;
}

}  // namespace precis
