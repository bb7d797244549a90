// Bad-input cases (tests/support/op_cases.h) for the optimizer and clipping rows of the op table
// (sgd_step, adam_step, grad_norms, clip_grad_norm, clip_grad_value): the public calls that reach
// those kernels refuse what the kernels must never see, with the typed error.
#include <cmath>

#include "ops/functional.h"
#include "tensor/factory.h"
#include "optim/adam.h"
#include "optim/clip_grad.h"
#include "optim/sgd.h"
#include "tests/support/op_cases.h"

namespace precis::testing {
namespace {

Tensor param() { return ones({3}, {.requires_grad = true}); }
Tensor with_grad(DType grad_dtype) {
  Tensor p = param();
  p.set_grad(ones({3}, {.dtype = grad_dtype}));
  return p;
}

const bool kOptimizerSteps = register_error_cases({
    PRECIS_BAD_INPUT(sgd_step, ValueError, "a negative learning rate", optim::SGD({param()}, {.lr = -0.1}), "SGD",
                     "lr"),
    PRECIS_BAD_INPUT(sgd_step, ValueError, "Nesterov momentum without momentum",
                     optim::SGD({param()}, {.lr = 0.1, .nesterov = true}), "SGD", "esterov"),
    PRECIS_BAD_INPUT(adam_step, ValueError, "beta1 of 1", optim::Adam({param()}, {.betas = {1.0, 0.999}}), "Adam",
                     "beta1"),
    PRECIS_BAD_INPUT(adam_step, ValueError, "a negative beta2", optim::Adam({param()}, {.betas = {0.9, -0.5}}),
                     "Adam", "beta2"),
});

const bool kClipping = register_error_cases({
    PRECIS_BAD_INPUT(grad_norms, ValueError, "a zero norm type", optim::grad_norms({with_grad(DType::f32)}, 0.0),
                     "grad_norms", "norm_type"),
    PRECIS_BAD_INPUT(grad_norms, ValueError, "a negative norm type", optim::grad_norms({with_grad(DType::f32)}, -2.0),
                     "grad_norms", "norm_type"),
    PRECIS_BAD_INPUT(clip_grad_norm, ValueError, "a negative max_norm",
                     optim::clip_grad_norm_({with_grad(DType::f32)}, -1.0), "clip_grad_norm_", "max_norm"),
    PRECIS_BAD_INPUT(clip_grad_norm, ShapeError, "precomputed norms of another length",
                     optim::clip_grad_norm_({with_grad(DType::f32)}, 1.0, std::vector<double>{1.0, 2.0}),
                     "clip_grad_norm_"),
    PRECIS_BAD_INPUT(clip_grad_value, ValueError, "a negative clip value",
                     optim::clip_grad_value_({with_grad(DType::f32)}, -1.0), "clip_grad_value_", "clip_value"),
    PRECIS_BAD_INPUT(clip_grad_value, ValueError, "a NaN clip value",
                     optim::clip_grad_value_({with_grad(DType::f32)}, std::nan("")), "clip_grad_value_",
                     "clip_value"),
});

}  // namespace
}  // namespace precis::testing
