// Binary element-wise ops, comparisons, where and masked_fill: broadcasting, dtype promotion,
// scalar operands, forward and backward. Kernels: ops/cpu/binary.cpp.
//
// Promotion casts the operands with cast() (differentiable), so a gradient reaching a promoted
// operand flows back through the cast to the caller's dtype. Backward reduces the gradient of a
// broadcast operand to its own shape with sum_to.
#include <cmath>
#include <optional>
#include <utility>

#include "ops/frontend.h"
#include "ops/detail/broadcast.h"
#include "ops/functional.h"
#include "ops/contracts/kernels.h"
#include "ops/detail/scalar_check.h"
#include "tensor/factory.h"

namespace precis {

using autograd::SavedTensor;
using autograd::TensorList;
using detail::Domain;
using detail::OpContext;

Shape broadcast_shapes(const char* op, std::initializer_list<const Tensor*> operands,
                       std::initializer_list<const char*> names) {
  size_t ndim = 0;
  for (const Tensor* t : operands) ndim = std::max(ndim, t->sizes().size());
  Shape out(ndim, 1);
  bool ok = true;
  for (const Tensor* t : operands) {
    const Shape& s = t->sizes();
    const size_t lead = ndim - s.size();
    for (size_t i = 0; i < s.size(); ++i) {
      int64_t& o = out[lead + i];
      if (s[i] == o || s[i] == 1) continue;
      if (o == 1) {
        o = s[i];
      } else {
        ok = false;
      }
    }
  }
  if (!ok) [[unlikely]] {
    std::string desc;
    auto name = names.begin();
    for (const Tensor* t : operands) {
      if (!desc.empty()) desc += ", ";
      desc += std::string(name != names.end() ? *name++ : "operand") + " " + t->describe();
    }
    throw ShapeError(detail::str_cat(op, ": shapes cannot be broadcast together: ", desc,
                                     " (sizes must match or be 1 in each dim, aligned from the right)"));
  }
  return out;
}

void detail::cpu_scalars_to_device(std::span<Tensor> operands) {
  const Tensor* on_device = nullptr;
  for (const Tensor& t : operands)
    if (t.defined() && !t.device().is_cpu()) on_device = &t;
  if (on_device == nullptr) return;
  const Device device = on_device->device();
  for (Tensor& t : operands) {
    if (!t.defined() || !t.device().is_cpu() || t.dim() != 0) continue;
    if (t.requires_grad() && is_grad_enabled()) {
      t = t.to(device);
      continue;
    }
    const Scalar v = is_floating(t.dtype()) ? Scalar(t.item<double>())
                     : t.dtype() == DType::boolean ? Scalar(t.item<bool>())
                                                   : Scalar(t.item<int64_t>());
    t = full({}, v, {.dtype = t.dtype(), .device = device});
  }
}

namespace {
// bool < integer < floating.
int category_rank(DType t) { return t == DType::boolean ? 0 : is_integral(t) ? 1 : 2; }
}  // namespace

DType result_type(std::span<const Tensor* const> operands, bool floating_only) {
  std::optional<DType> dimensioned, zero_dim;
  for (const Tensor* t : operands) {
    if (!t->defined() || (floating_only && !is_floating(t->dtype()))) continue;
    std::optional<DType>& r = t->dim() == 0 ? zero_dim : dimensioned;
    r = r ? promote_types(*r, t->dtype()) : t->dtype();
  }
  if (floating_only && !dimensioned && !zero_dim) return DType::f32;
  PRECIS_INTERNAL_ASSERT(dimensioned || zero_dim, "result_type: no defined operand");
  if (!dimensioned) return *zero_dim;
  if (!zero_dim || category_rank(*zero_dim) <= category_rank(*dimensioned)) return *dimensioned;
  return promote_types(*dimensioned, *zero_dim);
}

namespace {

void check_defined(const char* op, const Tensor& t, const char* name) {
  PRECIS_CHECK(t.defined(), op, ": operand ", name, " is undefined");
}

void check_same_device(const char* op, const Tensor& a, const char* an, const Tensor& b, const char* bn) {
  PRECIS_CHECK_DEVICE(a.device() == b.device(), op, ": operands must be on the same device, got ", an, " ",
                      a.describe(), " and ", bn, " ", b.describe(), "; move one with .to(", a.device().str(), ")");
}


// How a binary op promotes integer operands.
enum class Promotion { Arithmetic, TrueDivision };

// The dtype two operands compute in: their common one (result_type); TrueDivision: integer/bool
// operands go to f32 (PyTorch's `/`).
DType promoted_dtype(const Tensor& a, const Tensor& b, Promotion promotion) {
  const DType dt = result_type({&a, &b});
  return promotion == Promotion::TrueDivision && !is_floating(dt) ? DType::f32 : dt;
}

// An operand in the dtype the kernel computes in. Outside the graph: the op's node is recorded
// against the operand itself, and its backward rounds the gradient back to the operand's dtype,
// exactly as a recorded cast's backward would.
// (The kernels and saved tensors detach what they read, so an operand already in that dtype is
// passed as it is.)
Tensor promoted(const Tensor& t, DType dt) { return t.dtype() == dt ? t : t.detach().to(dt); }

// A gradient computed at the broadcast shape in the compute dtype, brought back to an operand:
// summed to its shape, rounded to its dtype.
Tensor grad_for(const Tensor& g, const Shape& shape, DType dtype) {
  Tensor r = g.sizes() == shape ? g : sum_to(g, shape);
  return r.dtype() == dtype ? r : r.to(dtype);
}

// Runs op's binary kernel (keyed by the operands' dtype) on a and b expanded to `shape`, into an
// output in the operands' shared layout (empty_elementwise).
Tensor run_binary(OpId op, const Tensor& a, const Tensor& b, const Shape& shape, DType out_dtype, double alpha = 1.0) {
  Tensor out = empty_elementwise(shape, out_dtype, a.device(), {&a, &b}, op_name(op));
  // detach(): the expansion is an implementation detail, not part of the graph.
  kernel<kernels::BinaryKernel>(op, a.device().type, a.dtype())(out, a.detach().expand(shape),
                                                                b.detach().expand(shape), alpha);
  return out;
}

// The dtype a scalar operand takes next to a tensor of dtype t (PyTorch): the tensor's, unless
// the scalar is of a higher category (bool < integer < floating), then that category's default
// (i64 or f32).
DType scalar_operand_dtype(DType t, Scalar s) {
  auto rank = [](DType d) { return is_floating(d) ? 2 : is_integral(d) ? 1 : 0; };
  const DType sd = s.default_dtype();
  return rank(sd) > rank(t) ? sd : t;
}

// s rounded to a low-precision dtype dt, as a float (s itself for the other dtypes).
float rounded_to(Scalar s, DType dt) {
  const float f = static_cast<float>(s.to_double());
  if (!is_low_precision(dt)) return f;
  return dt == DType::f16 ? static_cast<float>(Half(f)) : static_cast<float>(BFloat16(f));
}

// True when s survives a round trip through a low-precision dtype (always for the others).
bool exactly_representable(Scalar s, DType dt) {
  if (!is_low_precision(dt)) return true;
  const double v = s.to_double();
  return static_cast<double>(static_cast<float>(v)) == v && rounded_to(s, dt) == static_cast<float>(v);
}

// How an f16/bf16 tensor's op takes a floating scalar it cannot hold exactly (PyTorch 2.15 on the
// CPU, checked op by op): mul and div keep it in the fp32 compute type; add, sub, the comparisons,
// maximum and minimum round it to the tensor's dtype first (so `x_f16 == 0.1` is true where x
// holds f16's 0.1).
enum class ScalarAt { compute_type, operand_dtype };

// Applies fn(tensor, scalar-as-0-d-tensor). A scalar that f16/bf16 cannot hold exactly is, for
// ScalarAt::compute_type, applied in f32 and the result rounded once, as PyTorch keeps it in the
// compute type; for ScalarAt::operand_dtype it is rounded to the tensor's dtype, unless that
// overflows (a loss scale of 65536·2 next to f16: PyTorch refuses, here it is applied in f32).
// Exact scalars take the direct path. Likewise an integer scalar past i32's range next to an i32
// tensor is applied in i64: comparisons are exact, and arithmetic results wrap into i32 once, the
// value PyTorch's wraparound gives.
template <typename F>
Tensor with_scalar(const char* op, const Tensor& a, Scalar s, ScalarAt at, F&& fn) {
  check_defined(op, a, "a");
  const bool round_to_operand = at == ScalarAt::operand_dtype && std::isfinite(rounded_to(s, a.dtype()));
  if (!exactly_representable(s, a.dtype()) && !round_to_operand) {
    Tensor r = fn(a.to(DType::f32), scalar_tensor(s, {.dtype = DType::f32, .device = a.device()}));
    return r.dtype() == DType::f32 ? r.to(a.dtype()) : r;
  }
  const DType sd = scalar_operand_dtype(a.dtype(), s);
  if (!s.fits(sd)) {
    Tensor r = fn(a.to(DType::i64), scalar_tensor(s, {.dtype = DType::i64, .device = a.device()}));
    return r.dtype() == DType::i64 ? r.to(a.dtype()) : r;
  }
  return fn(a, scalar_tensor(s, {.dtype = sd, .device = a.device()}));
}

// PyTorch refuses a fractional alpha with integer operands; the default alpha (1.0) is fine. An
// integer alpha must also fit the operands' dtype (PyTorch converts it with an overflow check):
// the kernels multiply in that dtype.
void check_alpha(const char* op, const Tensor& a, const Tensor& b, Scalar alpha) {
  const double v = alpha.to_double();
  PRECIS_CHECK_DTYPE(is_floating(a.dtype()) || !alpha.is_floating() || v == std::trunc(v), op,
                     ": alpha must be an integer for ",
                     dtype_name(a.dtype()), " operands (got ", scalar_str(alpha), "); convert the tensors with .to(DType::f32)");
  check_scalar_fits(op, "alpha", alpha, a.dtype(), detail::str_cat("operands a ", a.describe(), ", b ", b.describe()));
}

// When a binary op keeps an operand for its backward (ops/binary_ops.def).
enum class Keep { never, for_a, for_b, always };

constexpr bool kept(Keep k, bool need_a, bool need_b) {
  return k == Keep::always || (k == Keep::for_a && need_a) || (k == Keep::for_b && need_b);
}

using GradPair = std::pair<Tensor, Tensor>;

// The declaration of every differentiable binary op (ops/frontend.h): broadcast, promote, the
// kernel; the derivative D::of(grad, a, b, need_a, need_b, param) = {ga, gb} at the broadcast
// shape in the compute dtype (undefined where not needed), a and b being the promoted operands
// kept as KA / KB say (undefined otherwise). `alpha` is add/sub's (checked against the promoted
// dtype); `param` is what the derivative needs besides the operands.
template <OpId Id, Promotion P, Keep KA, Keep KB, typename Derivative>
struct Binary {
  static constexpr OpId id = Id;
  static constexpr Domain domain = Domain::any;
  static constexpr const char* names[] = {"a", "b"};
  static constexpr bool cpu_scalars = true;
  struct Saved {
    SavedTensor a, b;
    bool need_a = false, need_b = false;
    Shape shape_a, shape_b;
    DType dtype_a = DType::f32, dtype_b = DType::f32;
    double param = 0.0;
  };
  static Tensor forward(OpContext<Saved>& ctx, const std::array<Tensor, 2>& in, Scalar alpha, double param) {
    const char* op = op_name(Id);
    const Shape shape = broadcast_shapes(op, {&in[0], &in[1]}, {"a", "b"});
    const DType dt = promoted_dtype(in[0], in[1], P);
    const Tensor a = promoted(in[0], dt), b = promoted(in[1], dt);
    if constexpr (Id == OpId::add || Id == OpId::sub) check_alpha(op, a, b, alpha);
    Tensor out = run_binary(Id, a, b, shape, dt, alpha.to_double());
    if (ctx.grad) {
      const bool need_a = in[0].requires_grad(), need_b = in[1].requires_grad();
      ctx.saved = {kept(KA, need_a, need_b) ? SavedTensor(a) : SavedTensor(),
                   kept(KB, need_a, need_b) ? SavedTensor(b) : SavedTensor(),
                   need_a, need_b, in[0].sizes(), in[1].sizes(), in[0].dtype(), in[1].dtype(), param};
    }
    return out;
  }
  static TensorList backward(const Saved& s, const TensorList& g) {
    const char* op = op_name(Id);
    const auto [ga, gb] = Derivative::of(g[0], s.a.unpack(op), s.b.unpack(op), s.need_a, s.need_b, s.param);
    return {s.need_a ? grad_for(ga, s.shape_a, s.dtype_a) : Tensor(),
            s.need_b ? grad_for(gb, s.shape_b, s.dtype_b) : Tensor()};
  }
};

// add / sub: param = the factor of b's gradient (alpha, negated for sub).
struct AddSubDerivative {
  static GradPair of(const Tensor& grad, const Tensor&, const Tensor&, bool need_a, bool need_b, double gb_scale) {
    return GradPair{need_a ? grad : Tensor(), need_b ? (gb_scale == 1.0 ? grad : mul(grad, gb_scale)) : Tensor()};
  }
};

// maximum / minimum: the gradient goes to the selected operand, split in half on ties (PyTorch).
// param: 1 for maximum, 0 for minimum.
struct MaxMinDerivative {
  static GradPair of(const Tensor& grad, const Tensor& a, const Tensor& b, bool need_a, bool need_b, double is_max) {
    const Tensor shared = where(eq(a, b), mul(grad, 0.5), grad);
    // a loses where it is below (maximum) or above (minimum) b; NaN loses nowhere.
    return GradPair{need_a ? masked_fill(shared, is_max != 0.0 ? lt(a, b) : gt(a, b), 0) : Tensor(),
                    need_b ? masked_fill(shared, is_max != 0.0 ? gt(a, b) : lt(a, b), 0) : Tensor()};
  }
};

template <OpId Id>
struct AddSub : Binary<Id, Promotion::Arithmetic, Keep::never, Keep::never, AddSubDerivative> {};
template <OpId Id>
struct MaxMin : Binary<Id, Promotion::Arithmetic, Keep::always, Keep::always, MaxMinDerivative> {};

// Comparisons: a bool result, no backward node.
template <OpId Id>
struct Compare {
  static constexpr OpId id = Id;
  static constexpr Domain domain = Domain::any;
  static constexpr const char* names[] = {"a", "b"};
  static constexpr bool cpu_scalars = true;
  static Tensor forward(OpContext<detail::NoSaved>&, const std::array<Tensor, 2>& in) {
    const Shape shape = broadcast_shapes(op_name(Id), {&in[0], &in[1]}, {"a", "b"});
    const DType dt = promoted_dtype(in[0], in[1], Promotion::Arithmetic);
    return run_binary(Id, promoted(in[0], dt), promoted(in[1], dt), shape, DType::boolean);
  }
};

// where(cond, a, b): cond is a parameter (no gradient, never cast); a and b promote to their
// common dtype.
struct Where {
  static constexpr OpId id = OpId::where;
  static constexpr Domain domain = Domain::any;
  static constexpr const char* names[] = {"a", "b"};
  struct Saved {
    Tensor cond;
    bool need_a = false, need_b = false;
    Shape shape_a, shape_b;
    DType dtype_a = DType::f32, dtype_b = DType::f32;
  };
  static Tensor forward(OpContext<Saved>& ctx, const std::array<Tensor, 2>& in, const Tensor& cond) {
    const Tensor& a = in[0];
    const Tensor& b = in[1];
    check_defined("where", cond, "cond");
    PRECIS_CHECK_DTYPE(cond.dtype() == DType::boolean, "where: cond must be bool, got cond ", cond.describe(), " (a ",
                       a.describe(), ", b ", b.describe(), "); build it with a comparison or .to(DType::boolean)");
    check_same_device("where", cond, "cond", a, "a");
    const Shape shape = broadcast_shapes("where", {&cond, &a, &b}, {"cond", "a", "b"});
    const DType dt = result_type({&a, &b});
    const Tensor ac = promoted(a, dt), bc = promoted(b, dt);
    Tensor out = empty_elementwise(shape, dt, a.device(), {&cond, &ac, &bc}, "where");
    kernel<kernels::WhereKernel>(OpId::where, a.device().type, dt)(out, cond.expand(shape), ac.detach().expand(shape),
                                                                   bc.detach().expand(shape));
    if (ctx.grad)
      ctx.saved = {cond.detach(), a.requires_grad(), b.requires_grad(), a.sizes(), b.sizes(), a.dtype(), b.dtype()};
    return out;
  }
  static TensorList backward(const Saved& s, const TensorList& g) {
    Tensor ga, gb;
    if (s.need_a) ga = grad_for(where(s.cond, g[0], 0), s.shape_a, s.dtype_a);
    if (s.need_b) gb = grad_for(masked_fill(g[0], s.cond, 0), s.shape_b, s.dtype_b);
    return {ga, gb};
  }
};

// masked_fill(x, mask, value): mask and value are parameters.
struct MaskedFill {
  static constexpr OpId id = OpId::masked_fill;
  static constexpr Domain domain = Domain::any;
  static constexpr const char* names[] = {"x"};
  struct Saved {
    Tensor mask;
    Shape shape_x;
  };
  static Tensor forward(OpContext<Saved>& ctx, const std::array<Tensor, 1>& in, const Tensor& mask, Scalar value) {
    const Tensor& x = in[0];
    check_defined("masked_fill", mask, "mask");
    PRECIS_CHECK_DTYPE(mask.dtype() == DType::boolean, "masked_fill: mask must be bool, got mask ", mask.describe(),
                       " (x ", x.describe(), "); build it with a comparison or .to(DType::boolean)");
    check_same_device("masked_fill", x, "x", mask, "mask");
    check_scalar_fits("masked_fill", "fill value", value, x.dtype(),
                      detail::str_cat("x ", x.describe(), ", mask ", mask.describe()));
    const Shape shape = broadcast_shapes("masked_fill", {&x, &mask}, {"x", "mask"});
    // x's layout, as PyTorch's masked_fill (a masked_fill_ on a layout-preserving clone of x).
    Tensor out = empty_elementwise(shape, x.dtype(), x.device(), {&x}, "masked_fill");
    kernel<kernels::MaskedFillKernel>(OpId::masked_fill, x.device().type, x.dtype())(out, x.detach().expand(shape),
                                                                                     mask.expand(shape), value);
    if (ctx.grad) ctx.saved = {mask.detach(), x.sizes()};
    return out;
  }
  static TensorList backward(const Saved& s, const TensorList& g) {
    return {grad_for(masked_fill(g[0], s.mask, 0), s.shape_x, g[0].dtype())};
  }
};

}  // namespace

Tensor add(const Tensor& a, const Tensor& b, Scalar alpha) {
  return detail::call<AddSub<OpId::add>>({a, b}, alpha, alpha.to_double());
}
Tensor sub(const Tensor& a, const Tensor& b, Scalar alpha) {
  return detail::call<AddSub<OpId::sub>>({a, b}, alpha, -alpha.to_double());
}

// One declaration and one public function per row of the table.
#define PRECIS_BINARY(op, promotion, keep_a, keep_b, grad_a, grad_b)                                         \
  namespace {                                                                                                \
  struct op##_derivative {                                                                                   \
    static GradPair of(const Tensor& grad, [[maybe_unused]] const Tensor& a, [[maybe_unused]] const Tensor& b, \
                       bool need_a, bool need_b, double) {                                                   \
      return GradPair{need_a ? (grad_a) : Tensor(), need_b ? (grad_b) : Tensor()};                           \
    }                                                                                                        \
  };                                                                                                         \
  }                                                                                                          \
  Tensor op(const Tensor& a, const Tensor& b) {                                                              \
    return detail::call<Binary<OpId::op, Promotion::promotion, Keep::keep_a, Keep::keep_b, op##_derivative>>( \
        {a, b}, Scalar(1.0), 0.0);                                                                           \
  }
#include "ops/binary_ops.def"
#undef PRECIS_BINARY

Tensor maximum(const Tensor& a, const Tensor& b) { return detail::call<MaxMin<OpId::maximum>>({a, b}, Scalar(1.0), 1.0); }
Tensor minimum(const Tensor& a, const Tensor& b) { return detail::call<MaxMin<OpId::minimum>>({a, b}, Scalar(1.0), 0.0); }

// The scalar-operand forms: the tensor form with the scalar as a 0-d tensor (with_scalar).
#define PRECIS_DEFINE_SCALAR_FORM(name, at)                                                          \
  Tensor name(const Tensor& a, Scalar b) {                                                            \
    return with_scalar(#name, a, b, at, [](const Tensor& x, const Tensor& s) { return name(x, s); }); \
  }
PRECIS_DEFINE_SCALAR_FORM(add, ScalarAt::operand_dtype)
PRECIS_DEFINE_SCALAR_FORM(sub, ScalarAt::operand_dtype)
PRECIS_DEFINE_SCALAR_FORM(mul, ScalarAt::compute_type)
PRECIS_DEFINE_SCALAR_FORM(div, ScalarAt::compute_type)
PRECIS_DEFINE_SCALAR_FORM(maximum, ScalarAt::operand_dtype)
PRECIS_DEFINE_SCALAR_FORM(minimum, ScalarAt::operand_dtype)

#define PRECIS_DEFINE_COMPARISON(name)                                                \
  Tensor name(const Tensor& a, const Tensor& b) { return detail::call<Compare<OpId::name>>({a, b}); } \
  PRECIS_DEFINE_SCALAR_FORM(name, ScalarAt::operand_dtype)
PRECIS_DEFINE_COMPARISON(eq)
PRECIS_DEFINE_COMPARISON(ne)
PRECIS_DEFINE_COMPARISON(lt)
PRECIS_DEFINE_COMPARISON(le)
PRECIS_DEFINE_COMPARISON(gt)
PRECIS_DEFINE_COMPARISON(ge)
#undef PRECIS_DEFINE_COMPARISON
#undef PRECIS_DEFINE_SCALAR_FORM

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) { return detail::call<Where>({a, b}, cond); }

Tensor where(const Tensor& cond, const Tensor& a, Scalar b) {
  check_defined("where", a, "a");
  const DType bd = scalar_operand_dtype(a.dtype(), b);
  // An integer scalar past i32's range next to an i32 tensor: selected in i64, then wrapped into
  // i32 once (PyTorch's wraparound), as in with_scalar.
  if (!b.fits(bd)) return where(cond, a.to(DType::i64), scalar_tensor(b, {.dtype = DType::i64, .device = a.device()})).to(a.dtype());
  return where(cond, a, scalar_tensor(b, {.dtype = bd, .device = a.device()}));
}

Tensor masked_fill(const Tensor& x, const Tensor& mask, Scalar value) {
  return detail::call<MaskedFill>({x}, mask, value);
}

Tensor clamp(const Tensor& x, std::optional<Scalar> min, std::optional<Scalar> max) {
  check_defined("clamp", x, "x");
  PRECIS_CHECK(min || max, "clamp: give min, max or both (x ", x.describe(), ")");
  // PyTorch's result type: a bound of a higher kind promotes (an i64 tensor clamped at 1.5 is f32,
  // a bool one clamped at 0 is i64); it was x's dtype, which truncated the bound.
  DType dt = x.dtype();
  for (const auto& bound : {min, max})
    if (bound) dt = scalar_operand_dtype(dt, *bound);
  const Tensor xt = dt == x.dtype() ? x : x.to(dt);
  // A NaN bound makes every element NaN with no gradient (PyTorch).
  for (const auto& bound : {min, max})
    if (bound && bound->is_floating() && std::isnan(bound->to_double()))
      return masked_fill(xt, ones(xt.sizes(), {.dtype = DType::boolean, .device = xt.device()}), *bound);
  Tensor out = xt;
  // le/ge: an element at a bound is refilled with its own value, so that (as PyTorch's clamp with
  // scalar bounds) no gradient passes there.
  if (min) out = masked_fill(out, le(xt, *min), *min);
  // After min, so that min > max leaves max everywhere (PyTorch's order).
  if (max) out = masked_fill(out, ge(out, *max), *max);
  return out;
}

}  // namespace precis
