// The loss scaler's fused unscale / non-finite check / squared-norm pass on the CPU.
#include <cmath>
#include <cstdint>
#include <cstring>

#include "core/thread_pool.h"
#include "ops/cpu/cpu_backend.h"
#include "core/dtype_visit.h"
#include "core/opmath.h"
#include "ops/contracts/kernels_amp.h"
#include "ops/op_table.h"

namespace precis::cpu {

namespace {

// Blocks of a fixed size, independent of the thread count, so the f64 sums are reproducible.
constexpr int64_t kBlock = 16384;

struct BlockResult {
  double sq = 0;
  int64_t nonfinite = 0;
};

template <typename T>
BlockResult unscale_block(T* g, int64_t n, float inv_scale, bool write) {
  BlockResult r;
  // kLanes independent f64 accumulators and non-finite counters: with one or two chains the pass
  // is bound by the f64 add latency (about 1 element per ns), with 8 the compiler vectorises it
  // and it runs at memory speed. fp32 products, f64 sums; the lane order is fixed, so the result
  // does not depend on the thread count.
  constexpr int kLanes = 8;
  double sq[kLanes] = {};
  int32_t bad[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int j = 0; j < kLanes; ++j) {
      const float u = static_cast<float>(static_cast<opmath_t<T>>(g[i + j])) * inv_scale;
      uint32_t bits;
      std::memcpy(&bits, &u, sizeof bits);
      bad[j] += (bits & 0x7f800000u) == 0x7f800000u;  // exponent all ones: inf or NaN
      sq[j] += static_cast<double>(u) * static_cast<double>(u);
      if (write) g[i + j] = T(u);
    }
  }
  for (; i < n; ++i) {
    const float u = static_cast<float>(static_cast<opmath_t<T>>(g[i])) * inv_scale;
    bad[0] += !std::isfinite(u);
    sq[0] += static_cast<double>(u) * u;
    if (write) g[i] = T(u);
  }
  for (int j = 0; j < kLanes; ++j) {
    r.sq += sq[j];
    r.nonfinite += bad[j];
  }
  return r;
}

// f64 gradients are unscaled in f64.
template <>
BlockResult unscale_block<double>(double* g, int64_t n, float inv_scale, bool write) {
  BlockResult r;
  for (int64_t i = 0; i < n; ++i) {
    const double u = g[i] * static_cast<double>(inv_scale);
    r.nonfinite += !std::isfinite(u);
    r.sq += u * u;
    if (write) g[i] = u;
  }
  return r;
}

void unscale_kernel(const std::vector<Tensor>& grads, const Tensor& inv_scale, bool write, const Tensor& found_inf,
                    const Tensor& counts, const Tensor& sq_norms) {
  const float inv = *inv_scale.data_ptr<float>();
  float* counts_out = counts.data_ptr<float>();
  float* found = found_inf.data_ptr<float>();
  for (size_t t = 0; t < grads.size(); ++t) {
    const Tensor& g = grads[t];
    const int64_t n = g.numel();
    const int64_t blocks = (n + kBlock - 1) / kBlock;
    std::vector<BlockResult> partial(static_cast<size_t>(blocks));
    visit_dtype(g.dtype(), [&]<typename T>() {
      if constexpr (std::is_floating_point_v<T> || std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
        T* p = static_cast<T*>(g.data_ptr());
        parallel_for(0, blocks, 4, [&](int64_t b0, int64_t b1) {
          for (int64_t b = b0; b < b1; ++b) {
            const int64_t begin = b * kBlock;
            partial[b] = unscale_block<T>(p + begin, std::min(kBlock, n - begin), inv, write);
          }
        });
      } else {
        PRECIS_CHECK_DTYPE(false, "unscale_grads: gradient ", t, " is ", g.describe(), "; gradients are floating");
      }
    });
    double sq = 0;
    int64_t bad = 0;
    for (const BlockResult& r : partial) {
      sq += r.sq;
      bad += r.nonfinite;
    }
    counts_out[t] = static_cast<float>(bad);
    if (sq_norms.dtype() == DType::f64) {
      sq_norms.data_ptr<double>()[t] = sq;
    } else {
      sq_norms.data_ptr<float>()[t] = static_cast<float>(sq);
    }
    if (bad > 0) *found = 1.0f;
  }
}

}  // namespace

void register_unscale_kernels() {
  // One kernel handles gradients of every floating dtype (dispatched per gradient inside); it is
  // registered under each floating key so a lookup by a gradient's dtype finds it as well as the
  // scaler's lookup by found_inf's (f32).
  for (DType dt : {DType::f32, DType::f64, DType::f16, DType::bf16})
    register_kernel<kernels::UnscaleKernel>(OpId::unscale_grads, DeviceType::cpu, dt, &unscale_kernel);
}

}  // namespace precis::cpu
