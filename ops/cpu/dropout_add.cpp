// dropout_add's CPU kernel (kernels::DropoutAddKernel): residual + mask·x·scale in one pass, with
// dropout's mask (the Philox lanes of ops/cpu/philox_vec.h, the rule of ops/math/dropout_math.h), so
// a residual block's dropout and residual add read x and the residual once and write one tensor,
// and backward writes x's gradient from the output gradient in one pass. The operands may have
// different dtypes (BERT under bf16 autocast: a bf16 x, an fp32 residual, an fp32 out), so each
// step of a row converts its inputs to the compute type C in stack buffers (ops/cpu/dropout_row.h's
// bulk conversions), picked at run time per step: one switch per 256 elements.
#include <algorithm>
#include <array>
#include <cstring>
#include <type_traits>

#include "core/dtype_visit.h"
#include "core/opmath.h"
#include "ops/cpu/cpu_backend.h"
#include "ops/cpu/dropout_row.h"
#include "ops/cpu/loops.h"
#include "ops/math/dropout_math.h"
#include "ops/contracts/kernels_loss.h"
#include "ops/op_table.h"

namespace precis::cpu {

namespace {

using dropout_detail::kStep;

// A strided row of one operand: its dtype, base pointer and element stride.
struct Row {
  DType dtype;
  const char* base;  // at the row's first element
  int64_t stride;
};

const char* at(const Tensor& t, int64_t offset) {
  return static_cast<const char*>(t.data_ptr()) + offset * static_cast<int64_t>(element_size(t.dtype()));
}

// len elements of `r` from element j0 on, as C: in buf, or the row itself when it is contiguous C.
template <typename C>
const C* load(const Row& r, int64_t j0, int64_t len, C* buf) {
  const C* out = nullptr;
  visit_floating_dtype(r.dtype, [&]<typename T>() {
    if constexpr (std::is_same_v<opmath_t<T>, C>) {
      const T* p = reinterpret_cast<const T*>(r.base) + j0 * r.stride;
      out = dropout_detail::load_step<T, C>(p, r.stride, len, buf);
    }
  });
  PRECIS_INTERNAL_ASSERT(out != nullptr, "dropout_add: operand dtype ", dtype_name(r.dtype),
                         " does not compute in the output's compute type");
  return out;
}

// Stores len results (in C) as out's dtype at o (contiguous); nothing to do for C itself, which
// was written in place.
template <typename C>
void store(DType dt, const C* res, char* o, int64_t len) {
  visit_floating_dtype(dt, [&]<typename T>() {
    if constexpr (std::is_same_v<opmath_t<T>, C> && !std::is_same_v<T, C>)
      dropout_detail::store_step<T, C>(res, reinterpret_cast<T*>(o), len);
  });
}

// Elements first .. first + n − 1 (row-major; out is contiguous, so also out's offsets) from the
// rows x and (when has_res) res.
template <typename C>
void dropout_add_row(DType out_dtype, char* o, const Row& x, const Row* res, int64_t n, int64_t first, uint64_t seed,
                     uint64_t offset, uint32_t threshold, C scale) {
  alignas(64) uint32_t lanes[kStep + 8];  // kStep / 4 + 1 blocks when the start is mid-block
  alignas(64) C xbuf[kStep], rbuf[kStep], obuf[kStep];
  const bool in_place = out_dtype == dtype_of<C>();
  const int64_t osize = static_cast<int64_t>(element_size(out_dtype));
  for (int64_t j0 = 0; j0 < n; j0 += kStep) {
    const int64_t len = std::min(kStep, n - j0), idx = first + j0;
    const int64_t b0 = idx / 4, blocks = (idx + len - 1) / 4 - b0 + 1;
    philox_stream_lanes(seed, offset + static_cast<uint64_t>(b0), blocks, lanes);
    const C* xs = load<C>(x, j0, len, xbuf);
    C* dst = in_place ? reinterpret_cast<C*>(o + j0 * osize) : obuf;
    if (res != nullptr) {
      dropout_detail::apply_mask<C, true>(xs, lanes + (idx & 3), dst, len, scale, threshold,
                                          load<C>(*res, j0, len, rbuf));
    } else {
      dropout_detail::apply_mask(xs, lanes + (idx & 3), dst, len, scale, threshold);
    }
    if (!in_place) store<C>(out_dtype, obuf, o + j0 * osize, len);
  }
}

template <typename C>
void run(const Tensor& out, const Tensor& x, const Tensor& residual, double p, uint64_t seed, uint64_t offset) {
  const uint32_t threshold = kernels::dropout_keep_threshold(p);
  const C scale = static_cast<C>(1.0 / (1.0 - p));
  char* o = static_cast<char*>(out.data_ptr());
  const DType odt = out.dtype();
  // A Philox block per 4 elements costs more than a plain element-wise op: dropout's grain.
  constexpr int64_t grain = kElementwiseGrain / 4;
  if (residual.defined()) {
    parallel_rows<3>(
        {&out, &x, &residual},
        [&](std::array<int64_t, 3> off, int64_t n, std::array<int64_t, 3> st) {
          const Row xr{x.dtype(), at(x, off[1]), st[1]}, rr{residual.dtype(), at(residual, off[2]), st[2]};
          dropout_add_row<C>(odt, o + off[0] * static_cast<int64_t>(element_size(odt)), xr, &rr, n, off[0], seed,
                             offset, threshold, scale);
        },
        grain);
  } else {
    parallel_rows<2>(
        {&out, &x},
        [&](std::array<int64_t, 2> off, int64_t n, std::array<int64_t, 2> st) {
          const Row xr{x.dtype(), at(x, off[1]), st[1]};
          dropout_add_row<C>(odt, o + off[0] * static_cast<int64_t>(element_size(odt)), xr, nullptr, n, off[0], seed,
                             offset, threshold, scale);
        },
        grain);
  }
}

// Keyed by out's dtype; x's and residual's dtypes are dispatched per step (above).
void dropout_add_kernel(const Tensor& out, const Tensor& x, const Tensor& residual, double p, const PhiloxDraw& rng) {
  const uint64_t seed = rng.seed, offset = kernels::philox_offset(rng.offset, rng.offset_base);
  const bool wide = out.dtype() == DType::f64;
  auto same_compute = [&](const Tensor& t) { return !t.defined() || (t.dtype() == DType::f64) == wide; };
  PRECIS_INTERNAL_ASSERT(out.is_contiguous() && x.sizes() == out.sizes() &&
                             (!residual.defined() || residual.sizes() == out.sizes()) && same_compute(x) &&
                             same_compute(residual) && p > 0.0 && p < 1.0,
                         "dropout_add kernel: out ", out.describe(), ", x ", x.describe(), ", residual ",
                         residual.defined() ? residual.describe() : std::string("none"), ", p ", p);
  if (wide) {
    run<double>(out, x, residual, p, seed, offset);
  } else {
    run<float>(out, x, residual, p, seed, offset);
  }
}

}  // namespace

void register_dropout_add_kernels() {
  for (DType dt : {DType::f32, DType::f64, DType::f16, DType::bf16})
    register_kernel<kernels::DropoutAddKernel>(OpId::dropout_add, DeviceType::cpu, dt, &dropout_add_kernel);
}

}  // namespace precis::cpu
