// Dropout kernel: keeps each element with probability 1 − p and scales it by 1 / (1 − p). The mask
// comes from Philox blocks addressed by the element's row-major index (four elements per block),
// so it is the same for any thread count and strides, and backward regenerates it from
// (seed, offset) instead of storing it. The mask functions are ops/math/dropout_math.h, shared with
// the CUDA kernel; the blocks come 8 or 16 at a time from ops/cpu/philox_vec.h (same numbers).
#include <algorithm>
#include <array>

#include "ops/cpu/cpu_backend.h"
#include "core/dtype_visit.h"
#include "core/opmath.h"
#include "ops/cpu/loops.h"
#include "ops/cpu/dropout_row.h"
#include "ops/math/dropout_math.h"
#include "ops/contracts/kernels_loss.h"
#include "ops/op_table.h"

namespace precis::cpu {

namespace {

// out: contiguous (so its element offset is the row-major index); x: out's shape, any strides.
// Computes x·scale in opmath_t<T>.
template <typename T>
void dropout_kernel(const Tensor& out, const Tensor& x, double p, const PhiloxDraw& rng) {
  using C = opmath_t<T>;
  const uint64_t seed = rng.seed, offset = kernels::philox_offset(rng.offset, rng.offset_base);
  const uint32_t threshold = kernels::dropout_keep_threshold(p);
  const C scale = static_cast<C>(1.0 / (1.0 - p));
  T* o = static_cast<T*>(out.data_ptr());
  const T* in = static_cast<const T*>(x.data_ptr());
  parallel_rows<2>(
      {&out, &x},
      [&](std::array<int64_t, 2> off, int64_t n, std::array<int64_t, 2> st) {
        dropout_row<T>(o + off[0], in + off[1], st[1], n, off[0], seed, offset, threshold, scale);
      },
      kElementwiseGrain / 4);
}

}  // namespace

void register_dropout_kernels() {
  for (DType dt : {DType::f32, DType::f64, DType::f16, DType::bf16})
    visit_dtype(dt, [&]<typename T>() {
      if constexpr (std::is_floating_point_v<opmath_t<T>>)
        register_kernel<kernels::DropoutKernel>(OpId::dropout, DeviceType::cpu, dt, &dropout_kernel<T>);
    });
}

}  // namespace precis::cpu
