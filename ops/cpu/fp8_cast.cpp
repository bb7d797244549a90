// scaled_fp8_cast on the CPU: one pass over x per chunk, writing the fp8 codes and the chunk's
// max |x|, then the chunks' maxima combined (ops/contracts/kernels.h, Fp8ScaledCastKernel). The
// rounding is core/float8.h's saturating rule, the one the CUDA kernel runs.
//
// The amax is kept as the bit pattern of |x| as f32: for non-negative floats the patterns order as
// the values do, and every NaN's pattern (sign cleared) is above +inf's, so the integer maximum is
// the float maximum with NaN winning, as max() reports it. Exact in any order, so the parallel
// result does not depend on the thread count.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "core/dtype_visit.h"
#include "core/float8.h"
#include "core/opmath.h"
#include "core/thread_pool.h"
#include "ops/contracts/kernels.h"
#include "ops/cpu/cpu_backend.h"
#include "ops/op_table.h"

namespace precis::cpu {

namespace {

// 16 K elements: a chunk's reads (≤ 128 KB of f64) and writes stay in L2.
constexpr int64_t kChunk = int64_t{1} << 14;

template <typename T>
void fp8_scaled_cast_kernel(const Tensor& out, const Tensor& amax, const Tensor& x, const Tensor& scale) {
  const int64_t n = x.numel();
  const T* src = static_cast<const T*>(x.data_ptr());
  auto* dst = static_cast<uint8_t*>(out.data_ptr());
  const float s = *static_cast<const float*>(scale.data_ptr());
  const Fp8Format format = out.dtype() == DType::f8_e4m3 ? Fp8Format::e4m3 : Fp8Format::e5m2;
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  std::vector<uint32_t> partial(static_cast<size_t>(chunks), 0u);
  parallel_for(0, chunks, 1, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      const int64_t end = std::min(n, (c + 1) * kChunk);
      uint32_t m = 0;
      for (int64_t i = c * kChunk; i < end; ++i) {
        // f64 is rounded to f32 first, as x.to(f32) would; the product is one f32 rounding.
        const float v = static_cast<float>(load_op(src[i]));
        m = std::max(m, detail::f8_float_bits(v) & 0x7fffffffu);
        dst[i] = detail::float_to_f8_bits_saturating(v * s, format);
      }
      partial[static_cast<size_t>(c)] = m;
    }
  });
  uint32_t m = 0;
  for (uint32_t p : partial) m = std::max(m, p);
  *static_cast<float*>(amax.data_ptr()) = detail::f8_bits_float(m);
}

}  // namespace

void register_fp8_cast_kernels() {
  for (DType dt : {DType::f32, DType::f64, DType::f16, DType::bf16})
    visit_dtype(dt, [&]<typename T>() {
      register_kernel<kernels::Fp8ScaledCastKernel>(OpId::fp8_scaled_cast, DeviceType::cpu, dt,
                                                    &fp8_scaled_cast_kernel<T>);
    });
}

}  // namespace precis::cpu
