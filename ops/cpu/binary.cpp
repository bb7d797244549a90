// Binary element-wise kernels (add ... ge), where and masked_fill. Operands arrive expanded to
// out's shape, so a broadcast operand has inner stride 0: rows are specialised for
// (contiguous, contiguous), (contiguous, scalar) and (scalar, contiguous), each a plain loop the
// compiler vectorises (AVX2 here); other strides take a general loop. f16/bf16 rows are converted
// in kBlock-sized blocks and computed in fp32.
#include <cmath>
#include <cstring>

#include "ops/cpu/cpu_backend.h"
#include "core/dtype_visit.h"
#include "core/opmath.h"
#include "ops/cpu/elementwise_util.h"
#include "ops/cpu/loops.h"
#include "ops/contracts/kernels.h"
#include "ops/op_table.h"

namespace precis::cpu {

namespace {

// Functors on the compute type C. `Result` is C for arithmetic and bool for comparisons; `alpha`
// is add/sub's multiplier of b (unused by the others). Integer add, sub and mul wrap around on
// overflow (core/opmath.h wrapping_*: defined, where the plain operators are undefined
// behaviour); add()/sub() have checked that alpha fits the operands' dtype (ops/binary.cpp), the
// saturating store_op only keeps the conversion defined for any double.
template <typename C> struct PlusOp {
  using Result = C;
  explicit PlusOp(double) {}
  C operator()(C a, C b) const { return wrapping_add(a, b); }
};
template <typename C> struct AddAlphaOp {
  using Result = C;
  explicit AddAlphaOp(double alpha) : alpha(store_op<C>(alpha)) {}
  C alpha;
  C operator()(C a, C b) const { return wrapping_add(a, wrapping_mul(alpha, b)); }
};
template <typename C> struct MinusOp {
  using Result = C;
  explicit MinusOp(double) {}
  C operator()(C a, C b) const { return wrapping_sub(a, b); }
};
template <typename C> struct SubAlphaOp {
  using Result = C;
  explicit SubAlphaOp(double alpha) : alpha(store_op<C>(alpha)) {}
  C alpha;
  C operator()(C a, C b) const { return wrapping_sub(a, wrapping_mul(alpha, b)); }
};
template <typename C> struct MulOp {
  using Result = C;
  explicit MulOp(double) {}
  C operator()(C a, C b) const { return wrapping_mul(a, b); }
};
template <typename C> struct DivOp {
  using Result = C;
  explicit DivOp(double) {}
  C operator()(C a, C b) const { return a / b; }
};
// NaN in either operand gives NaN (a != a only for NaN; false for integers).
template <typename C> struct MaximumOp {
  using Result = C;
  explicit MaximumOp(double) {}
  C operator()(C a, C b) const { return (a > b || a != a) ? a : b; }
};
template <typename C> struct MinimumOp {
  using Result = C;
  explicit MinimumOp(double) {}
  C operator()(C a, C b) const { return (a < b || a != a) ? a : b; }
};
#define PRECIS_COMPARE_OP(Name, expr)                \
  template <typename C> struct Name {                \
    using Result = bool;                             \
    explicit Name(double) {}                         \
    bool operator()(C a, C b) const { return expr; } \
  };
PRECIS_COMPARE_OP(EqOp, a == b)
PRECIS_COMPARE_OP(NeOp, a != b)
PRECIS_COMPARE_OP(LtOp, a < b)
PRECIS_COMPARE_OP(LeOp, a <= b)
PRECIS_COMPARE_OP(GtOp, a > b)
PRECIS_COMPARE_OP(GeOp, a >= b)
#undef PRECIS_COMPARE_OP

// o[i·so] = op(a[i·sa], b[i·sb]) for i < n, with the broadcast patterns as separate loops so that
// each one vectorises.
template <typename R, typename C, typename Op>
inline void binary_row(R* o, const C* a, const C* b, int64_t n, int64_t so, int64_t sa, int64_t sb, const Op& op) {
  if (so == 1 && sa == 1 && sb == 1) {
    for (int64_t i = 0; i < n; ++i) o[i] = op(a[i], b[i]);
  } else if (so == 1 && sa == 1 && sb == 0) {
    const C bv = *b;
    for (int64_t i = 0; i < n; ++i) o[i] = op(a[i], bv);
  } else if (so == 1 && sa == 0 && sb == 1) {
    const C av = *a;
    for (int64_t i = 0; i < n; ++i) o[i] = op(av, b[i]);
  } else {
    for (int64_t i = 0; i < n; ++i) o[i * so] = op(a[i * sa], b[i * sb]);
  }
}

// out: dense (contiguous or the operands' layout; parallel_rows walks it in memory order), T
// (arithmetic) or bool (comparisons); a, b: out's shape, any strides (0 where broadcast), T.
// Computes in opmath_t<T>: fp32 for f16/bf16.
template <typename T, template <typename> class OpT>
void binary_kernel(const Tensor& out, const Tensor& a, const Tensor& b, double alpha) {
  using C = opmath_t<T>;
  using Op = OpT<C>;
  using R = std::conditional_t<std::is_same_v<typename Op::Result, bool>, bool, T>;
  const Op op(alpha);
  R* o = static_cast<R*>(out.data_ptr());
  const T* as = static_cast<const T*>(a.data_ptr());
  const T* bs = static_cast<const T*>(b.data_ptr());
  parallel_rows<3>({&out, &a, &b}, [&](std::array<int64_t, 3> off, int64_t n, std::array<int64_t, 3> st) {
    R* op_ = o + off[0];
    const T* ap = as + off[1];
    const T* bp = bs + off[2];
    if constexpr (std::is_same_v<T, C>) {
      binary_row(op_, ap, bp, n, st[0], st[1], st[2], op);
    } else {
      alignas(64) C abuf[kBlock];
      alignas(64) C bbuf[kBlock];
      alignas(64) typename Op::Result obuf[kBlock];
      for (int64_t blk = 0; blk < n; blk += kBlock) {
        const int64_t m = std::min(kBlock, n - blk);
        // A broadcast operand is converted once and stays a stride-0 scalar.
        const C* ab = abuf;
        const C* bb = bbuf;
        int64_t sa = 1, sb = 1;
        if (st[1] == 0) {
          abuf[0] = static_cast<C>(ap[0]);
          sa = 0;
        } else {
          load_block<C>(ap + blk * st[1], st[1], abuf, m);
        }
        if (st[2] == 0) {
          bbuf[0] = static_cast<C>(bp[0]);
          sb = 0;
        } else {
          load_block<C>(bp + blk * st[2], st[2], bbuf, m);
        }
        binary_row(obuf, ab, bb, m, 1, sa, sb, op);
        store_block<R>(obuf, op_ + blk * st[0], st[0], m);
      }
    }
  });
}

// add/sub: alpha == 1 (nearly every call) skips the multiply.
template <typename T>
void add_kernel(const Tensor& out, const Tensor& a, const Tensor& b, double alpha) {
  if (alpha == 1.0) {
    binary_kernel<T, PlusOp>(out, a, b, alpha);
  } else {
    binary_kernel<T, AddAlphaOp>(out, a, b, alpha);
  }
}
template <typename T>
void sub_kernel(const Tensor& out, const Tensor& a, const Tensor& b, double alpha) {
  if (alpha == 1.0) {
    binary_kernel<T, MinusOp>(out, a, b, alpha);
  } else {
    binary_kernel<T, SubAlphaOp>(out, a, b, alpha);
  }
}

// The integer type with T's size: selection moves bits, so f16/bf16/bool need no conversion.
template <typename T>
using Bits = std::conditional_t<sizeof(T) == 1, uint8_t,
                                std::conditional_t<sizeof(T) == 2, uint16_t,
                                                   std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>>>;

// out: dense (contiguous or the operands' layout); cond (bool), a, b: out's shape, any strides. The contiguous loop selects with
// bit masks: GCC keeps `c ? a : b` over a bool array as a branch per element, ~20x slower with a
// random cond.
template <typename S>
void where_kernel(const Tensor& out, const Tensor& cond, const Tensor& a, const Tensor& b) {
  using T = Bits<S>;
  T* o = static_cast<T*>(out.data_ptr());
  const bool* cs = static_cast<const bool*>(cond.data_ptr());
  const T* as = static_cast<const T*>(a.data_ptr());
  const T* bs = static_cast<const T*>(b.data_ptr());
  parallel_rows<4>({&out, &cond, &a, &b}, [&](std::array<int64_t, 4> off, int64_t n, std::array<int64_t, 4> st) {
    T* op_ = o + off[0];
    const bool* cp = cs + off[1];
    const T* ap = as + off[2];
    const T* bp = bs + off[3];
    if (st[0] == 1 && st[1] == 1 && st[2] == 1 && st[3] == 1) {
      for (int64_t i = 0; i < n; ++i) {
        const T m = T(0) - static_cast<T>(cp[i]);  // all ones where cond (bool is 0 or 1)
        op_[i] = (ap[i] & m) | (bp[i] & ~m);
      }
    } else {
      for (int64_t i = 0; i < n; ++i) op_[i * st[0]] = cp[i * st[1]] ? ap[i * st[2]] : bp[i * st[3]];
    }
  });
}

template <typename T>
T scalar_as(Scalar v) {
  if constexpr (std::is_same_v<T, bool>) {
    return v.to_bool();
  } else if constexpr (std::is_integral_v<T>) {
    return static_cast<T>(v.to_int64());
  } else {
    return T(static_cast<opmath_t<T>>(v.to_double()));
  }
}

// out: dense (contiguous or x's layout); x, mask (bool): out's shape, any strides.
template <typename S>
void masked_fill_kernel(const Tensor& out, const Tensor& x, const Tensor& mask, Scalar value) {
  using T = Bits<S>;
  const S sv = scalar_as<S>(value);
  T v;
  std::memcpy(&v, &sv, sizeof(T));
  T* o = static_cast<T*>(out.data_ptr());
  const T* xs = static_cast<const T*>(x.data_ptr());
  const bool* ms = static_cast<const bool*>(mask.data_ptr());
  parallel_rows<3>({&out, &x, &mask}, [&](std::array<int64_t, 3> off, int64_t n, std::array<int64_t, 3> st) {
    T* op_ = o + off[0];
    const T* xp = xs + off[1];
    const bool* mp = ms + off[2];
    if (st[0] == 1 && st[1] == 1 && st[2] == 1) {
      for (int64_t i = 0; i < n; ++i) {
        const T m = T(0) - static_cast<T>(mp[i]);  // all ones where mask (bool is 0 or 1)
        op_[i] = (v & m) | (xp[i] & ~m);
      }
    } else {
      for (int64_t i = 0; i < n; ++i) op_[i * st[0]] = mp[i * st[2]] ? v : xp[i * st[1]];
    }
  });
}

constexpr DType kFloating[] = {DType::f32, DType::f64, DType::f16, DType::bf16};
constexpr DType kNumeric[] = {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i32, DType::i64};
constexpr DType kAll[] = {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i32, DType::i64, DType::boolean};

template <typename T>
inline constexpr bool is_numeric_v = !std::is_same_v<T, bool>;

template <template <typename> class OpT, size_t N>
void register_binary(OpId op, const DType (&dtypes)[N]) {
  for (DType dt : dtypes)
    visit_dtype(dt, [&]<typename T>() {
      // Arithmetic functors are only instantiated for numeric types; comparisons for all.
      if constexpr (is_numeric_v<T> || std::is_same_v<typename OpT<float>::Result, bool>)
        register_kernel<kernels::BinaryKernel>(op, DeviceType::cpu, dt, &binary_kernel<T, OpT>);
    });
}

}  // namespace

void register_binary_kernels() {
  for (DType dt : kNumeric)
    visit_dtype(dt, [&]<typename T>() {
      if constexpr (is_numeric_v<T>) {
        register_kernel<kernels::BinaryKernel>(OpId::add, DeviceType::cpu, dt, &add_kernel<T>);
        register_kernel<kernels::BinaryKernel>(OpId::sub, DeviceType::cpu, dt, &sub_kernel<T>);
      }
    });
  register_binary<MulOp>(OpId::mul, kNumeric);
  // Integer tensors divide in f32 (true division, as PyTorch): no integer kernel.
  register_binary<DivOp>(OpId::div, kFloating);
  register_binary<MaximumOp>(OpId::maximum, kNumeric);
  register_binary<MinimumOp>(OpId::minimum, kNumeric);
  register_binary<EqOp>(OpId::eq, kAll);
  register_binary<NeOp>(OpId::ne, kAll);
  register_binary<LtOp>(OpId::lt, kAll);
  register_binary<LeOp>(OpId::le, kAll);
  register_binary<GtOp>(OpId::gt, kAll);
  register_binary<GeOp>(OpId::ge, kAll);
  for (DType dt : kAll)
    visit_dtype(dt, [&]<typename T>() {
      register_kernel<kernels::WhereKernel>(OpId::where, DeviceType::cpu, dt, &where_kernel<T>);
      register_kernel<kernels::MaskedFillKernel>(OpId::masked_fill, DeviceType::cpu, dt, &masked_fill_kernel<T>);
    });
}

}  // namespace precis::cpu
