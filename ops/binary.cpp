// Binary element-wise ops, comparisons, where and masked_fill: broadcasting, dtype promotion,
// scalar operands, forward and backward. Kernels: ops/cpu/binary.cpp.
//
// Promotion casts the operands with cast() (differentiable), so a gradient reaching a promoted
// operand flows back through the cast to the caller's dtype. Backward reduces the gradient of a
// broadcast operand to its own shape with sum_to.
#include <cmath>
#include <optional>
#include <utility>

#include "ops/precision.h"
#include "autograd/record.h"
#include "ops/broadcast.h"
#include "ops/functional.h"
#include "ops/kernels.h"
#include "ops/scalar_check.h"
#include "tensor/factory.h"

namespace precis {

using autograd::SavedTensor;
using autograd::TensorList;

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

// The gradient of a broadcast operand: g summed down to the operand's shape.
Tensor reduce_to(const Tensor& g, const Shape& shape) { return g.sizes() == shape ? g : sum_to(g, shape); }

// Operands after checks and promotion: both `dtype` (cast differentiably), with their broadcast
// shape.
struct Operands {
  Tensor a, b;
  Shape shape;
};

// true_division: integer/bool operands are promoted to f32 (PyTorch's `/`).
// Checks, autocasts (docs/design/precision.md: the op's policy category) and promotes the two operands.
Operands prepare(OpId op_id, const Tensor& a_in, const Tensor& b_in, bool true_division = false) {
  const char* op = op_name(op_id);
  const auto [a, b] = apply_precision(op_id, a_in, b_in);
  check_defined(op, a, "a");
  check_defined(op, b, "b");
  check_same_device(op, a, "a", b, "b");
  Shape shape = broadcast_shapes(op, {&a, &b}, {"a", "b"});
  DType dt = result_type({&a, &b});
  if (true_division && !is_floating(dt)) dt = DType::f32;
  return {cast(a, dt), cast(b, dt), std::move(shape)};
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

// True when s survives a round trip through a low-precision dtype (always for the others).
bool exactly_representable(Scalar s, DType dt) {
  if (!is_low_precision(dt)) return true;
  const double v = s.to_double();
  const float f = static_cast<float>(v);
  if (static_cast<double>(f) != v) return false;
  return dt == DType::f16 ? static_cast<float>(Half(f)) == f : static_cast<float>(BFloat16(f)) == f;
}

// Applies fn(tensor, scalar-as-0-d-tensor). A scalar that f16/bf16 cannot hold exactly (0.1, a
// loss scale of 65536 > the f16 maximum) is applied in f32 and the result rounded once, as
// PyTorch does by keeping scalars in the compute type; exact scalars take the direct path. Likewise
// an integer scalar past i32's range next to an i32 tensor is applied in i64: comparisons are
// exact, and arithmetic results wrap into i32 once, the value PyTorch's wraparound gives.
template <typename F>
Tensor with_scalar(const char* op, const Tensor& a, Scalar s, F&& fn) {
  check_defined(op, a, "a");
  if (!exactly_representable(s, a.dtype())) {
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
// How a binary op promotes integer operands (prepare's true_division).
enum class Promotion { Arithmetic, TrueDivision };

constexpr bool kept(Keep k, bool need_a, bool need_b) {
  return k == Keep::always || (k == Keep::for_a && need_a) || (k == Keep::for_b && need_b);
}

// The front-end of the differentiable binary ops, after prepare(): runs op's kernel and, when a
// gradient is needed, records a node whose backward returns derivative(grad, a, b, need_a,
// need_b) = {ga, gb} (undefined where not needed), a and b being the operands kept as KA / KB
// say (undefined otherwise), each gradient summed back to its operand's shape. `name` names the
// op in a kept operand's in-place error. The derivative is a lambda stored in the one closure
// record() keeps, built only when a gradient is needed: nothing per call over hand-written code.
template <Keep KA, Keep KB, typename Derivative>
Tensor binary_op(OpId op, const char* name, const Operands& o, double alpha, const Derivative& derivative) {
  Tensor out = run_binary(op, o.a, o.b, o.shape, o.a.dtype(), alpha);
  if (autograd::needs_grad({&o.a, &o.b})) {
    const bool need_a = o.a.requires_grad(), need_b = o.b.requires_grad();
    autograd::record(op, {o.a, o.b}, {out},
                     [sa = kept(KA, need_a, need_b) ? SavedTensor(o.a) : SavedTensor(),
                      sb = kept(KB, need_a, need_b) ? SavedTensor(o.b) : SavedTensor(), need_a, need_b,
                      shape_a = o.a.sizes(), shape_b = o.b.sizes(), name, derivative](const TensorList& g) -> TensorList {
                       const Tensor a = sa.unpack(name), b = sb.unpack(name);
                       const auto [ga, gb] = derivative(g[0], a, b, need_a, need_b);
                       return {need_a ? reduce_to(ga, shape_a) : Tensor(), need_b ? reduce_to(gb, shape_b) : Tensor()};
                     });
  }
  return out;
}

using GradPair = std::pair<Tensor, Tensor>;

Tensor add_sub(OpId op, const Tensor& a, const Tensor& b, Scalar alpha) {
  Operands o = prepare(op, a, b);
  check_alpha(op_name(op), o.a, o.b, alpha);
  const double al = alpha.to_double();
  const double gb_scale = op == OpId::add ? al : -al;
  return binary_op<Keep::never, Keep::never>(
      op, op_name(op), o, al, [gb_scale](const Tensor& grad, const Tensor&, const Tensor&, bool need_a, bool need_b) {
        return GradPair{need_a ? grad : Tensor(), need_b ? (gb_scale == 1.0 ? grad : mul(grad, gb_scale)) : Tensor()};
      });
}

// maximum / minimum: the gradient goes to the selected operand, split in half on ties (PyTorch).
Tensor max_min(OpId op, const Tensor& a, const Tensor& b) {
  const bool is_max = op == OpId::maximum;
  return binary_op<Keep::always, Keep::always>(
      op, nullptr, prepare(op, a, b), 1.0,
      [is_max](const Tensor& grad, const Tensor& a, const Tensor& b, bool need_a, bool need_b) {
        const Tensor shared = where(eq(a, b), mul(grad, 0.5), grad);
        // a loses where it is below (maximum) or above (minimum) b; NaN loses nowhere.
        return GradPair{need_a ? masked_fill(shared, is_max ? lt(a, b) : gt(a, b), 0) : Tensor(),
                        need_b ? masked_fill(shared, is_max ? gt(a, b) : lt(a, b), 0) : Tensor()};
      });
}

Tensor compare(OpId op, const Tensor& a, const Tensor& b) {
  NoGradGuard no_grad;  // comparisons are not differentiable: the promotion casts need no graph
  Operands o = prepare(op, a, b);
  return run_binary(op, o.a, o.b, o.shape, DType::boolean);
}

}  // namespace

Tensor add(const Tensor& a, const Tensor& b, Scalar alpha) { return add_sub(OpId::add, a, b, alpha); }
Tensor sub(const Tensor& a, const Tensor& b, Scalar alpha) { return add_sub(OpId::sub, a, b, alpha); }

// One public function per row of the table.
#define PRECIS_BINARY(op, promotion, keep_a, keep_b, grad_a, grad_b)                                                    \
  Tensor op(const Tensor& a_in, const Tensor& b_in) {                                                                   \
    return binary_op<Keep::keep_a, Keep::keep_b>(                                                                       \
        OpId::op, #op, prepare(OpId::op, a_in, b_in, Promotion::promotion == Promotion::TrueDivision), 1.0,            \
        [](const Tensor& grad, [[maybe_unused]] const Tensor& a, [[maybe_unused]] const Tensor& b, bool need_a,        \
           bool need_b) { return GradPair{need_a ? (grad_a) : Tensor(), need_b ? (grad_b) : Tensor()}; });               \
  }
#include "ops/binary_ops.def"
#undef PRECIS_BINARY

Tensor maximum(const Tensor& a, const Tensor& b) { return max_min(OpId::maximum, a, b); }
Tensor minimum(const Tensor& a, const Tensor& b) { return max_min(OpId::minimum, a, b); }

// The scalar-operand forms: the tensor form with the scalar as a 0-d tensor (with_scalar).
#define PRECIS_DEFINE_SCALAR_FORM(name)                                                           \
  Tensor name(const Tensor& a, Scalar b) {                                                        \
    return with_scalar(#name, a, b, [](const Tensor& x, const Tensor& s) { return name(x, s); }); \
  }
PRECIS_DEFINE_SCALAR_FORM(add)
PRECIS_DEFINE_SCALAR_FORM(sub)
PRECIS_DEFINE_SCALAR_FORM(mul)
PRECIS_DEFINE_SCALAR_FORM(div)
PRECIS_DEFINE_SCALAR_FORM(maximum)
PRECIS_DEFINE_SCALAR_FORM(minimum)

#define PRECIS_DEFINE_COMPARISON(name)                                                \
  Tensor name(const Tensor& a, const Tensor& b) { return compare(OpId::name, a, b); } \
  PRECIS_DEFINE_SCALAR_FORM(name)
PRECIS_DEFINE_COMPARISON(eq)
PRECIS_DEFINE_COMPARISON(ne)
PRECIS_DEFINE_COMPARISON(lt)
PRECIS_DEFINE_COMPARISON(le)
PRECIS_DEFINE_COMPARISON(gt)
PRECIS_DEFINE_COMPARISON(ge)
#undef PRECIS_DEFINE_COMPARISON
#undef PRECIS_DEFINE_SCALAR_FORM

Tensor where(const Tensor& cond, const Tensor& a_in, const Tensor& b_in) {
  const auto [a, b] = apply_precision(OpId::where, a_in, b_in);
  check_defined("where", cond, "cond");
  check_defined("where", a, "a");
  check_defined("where", b, "b");
  PRECIS_CHECK_DTYPE(cond.dtype() == DType::boolean, "where: cond must be bool, got cond ", cond.describe(),
                     " (a ", a.describe(), ", b ", b.describe(), "); build it with a comparison or .to(DType::boolean)");
  check_same_device("where", cond, "cond", a, "a");
  check_same_device("where", a, "a", b, "b");
  const Shape shape = broadcast_shapes("where", {&cond, &a, &b}, {"cond", "a", "b"});
  const DType dt = result_type({&a, &b});
  const Tensor ac = cast(a, dt), bc = cast(b, dt);
  Tensor out = empty_elementwise(shape, dt, a.device(), {&cond, &ac, &bc}, "where");
  kernel<kernels::WhereKernel>(OpId::where, a.device().type, dt)(out, cond.expand(shape), ac.detach().expand(shape),
                                                                 bc.detach().expand(shape));
  if (autograd::needs_grad({&ac, &bc})) {
    autograd::record(OpId::where, {ac, bc}, {out},
                     [c = cond.detach(), shape_a = ac.sizes(), shape_b = bc.sizes(), need_a = ac.requires_grad(),
                      need_b = bc.requires_grad()](const TensorList& g) -> TensorList {
                       Tensor ga, gb;
                       if (need_a) ga = reduce_to(where(c, g[0], 0), shape_a);
                       if (need_b) gb = reduce_to(masked_fill(g[0], c, 0), shape_b);
                       return {ga, gb};
                     });
  }
  return out;
}

Tensor where(const Tensor& cond, const Tensor& a, Scalar b) {
  check_defined("where", a, "a");
  const DType bd = scalar_operand_dtype(a.dtype(), b);
  // An integer scalar past i32's range next to an i32 tensor: selected in i64, then wrapped into
  // i32 once (PyTorch's wraparound), as in with_scalar.
  if (!b.fits(bd)) return where(cond, a.to(DType::i64), scalar_tensor(b, {.dtype = DType::i64, .device = a.device()})).to(a.dtype());
  return where(cond, a, scalar_tensor(b, {.dtype = bd, .device = a.device()}));
}

Tensor masked_fill(const Tensor& x_in, const Tensor& mask, Scalar value) {
  const Tensor x = apply_precision(OpId::masked_fill, x_in)[0];
  check_defined("masked_fill", x, "x");
  check_defined("masked_fill", mask, "mask");
  PRECIS_CHECK_DTYPE(mask.dtype() == DType::boolean, "masked_fill: mask must be bool, got mask ", mask.describe(),
                     " (x ", x.describe(), "); build it with a comparison or .to(DType::boolean)");
  check_same_device("masked_fill", x, "x", mask, "mask");
  check_scalar_fits("masked_fill", "fill value", value, x.dtype(), detail::str_cat("x ", x.describe(), ", mask ", mask.describe()));
  const Shape shape = broadcast_shapes("masked_fill", {&x, &mask}, {"x", "mask"});
  // x's layout, as PyTorch's masked_fill (a masked_fill_ on a layout-preserving clone of x).
  Tensor out = empty_elementwise(shape, x.dtype(), x.device(), {&x}, "masked_fill");
  kernel<kernels::MaskedFillKernel>(OpId::masked_fill, x.device().type, x.dtype())(out, x.detach().expand(shape),
                                                                                   mask.expand(shape), value);
  if (autograd::needs_grad({&x})) {
    autograd::record(OpId::masked_fill, {x}, {out},
                     [m = mask.detach(), shape_x = x.sizes()](const TensorList& g) -> TensorList {
                       return {reduce_to(masked_fill(g[0], m, 0), shape_x)};
                     });
  }
  return out;
}

}  // namespace precis
