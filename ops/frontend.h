#pragma once
// The one op front-end. An op is declared once, as a small struct beside its public function:
//
//   struct Sum {
//     static constexpr OpId id = OpId::sum;        // name, autocast category, kind: op_list.def
//     static constexpr Domain domain = Domain::any;   // the checks every operand gets
//     struct Saved { Shape keep_shape, x_shape; };  // what the derivative reads
//     static Tensor forward(OpContext<Saved>& ctx, const std::array<Tensor, 1>& in, <parameters>);  // the kernel
//     static TensorList backward(const Saved& s, const TensorList& grads);              // the derivative
//   };
//   Tensor sum(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
//     return detail::call<Sum>({x}, dims, keepdim);
//   }
//
// call<Op> runs the same four steps for every op, in this order:
//   1. the precision hook over the op's tensor operands (autocast casts them, the audit sees them:
//      ops/precision.h);
//   2. the checks the declaration names (defined, one device, the dtype domain), with errors that
//      name the op and each operand's shape, dtype and device;
//   3. Op::forward: shapes, output, the kernel from the op table; it fills ctx.saved when
//      ctx.grad says a gradient is needed (and only then, so inference keeps nothing);
//   4. when a gradient is needed, one backward node (autograd::record) owning Saved, which runs
//      Op::backward with grad mode off.
// A declaration may also give the name errors use (`static constexpr const char* name = "pow"`),
// name its operands for errors (`static constexpr const char* names[] =
// {"input", "weight"}`), let some be undefined (`static constexpr unsigned optional = 0b100`: a
// bias), and say that its kernel widens operand 0 from f16/bf16 itself (`static constexpr bool
// widens_first_in_kernel = true`; then ctx.first_widened). The ops a policy casts with (cast,
// clone, to_device) declare `static constexpr bool precision_hook = false`: the hook must not see
// its own casts. The element-wise binary ops declare `static constexpr bool cpu_scalars = true`:
// a 0-d CPU operand beside a device operand is used as a scalar on that device, as PyTorch allows
// (`x_cuda * torch.tensor(2.0)`), before the one-device check.
// Op::forward may clear ctx.grad when no node of its own is wanted: it returned an operand
// itself (dropout in eval mode) or a result its inner ops already recorded (a composed path).
// A declaration without `backward` (and `Saved`) is an op that records no node (comparisons).
// Index tensors, scalars and options are parameters, not operands: the hook never casts them and
// no gradient flows to them. An op whose front-end is genuinely different (a list of operands, a
// fused op with a composed fallback, two algorithms choosing what to keep) says why in one line
// where it is written out; tests/architecture/frontend_rule.py lists them.
#include <array>
#include <cstdint>
#include <span>
#include <tuple>
#include <type_traits>
#include <utility>

#include "autograd/record.h"
#include "core/error.h"
#include "ops/precision.h"

namespace precis::detail {

/// What every operand of an op must be, checked after the precision hook. Undefined operands are
/// refused unless the declaration lists them as optional (a bias).
enum class Domain : uint8_t {
  any,       ///< any dtype
  floating,  ///< f32, f64, f16, bf16
  numeric,   ///< any dtype but bool
};

/// What Op::forward receives besides its operands: whether a gradient is needed, and the state it
/// leaves for the derivative.
template <typename Saved>
struct OpContext {
  bool grad = false;  ///< a gradient is needed: fill `saved`
  /// Only for an op declaring `widens_first_in_kernel`: the policy left operand 0 in f16/bf16 for
  /// the kernel to widen as it reads it, so the result must be what in[0].to(f32) would give
  /// (apply_precision_widening_in_kernel, ops/precision.h).
  bool first_widened = false;
  Saved saved{};      ///< moved into the backward node when grad is true
};

/// A declaration's operand names, for errors; "input" for a one-operand op without a list.
template <typename Op>
constexpr const char* operand_name(size_t i) {
  if constexpr (requires { Op::names; }) {
    return Op::names[i];
  } else {
    return i == 0 ? "input" : "operand";
  }
}

/// The name errors give the op: its table name, or the declaration's `name` where users know it
/// by another (pow for pow_scalar).
template <typename Op>
const char* error_name() {
  if constexpr (requires { Op::name; }) {
    return Op::name;
  } else {
    return op_name(Op::id);
  }
}

template <typename Op>
constexpr bool is_optional(size_t i) {
  if constexpr (requires { Op::optional; }) {
    return ((Op::optional >> i) & 1u) != 0;
  } else {
    return false;
  }
}

template <typename Op>
constexpr bool runs_precision_hook() {
  if constexpr (requires { Op::precision_hook; }) {
    return Op::precision_hook;
  } else {
    return true;
  }
}

/// For an op declaring cpu_scalars: each 0-d CPU operand, when another operand is on a device,
/// becomes that value on the device (read on the host: no device wait; a fill, not a copy, so a
/// CUDA graph capture takes it, its value frozen as PyTorch's is); one that needs a gradient is
/// moved with to(), whose backward brings the gradient back. ops/binary.cpp.
void cpu_scalars_to_device(std::span<Tensor> operands);

/// Step 2 of call(): the declaration's checks.
template <typename Op, size_t N>
void check_operands(const std::array<Tensor, N>& in) {
  const char* op = error_name<Op>();
  const Tensor* first = nullptr;
  for (size_t i = 0; i < N; ++i) {
    const Tensor& t = in[i];
    if (!t.defined()) {
      PRECIS_CHECK(is_optional<Op>(i), op, ": the ", operand_name<Op>(i), " tensor is undefined");
      continue;
    }
    if constexpr (Op::domain == Domain::floating) {
      PRECIS_CHECK_DTYPE(t.is_floating_point(), op, ": expects a floating tensor, got ", operand_name<Op>(i), " ",
                         t.describe(), "; convert it first, e.g. ", op, "(x.to(DType::f32))");
    } else if constexpr (Op::domain == Domain::numeric) {
      PRECIS_CHECK_DTYPE(t.dtype() != DType::boolean, op, ": not defined for a bool ", operand_name<Op>(i), " ",
                         t.describe(), "; convert it first, e.g. ", op, "(x.to(DType::f32))");
    }
    if (first == nullptr) {
      first = &t;
    } else {
      PRECIS_CHECK_DEVICE(t.device() == first->device(), op, ": operands must be on the same device, got ",
                          operand_name<Op>(0), " ", first->describe(), " and ", operand_name<Op>(i), " ",
                          t.describe(), "; move one with .to(", first->device().str(), ")");
    }
  }
}

/// The tensor a backward node is recorded for: the result itself, or the first of a tuple
/// (max's values; its indices get no gradient).
inline const Tensor& recorded_output(const Tensor& result) { return result; }
template <typename... T>
const Tensor& recorded_output(const std::tuple<Tensor, T...>& result) {
  return std::get<0>(result);
}

/// The Saved of an op without a backward.
struct NoSaved {};

/// What Op::backward reads: Op::Saved, or NoSaved for an op without a backward.
template <typename Op>
struct SavedOf {
  using type = NoSaved;
};
template <typename Op>
  requires requires { typename Op::Saved; }
struct SavedOf<Op> {
  using type = typename Op::Saved;
};

/// Runs an op declared as above: hook, checks, forward, and its backward node when needed.
template <typename Op, size_t N, typename... Params>
auto call(const Tensor (&operands)[N], Params&&... params) {
  std::array<Tensor, N> in;
  for (size_t i = 0; i < N; ++i) in[i] = operands[i];
  OpContext<typename SavedOf<Op>::type> ctx;
  if (PrecisionPolicy* p = runs_precision_hook<Op>() ? t_precision_policy : nullptr) [[unlikely]] {
    if constexpr (requires { Op::widens_first_in_kernel; }) {
      ctx.first_widened = p->apply_widening_in_kernel(Op::id, in);
    } else {
      p->apply(Op::id, in);
    }
  }
  if constexpr (requires { Op::cpu_scalars; }) cpu_scalars_to_device(in);
  check_operands<Op>(in);
  constexpr bool differentiable = requires { &Op::backward; };
  if constexpr (differentiable) ctx.grad = autograd::needs_grad(std::span<const Tensor>(in));
  auto result = Op::forward(ctx, std::as_const(in), std::forward<Params>(params)...);
  if constexpr (differentiable) {
    if (ctx.grad)
      autograd::record(Op::id, autograd::TensorList(in.begin(), in.end()), {recorded_output(result)},
                       [saved = std::move(ctx.saved)](const autograd::TensorList& grads) -> autograd::TensorList {
                         return Op::backward(saved, grads);
                       });
  }
  return result;
}

}  // namespace precis::detail
