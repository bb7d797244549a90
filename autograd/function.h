#pragma once
// User-defined differentiable functions (torch.autograd.Function):
//
//   struct Square : autograd::Function<Square> {
//     static Tensor forward(autograd::FunctionContext& ctx, const Tensor& x) {
//       ctx.save_for_backward({x});
//       return x * x;              // runs with grad mode off
//     }
//     static autograd::TensorList backward(autograd::FunctionContext& ctx, const autograd::TensorList& g) {
//       Tensor x = ctx.saved()[0];
//       return {g[0] * x * 2.0};   // one gradient per forward tensor argument
//     }
//   };
//   Tensor y = Square::apply(x);
#include <memory>
#include <string>
#include <typeinfo>
#include <vector>

#include "autograd/grad_mode.h"
#include "autograd/node.h"

namespace precis::autograd {

/// State shared between a custom Function's forward and backward.
class FunctionContext {
 public:
  /// Keeps `tensors` for backward (replacing any saved before) as SavedTensors: aliases, no copy;
  /// saved() throws StateError if one is modified in place before backward.
  void save_for_backward(const TensorList& tensors);
  /// The saved tensors, version-checked.
  TensorList saved() const;
  /// Free-form values for backward (shapes, flags).
  std::vector<double> values;
  std::vector<int64_t> ints;  ///< free-form integers for backward (sizes, dims)

 private:
  std::vector<SavedTensor> saved_;
};

namespace detail {
std::shared_ptr<Node> record_custom(std::string name, const TensorList& inputs, const TensorList& outputs,
                                    std::shared_ptr<FunctionContext> ctx,
                                    TensorList (*backward)(FunctionContext&, const TensorList&));
bool any_requires_grad(const TensorList& inputs);
}  // namespace detail

/// The base of a user-defined differentiable function (torch.autograd.Function), used through
/// CRTP: Derived provides static `Tensor forward(FunctionContext&, args...)` and static
/// `TensorList backward(FunctionContext&, const TensorList& grad_outputs)`, returning one gradient
/// per Tensor argument of forward (undefined where none; ValueError on a wrong count). One tensor
/// output. A second backward through the node without retain_graph is a StateError.
template <typename Derived>
struct Function {
  /// Runs Derived::forward(ctx, args...) with grad mode off and, when any tensor argument needs
  /// grad, records a node that calls Derived::backward(ctx, grads). Tensor arguments are the
  /// differentiable inputs; other arguments are passed through.
  template <typename... Args>
  static Tensor apply(const Args&... args) {
    TensorList inputs;
    (collect(inputs, args), ...);
    auto ctx = std::make_shared<FunctionContext>();
    Tensor out;
    {
      NoGradGuard no_grad;
      out = Derived::forward(*ctx, args...);
    }
    for (const Tensor& in : inputs)
      if (out.is_same(in)) out = out.detach();  // the output must be a tensor of its own to carry grad_fn
    if (detail::any_requires_grad(inputs))  // false with grad mode off (needs_grad)
      detail::record_custom(typeid(Derived).name(), inputs, {out}, ctx, &Derived::backward);
    return out;
  }

 private:
  template <typename A>
  static void collect(TensorList& inputs, const A& a) {
    if constexpr (std::is_same_v<A, Tensor>) inputs.push_back(a);
  }
};

}  // namespace precis::autograd
