// Gradient-check cases for the view, copy and cast ops (forward behaviour of views is tested in
// tests/tensor/view_test.cpp).
#include <catch2/catch.hpp>

#include "core/device.h"
#include "ops/functional.h"
#include "tests/support/op_cases.h"
#include "tests/support/tensor_testing.h"

namespace precis::testing {
namespace {

TensorList one(Tensor t) { return {std::move(t)}; }

const bool kViewCases = register_grad_cases({
    {OpId::view, "reshape with -1", [] { return one(randn_input({2, 3, 4})); },
     [](const TensorList& x) { return one(x[0].reshape({4, -1}) * x[0].reshape({4, -1})); }},
    {OpId::view, "flatten, squeeze and unsqueeze of a non-contiguous input",
     [] { return one(non_contiguous(randn_input({3, 1, 4}))); },
     [](const TensorList& x) { return one(x[0].squeeze(1).unsqueeze(0).flatten() * 2.0); }},
    {OpId::permute, "permute and transpose", [] { return one(randn_input({2, 3, 4})); },
     [](const TensorList& x) { return one(x[0].permute({2, 0, 1}).transpose(0, 2) * sum(x[0].permute({1, 2, 0}))); }},
    {OpId::slice, "slice with a step, narrow and select", [] { return one(randn_input({5, 6})); },
     [](const TensorList& x) {
       return TensorList{x[0].slice(1, 1, 6, 2) * 3.0, x[0].narrow(0, 1, 2), x[0].select(0, -1)};
     }},
    {OpId::expand, "expand a size-1 dim and add a leading dim", [] { return one(randn_input({3, 1})); },
     [](const TensorList& x) { return one(x[0].expand({2, 3, 4}) * x[0].expand({2, 3, 4})); }},
    {OpId::clone, "clone of a non-contiguous input", [] { return one(non_contiguous(randn_input({3, 4}))); },
     [](const TensorList& x) { return one(x[0].clone() * x[0]); }},
    {OpId::cast, "f64 to f32 and back", [] { return one(randn_input({4})); },
     [](const TensorList& x) { return one(x[0].to(DType::f32).to(DType::f64) * 2.0); },
     {.eps = 1e-3, .atol = 1e-4, .rtol = 1e-3}},  // f32 round trip: a coarser step and tolerance
});

// to_device needs a second device; on a machine without CUDA the case is not registered and the
// coverage test skips the row (see coverage_test.cpp).
const bool kToDeviceCase = cuda_is_available() && register_grad_cases({
    {OpId::to_device, "cpu to cuda and back", [] { return one(randn_input({3})); },
     [](const TensorList& x) { return one(x[0].to(Device::cuda(0)).to(Device::cpu()) * 2.0); }},
});

}  // namespace
}  // namespace precis::testing
