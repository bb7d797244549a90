// erf kernel. Contiguous f32/f64 rows use Eigen's vectorised erf in place (a rational
// approximation for f32, about 1e-7 relative to |x|); other rows (strided, f16/bf16) go through
// kBlock-sized buffers in the compute type (fp32 for f16/bf16).
#include <Eigen/Core>
#include <unsupported/Eigen/SpecialFunctions>

#include "ops/cpu/cpu_backend.h"
#include "ops/cpu/dispatch.h"
#include "ops/cpu/elementwise_util.h"
#include "ops/cpu/loops.h"
#include "ops/kernels.h"
#include "ops/op_table.h"

namespace precis::cpu {

namespace {

template <typename C>
using Arr = Eigen::Array<C, Eigen::Dynamic, 1>;

// out: contiguous; x: out's shape, any strides. Computes in opmath_t<T>.
template <typename T>
void erf_kernel(const Tensor& out, const Tensor& x, double) {
  using C = opmath_t<T>;
  using Map = Eigen::Map<Arr<C>>;
  using ConstMap = Eigen::Map<const Arr<C>>;
  T* o = static_cast<T*>(out.data_ptr());
  const T* in = static_cast<const T*>(x.data_ptr());
  parallel_rows<2>(
      {&out, &x},
      [&](std::array<int64_t, 2> off, int64_t n, std::array<int64_t, 2> st) {
        T* op_ = o + off[0];
        const T* xp = in + off[1];
        if constexpr (std::is_same_v<T, C>) {
          if (st[0] == 1 && st[1] == 1) {
            Map(op_, n) = ConstMap(xp, n).erf();
            return;
          }
        }
        alignas(64) C xbuf[kBlock];
        alignas(64) C obuf[kBlock];
        for (int64_t b = 0; b < n; b += kBlock) {
          const int64_t m = std::min(kBlock, n - b);
          load_block<C>(xp + b * st[1], st[1], xbuf, m);
          Map(obuf, m) = ConstMap(xbuf, m).erf();
          store_block<T>(obuf, op_ + b * st[0], st[0], m);
        }
      },
      8192);
}

}  // namespace

void register_erf_kernels() {
  for (DType dt : {DType::f32, DType::f64, DType::f16, DType::bf16})
    visit_dtype(dt, [&]<typename T>() {
      if constexpr (std::is_floating_point_v<opmath_t<T>>)
        register_kernel<kernels::UnaryKernel>(OpId::erf, DeviceType::cpu, dt, &erf_kernel<T>);
    });
}

}  // namespace precis::cpu
