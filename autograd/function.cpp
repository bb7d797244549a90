#include "autograd/function.h"

#include <cxxabi.h>

#include <cstdlib>

#include "autograd/record.h"

namespace precis::autograd {

void FunctionContext::save_for_backward(const TensorList& tensors) {
  saved_.clear();
  for (const Tensor& t : tensors) saved_.emplace_back(t);
}

TensorList FunctionContext::saved() const {
  TensorList out;
  for (const SavedTensor& s : saved_) out.push_back(s.unpack("custom Function"));
  return out;
}

namespace detail {

namespace {
// A custom Function's node: calls the user's static backward with the shared context.
class CustomNode final : public Node {
 public:
  CustomNode(std::string name, std::shared_ptr<FunctionContext> ctx,
             TensorList (*backward)(FunctionContext&, const TensorList&))
      : name_(std::move(name)), ctx_(std::move(ctx)), backward_(backward) {}
  TensorList apply(TensorList&& grads) override {
    PRECIS_CHECK_T(StateError, ctx_ != nullptr, name_, ": backward through this custom Function a second time; "
                   "pass retain_graph=true to the first backward()");
    TensorList out = backward_(*ctx_, grads);
    PRECIS_CHECK(out.size() == next_edges().size(), name_, "::backward returned ", out.size(),
                 " gradients, but forward took ", next_edges().size(), " tensor arguments; return one per tensor "
                 "argument (an undefined Tensor for those without a gradient)");
    return out;
  }
  std::string name() const override { return name_; }
  void release_saved() override { ctx_.reset(); }

 private:
  std::string name_;
  std::shared_ptr<FunctionContext> ctx_;
  TensorList (*backward_)(FunctionContext&, const TensorList&);
};
}  // namespace

std::shared_ptr<Node> record_custom(std::string name, const TensorList& inputs, const TensorList& outputs,
                                    std::shared_ptr<FunctionContext> ctx,
                                    TensorList (*backward)(FunctionContext&, const TensorList&)) {
  int status = 0;
  char* demangled = abi::__cxa_demangle(name.c_str(), nullptr, nullptr, &status);
  if (status == 0 && demangled != nullptr) name = demangled;
  std::free(demangled);
  auto node = std::make_shared<CustomNode>(std::move(name), std::move(ctx), backward);
  attach(node, inputs, outputs);
  return node;
}

bool any_requires_grad(const TensorList& inputs) { return needs_grad(inputs); }

}  // namespace detail
}  // namespace precis::autograd
