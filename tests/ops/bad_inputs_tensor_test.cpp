// Bad-input cases (tests/support/op_cases.h) for data movement, views, reductions, linear algebra,
// joining and indexing: at least two per op-table row, each with the typed error it must raise.
#include <limits>

#include "autograd/grad_mode.h"
#include "ops/functional.h"
#include "tests/support/op_cases.h"
#include "tests/support/tensor_testing.h"

namespace precis::testing {
namespace {

constexpr int64_t kMax = std::numeric_limits<int64_t>::max();

Tensor f32(const Shape& s) { return ones(s); }
Tensor i64(const Shape& s) { return zeros(s, {.dtype = DType::i64}); }
Tensor leaf(const Shape& s) { return ones(s, {.requires_grad = true}); }

const bool kDataMovement = register_error_cases({
    PRECIS_BAD_INPUT(copy, ShapeError, "source that does not broadcast to the destination",
                     f32({2, 3}).copy_(f32({4})), "copy_", "[2, 3]", "[4]"),
    PRECIS_BAD_INPUT(copy, StateError, "into a leaf that requires grad under grad mode",
                     leaf({2}).copy_(f32({2})), "copy_"),
    PRECIS_BAD_INPUT(fill, StateError, "a leaf that requires grad under grad mode", leaf({2}).fill_(1.0), "fill_"),
    PRECIS_BAD_INPUT(copy, ValueError, "an undefined source", f32({2}).copy_(Tensor()), "copy_",
                     "source tensor is undefined", "[2] f32 cpu"),
    PRECIS_BAD_INPUT(fill, ValueError, "an undefined tensor", Tensor().fill_(1.0), "fill_", "undefined"),
    PRECIS_BAD_INPUT(fill, ValueError, "a value an integer dtype cannot hold", i64({2}).fill_(1e19), "fill_", "1e+19",
                     "[2] i64 cpu", "without overflow"),
    PRECIS_BAD_INPUT(cast, ValueError, "an undefined tensor", cast(Tensor(), DType::f64), "cast", "undefined"),
    PRECIS_BAD_INPUT(cast, ValueError, "an undefined tensor through Tensor::to", Tensor().to(DType::f16), "to",
                     "undefined"),
    PRECIS_BAD_INPUT(to_device, ValueError, "an undefined tensor", Tensor().to(Device::cpu()), "to", "undefined"),
    PRECIS_BAD_INPUT(clone, ValueError, "an undefined tensor", Tensor().clone(), "clone", "undefined"),
    PRECIS_BAD_INPUT(clone, ValueError, "an undefined tensor under no_grad", ([] {
                       NoGradGuard g;
                       return Tensor().clone();
                     }()),
                     "clone", "undefined"),
    PRECIS_BAD_INPUT(to_device, DeviceError, "a CUDA index no machine has", f32({2}).to(Device::cuda(63)), "cuda:63"),
    PRECIS_BAD_INPUT(to_device, DeviceError, "a CUDA index past the device table", f32({2}).to(Device::cuda(64)),
                     "cuda:64"),
});

const bool kViews = register_error_cases({
    PRECIS_BAD_INPUT(view, ShapeError, "a size that does not match the element count", f32({2, 3}).view({4, 2}),
                     "view", "[4, 2]", "[2, 3]"),
    PRECIS_BAD_INPUT(view, ShapeError, "two -1 sizes", f32({2, 3}).view({-1, -1}), "view", "only one dimension"),
    PRECIS_BAD_INPUT(view, ShapeError, "a non-contiguous tensor", f32({2, 3}).t().view({6}), "view", "reshape()"),
    PRECIS_BAD_INPUT(view, ShapeError, "sizes whose product overflows int64", f32({4}).reshape({kMax, 2}), "reshape",
                     "overflows int64"),
    PRECIS_BAD_INPUT(permute, ShapeError, "a repeated dim", f32({2, 3}).permute({0, 0}), "permute", "repeated"),
    PRECIS_BAD_INPUT(permute, ShapeError, "too few dims", f32({2, 3, 4}).permute({1, 0}), "permute", "[2, 3, 4]"),
    PRECIS_BAD_INPUT(permute, IndexError, "a dim out of range", f32({2, 3}).permute({0, 5}), "permute", "5"),
    PRECIS_BAD_INPUT(slice, ValueError, "a zero step", f32({4}).slice(0, 0, 4, 0), "slice", "step"),
    PRECIS_BAD_INPUT(slice, ShapeError, "a 0-d tensor", scalar_tensor(1.0).slice(0, 0, 1), "slice", "0-d"),
    PRECIS_BAD_INPUT(slice, IndexError, "narrow past the end", f32({4}).narrow(0, 2, 3), "narrow", "[2, 5)"),
    PRECIS_BAD_INPUT(slice, IndexError, "select past the end", f32({4}).select(0, 4), "select", "index 4"),
    PRECIS_BAD_INPUT(expand, ShapeError, "to fewer dims", f32({2, 3}).expand({3}), "expand", "fewer dims"),
    PRECIS_BAD_INPUT(expand, ShapeError, "a size that is neither equal nor 1", f32({2, 3}).expand({4, 3}), "expand",
                     "(2)", "4"),
    PRECIS_BAD_INPUT(expand, ShapeError, "-1 for a new leading dim", f32({3}).expand({-1, 3}), "expand", "-1"),
    // An undefined tensor: each view names itself (they used to say only "operation on an
    // undefined tensor").
    PRECIS_BAD_INPUT(view, ValueError, "an undefined tensor", Tensor().view({2}), "view: the input tensor is undefined"),
    PRECIS_BAD_INPUT(view, ValueError, "an undefined tensor through reshape", Tensor().reshape({2}),
                     "reshape: the input tensor is undefined"),
    PRECIS_BAD_INPUT(view, ValueError, "an undefined tensor through flatten", Tensor().flatten(),
                     "flatten: the input tensor is undefined"),
    PRECIS_BAD_INPUT(view, ValueError, "an undefined tensor through squeeze", Tensor().squeeze(0),
                     "squeeze: the input tensor is undefined"),
    PRECIS_BAD_INPUT(view, ValueError, "an undefined tensor through unsqueeze", Tensor().unsqueeze(0),
                     "unsqueeze: the input tensor is undefined"),
    PRECIS_BAD_INPUT(permute, ValueError, "an undefined tensor", Tensor().permute({0}), "permute: the input tensor"),
    PRECIS_BAD_INPUT(permute, ValueError, "an undefined tensor through transpose", Tensor().transpose(0, 1),
                     "transpose: the input tensor is undefined"),
    PRECIS_BAD_INPUT(permute, ValueError, "an undefined tensor through t", Tensor().t(), "t: the input tensor"),
    PRECIS_BAD_INPUT(slice, ValueError, "an undefined tensor", Tensor().slice(0, 0, 1), "slice: the input tensor"),
    PRECIS_BAD_INPUT(slice, ValueError, "an undefined tensor through narrow", Tensor().narrow(0, 0, 1),
                     "narrow: the input tensor is undefined"),
    PRECIS_BAD_INPUT(slice, ValueError, "an undefined tensor through select", Tensor().select(0, 0),
                     "select: the input tensor is undefined"),
    PRECIS_BAD_INPUT(expand, ValueError, "an undefined tensor", Tensor().expand({2}), "expand: the input tensor"),
    PRECIS_BAD_INPUT(clone, ValueError, "an undefined tensor through contiguous", Tensor().contiguous(),
                     "contiguous: the input tensor is undefined"),
    PRECIS_BAD_INPUT(view, ValueError, "an undefined tensor through detach", Tensor().detach(),
                     "detach: the input tensor is undefined"),
});

const bool kReductions = register_error_cases({
    PRECIS_BAD_INPUT(sum, IndexError, "a dim out of range", sum(f32({2, 3}), {2}), "sum", "dimension 2"),
    PRECIS_BAD_INPUT(sum, ValueError, "an undefined tensor", sum(Tensor()), "sum", "undefined"),
    PRECIS_BAD_INPUT(mean, IndexError, "a dim out of range", mean(f32({2, 3}), {-3}), "mean", "dimension -3"),
    PRECIS_BAD_INPUT(mean, DTypeError, "an integer tensor", mean(i64({3})), "mean", "i64"),
    PRECIS_BAD_INPUT(max, ValueError, "an empty tensor", max(f32({0})), "max", "empty"),
    PRECIS_BAD_INPUT(max, ValueError, "a reduced dim of size 0", max(f32({2, 0}), 1), "max", "size 0"),
    PRECIS_BAD_INPUT(max, IndexError, "a dim out of range", max(f32({2}), 1), "max", "dimension 1"),
    PRECIS_BAD_INPUT(var, DTypeError, "an integer tensor", var(i64({3})), "var", "i64"),
    PRECIS_BAD_INPUT(var, IndexError, "a dim out of range", var(f32({3}), {4}), "var", "dimension 4"),
});

const bool kLinalg = register_error_cases({
    PRECIS_BAD_INPUT(matmul, ShapeError, "inner sizes that differ", matmul(f32({2, 3}), f32({4, 5})), "matmul",
                     "[2, 3]", "[4, 5]"),
    PRECIS_BAD_INPUT(matmul, DTypeError, "operands of different dtypes",
                     matmul(f32({2, 2}), ones({2, 2}, {.dtype = DType::f64})), "matmul", "f32", "f64"),
    PRECIS_BAD_INPUT(matmul, ShapeError, "a 0-d operand", matmul(scalar_tensor(1.0), f32({2})), "matmul"),
    PRECIS_BAD_INPUT(linear, ShapeError, "a weight whose in_features differ", linear(f32({2, 3}), f32({4, 5})),
                     "linear", "[4, 5]"),
    PRECIS_BAD_INPUT(linear, ShapeError, "a bias of the wrong size", linear(f32({2, 3}), f32({4, 3}), f32({5})),
                     "linear", "[5]"),
});

const bool kJoinIndex = register_error_cases({
    PRECIS_BAD_INPUT(cat, ValueError, "an empty list", cat({}), "cat", "non-empty"),
    PRECIS_BAD_INPUT(cat, ShapeError, "sizes that differ outside the dim", cat({f32({2, 3}), f32({2, 4})}, 0),
                     "cat", "position 1", "[2, 4]"),
    PRECIS_BAD_INPUT(cat, ShapeError, "a 0-d tensor", cat({f32({2}), scalar_tensor(1.0)}), "cat", "zero-dimensional"),
    PRECIS_BAD_INPUT(cat, ShapeError, "sizes along the dim that add past int64",
                     cat({f32({1}).expand({kMax}), f32({2})}), "cat", "int64"),
    PRECIS_BAD_INPUT(stack, ValueError, "an empty list", stack({}), "stack"),
    PRECIS_BAD_INPUT(stack, ShapeError, "shapes that differ", stack({f32({2}), f32({3})}), "stack", "[3]"),
    PRECIS_BAD_INPUT(index_select, DTypeError, "a floating index", index_select(f32({3, 2}), 0, f32({1})),
                     "index_select", "f32"),
    PRECIS_BAD_INPUT(index_select, IndexError, "an index out of range", index_select(f32({3, 2}), 0, i64({1}) + 3),
                     "index_select", "3"),
    PRECIS_BAD_INPUT(index_select, ShapeError, "a 2-D index", index_select(f32({3, 2}), 0, i64({1, 1})),
                     "index_select"),
    PRECIS_BAD_INPUT(gather, IndexError, "an index out of range", gather(f32({3, 2}), 0, i64({1, 2}) - 1), "gather",
                     "-1"),
    PRECIS_BAD_INPUT(gather, ShapeError, "an index of another rank", gather(f32({3, 2}), 0, i64({2})), "gather"),
    PRECIS_BAD_INPUT(gather, DTypeError, "a floating index", gather(f32({3, 2}), 0, f32({1, 2})), "gather", "f32"),
    PRECIS_BAD_INPUT(index_add, ShapeError, "a source of the wrong shape",
                     index_add(f32({3, 2}), 0, i64({2}), f32({2, 3})), "index_add"),
    PRECIS_BAD_INPUT(index_add, IndexError, "an index out of range", index_add(f32({3, 2}), 0, i64({1}) + 7, f32({1, 2})),
                     "index_add", "7"),
    PRECIS_BAD_INPUT(scatter_add, IndexError, "an index out of range",
                     scatter_add(f32({3, 2}), 0, i64({1, 2}) + 3, f32({1, 2})), "scatter_add", "3"),
    PRECIS_BAD_INPUT(scatter_add, DTypeError, "a source of another dtype",
                     scatter_add(f32({3, 2}), 0, i64({1, 2}), ones({1, 2}, {.dtype = DType::f64})), "scatter_add"),
});

}  // namespace
}  // namespace precis::testing
