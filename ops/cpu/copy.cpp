// copy (strided, with dtype conversion) and fill on the CPU. Same-dtype transposing copies of 4-
// and 2-byte elements take the blocked kernel of ops/cpu/transpose.h. The fp8 dtypes take part
// (casts to and from them are copies; the plain cast rule of core/float8.h).
#include "ops/cpu/cpu_backend.h"
#include "core/dtype_visit.h"
#include "core/opmath.h"
#include "ops/cpu/loops.h"
#include "ops/cpu/transpose.h"
#include "ops/contracts/kernels.h"
#include "ops/op_table.h"

namespace precis::cpu {

namespace {

template <typename Dst>
void copy_kernel(const Tensor& dst, const Tensor& src) {
  Dst* d = static_cast<Dst*>(dst.data_ptr());
  visit_dtype_with_fp8(src.dtype(), [&]<typename Src>() {
    if constexpr (std::is_same_v<Dst, Src> && (sizeof(Dst) == 4 || sizeof(Dst) == 2)) {
      if (transpose_copy<Dst>(dst, src)) return;
    }
    const Src* s = static_cast<const Src*>(src.data_ptr());
    parallel_rows<2>({&dst, &src}, [&](std::array<int64_t, 2> off, int64_t n, std::array<int64_t, 2> st) {
      Dst* dp = d + off[0];
      const Src* sp = s + off[1];
      if (st[0] == 1 && st[1] == 1) {
        if constexpr (std::is_same_v<Dst, Src>) {
          std::copy(sp, sp + n, dp);
        } else if constexpr (std::is_same_v<Src, float> && std::is_same_v<Dst, Half>) {
          float_to_half(sp, dp, n);
        } else if constexpr (std::is_same_v<Src, Half> && std::is_same_v<Dst, float>) {
          half_to_float(sp, dp, n);
        } else if constexpr (std::is_same_v<Src, float> && std::is_same_v<Dst, BFloat16>) {
          float_to_bfloat16(sp, dp, n);
        } else if constexpr (std::is_same_v<Src, BFloat16> && std::is_same_v<Dst, float>) {
          bfloat16_to_float(sp, dp, n);
        } else {
          for (int64_t i = 0; i < n; ++i) dp[i] = convert<Dst>(sp[i]);
        }
      } else {
        for (int64_t i = 0; i < n; ++i) dp[i * st[0]] = convert<Dst>(sp[i * st[1]]);
      }
    });
  });
}

template <typename T>
void fill_kernel(const Tensor& dst, Scalar value) {
  T v;
  if constexpr (std::is_same_v<T, bool>) {
    v = value.to_bool();
  } else if constexpr (std::is_integral_v<T>) {
    v = static_cast<T>(value.to_int64());
  } else {
    v = T(static_cast<opmath_t<T>>(value.to_double()));
  }
  T* d = static_cast<T*>(dst.data_ptr());
  parallel_rows<1>({&dst}, [&](std::array<int64_t, 1> off, int64_t n, std::array<int64_t, 1> st) {
    T* p = d + off[0];
    if (st[0] == 1) {
      std::fill(p, p + n, v);
    } else {
      for (int64_t i = 0; i < n; ++i) p[i * st[0]] = v;
    }
  });
}

}  // namespace

void register_copy_kernels() {
  for (int i = 0; i < kNumDTypes; ++i) {
    const DType dt = static_cast<DType>(i);
    visit_dtype_with_fp8(dt, [&]<typename T>() {
      register_kernel<kernels::CopyKernel>(OpId::copy, DeviceType::cpu, dt, &copy_kernel<T>);
      register_kernel<kernels::FillKernel>(OpId::fill, DeviceType::cpu, dt, &fill_kernel<T>);
    });
  }
}

}  // namespace precis::cpu
