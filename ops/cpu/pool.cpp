// Pooling kernels on the CPU: direct loops over each output window, split over the intra-op pool
// by (n, c) planes. All tensors are contiguous (N, C, H, W). Low-precision inputs compute in fp32;
// the backward kernels of f16/bf16 sum overlapping windows in an fp32 plane before rounding once.
// The window math is ops/math/pool_math.h, shared with the CUDA kernels: the forward passes call its
// per-output functions; the backward passes scatter here (cheaper on a CPU) and the CUDA ones
// gather, adding in the same order (tests/ops/index_pool_math_test.cpp checks them bit for bit).
#include <algorithm>
#include <cmath>
#include <vector>

#include "core/thread_pool.h"
#include "ops/cpu/cpu_backend.h"
#include "core/dtype_visit.h"
#include "core/opmath.h"
#include "ops/contracts/kernels_conv.h"
#include "ops/op_table.h"
#include "ops/math/pool_math.h"

namespace precis::cpu {

namespace {

using kernels::Pool2dParams;

// Planes per parallel chunk so that a chunk does at least ~32k window reads.
int64_t plane_grain(int64_t work_per_plane) { return std::max<int64_t>(1, 32768 / std::max<int64_t>(work_per_plane, 1)); }

struct Planes {
  int64_t count, h, w, ho, wo;
};

Planes planes_of(const Tensor& x, const Tensor& out) {
  return {x.size(0) * x.size(1), x.size(2), x.size(3), out.size(2), out.size(3)};
}

// The window math's view of one plane (ops/math/pool_math.h, shared with the CUDA kernels).
kernels::PoolGeometry geometry(const Planes& pl, const Pool2dParams& p) {
  return kernels::pool_geometry(pl.h, pl.w, pl.ho, pl.wo, p);
}

// Accumulates a backward pass into one (H, W) plane of grad_x: directly for f32/f64, through an
// fp32 buffer rounded once at the end for f16/bf16 (overlapping windows add several times).
template <typename T>
class PlaneAccumulator {
 public:
  using Acc = opmath_t<T>;
  PlaneAccumulator(T* dst, int64_t size) : dst_(dst), size_(size) {
    if constexpr (std::is_same_v<Acc, T>) {
      std::fill(dst, dst + size, T(0));
      acc_ = dst;
    } else {
      buffer_.assign(size, Acc(0));
      acc_ = buffer_.data();
    }
  }
  Acc* data() { return acc_; }
  void finish() {
    if constexpr (!std::is_same_v<Acc, T>)
      for (int64_t i = 0; i < size_; ++i) dst_[i] = convert<T>(buffer_[i]);
  }

 private:
  T* dst_;
  int64_t size_;
  Acc* acc_;
  std::vector<Acc> buffer_;
};

// ---- max pooling ---------------------------------------------------------------------------

// out, indices: (N, C, Ho, Wo); x: (N, C, H, W). Compares in fp32 for f16/bf16 (exact: the
// result is one of the inputs).
template <typename T>
void max_pool2d_kernel(const Tensor& out, const Tensor& indices, const Tensor& x, const Pool2dParams& p) {
  const Planes pl = planes_of(x, out);
  const kernels::PoolGeometry g = geometry(pl, p);
  const T* xd = x.data_ptr<T>();
  T* od = out.data_ptr<T>();
  int64_t* id = indices.defined() ? indices.data_ptr<int64_t>() : nullptr;
  parallel_for(0, pl.count, plane_grain(pl.ho * pl.wo * p.kernel[0] * p.kernel[1]), [&](int64_t b, int64_t e) {
    for (int64_t plane = b; plane < e; ++plane) {
      const T* xp = xd + plane * pl.h * pl.w;
      T* op = od + plane * pl.ho * pl.wo;
      int64_t* ip = id != nullptr ? id + plane * pl.ho * pl.wo : nullptr;
      for (int64_t oh = 0; oh < pl.ho; ++oh) {
        for (int64_t ow = 0; ow < pl.wo; ++ow) {
          const auto r = kernels::max_pool2d_window(xp, g, oh, ow);
          op[oh * pl.wo + ow] = convert<T>(r.value);
          if (ip != nullptr) ip[oh * pl.wo + ow] = r.index;
        }
      }
    }
  });
}

// grad_x: (N, C, H, W) = Σ grad_out at indices; grad_out, indices: (N, C, Ho, Wo). A scatter
// along the indices: the window is not needed.
template <typename T>
void max_pool2d_backward_kernel(const Tensor& grad_x, const Tensor& grad_out, const Tensor& indices,
                                const Pool2dParams& /*window*/) {
  const Planes pl = planes_of(grad_x, grad_out);
  T* gxd = grad_x.data_ptr<T>();
  const T* god = grad_out.data_ptr<T>();
  const int64_t* id = indices.data_ptr<int64_t>();
  parallel_for(0, pl.count, plane_grain(pl.h * pl.w + pl.ho * pl.wo), [&](int64_t b, int64_t e) {
    for (int64_t plane = b; plane < e; ++plane) {
      PlaneAccumulator<T> acc(gxd + plane * pl.h * pl.w, pl.h * pl.w);
      const T* gp = god + plane * pl.ho * pl.wo;
      const int64_t* ip = id + plane * pl.ho * pl.wo;
      for (int64_t i = 0; i < pl.ho * pl.wo; ++i)
        if (ip[i] >= 0) acc.data()[ip[i]] += static_cast<opmath_t<T>>(gp[i]);
      acc.finish();
    }
  });
}

// ---- average pooling -----------------------------------------------------------------------

using kernels::avg_divisor;
using kernels::avg_window;
using Window = kernels::AvgWindow;

// out: (N, C, Ho, Wo) = window sums of x: (N, C, H, W) / divisor; sums in fp32 (f64 for f64).
template <typename T>
void avg_pool2d_kernel(const Tensor& out, const Tensor& x, const Pool2dParams& p) {
  const Planes pl = planes_of(x, out);
  const T* xd = x.data_ptr<T>();
  T* od = out.data_ptr<T>();
  const kernels::PoolGeometry g = geometry(pl, p);
  parallel_for(0, pl.count, plane_grain(pl.ho * pl.wo * p.kernel[0] * p.kernel[1]), [&](int64_t b, int64_t e) {
    for (int64_t plane = b; plane < e; ++plane) {
      const T* xp = xd + plane * pl.h * pl.w;
      T* op = od + plane * pl.ho * pl.wo;
      for (int64_t oh = 0; oh < pl.ho; ++oh)
        for (int64_t ow = 0; ow < pl.wo; ++ow) op[oh * pl.wo + ow] = convert<T>(kernels::avg_pool2d_window(xp, g, oh, ow));
    }
  });
}

template <typename T>
void avg_pool2d_backward_kernel(const Tensor& grad_x, const Tensor& grad_out, const Pool2dParams& p) {
  using Acc = opmath_t<T>;
  const Planes pl = planes_of(grad_x, grad_out);
  T* gxd = grad_x.data_ptr<T>();
  const T* god = grad_out.data_ptr<T>();
  const kernels::PoolGeometry geo = geometry(pl, p);
  parallel_for(0, pl.count, plane_grain(pl.ho * pl.wo * p.kernel[0] * p.kernel[1]), [&](int64_t b, int64_t e) {
    for (int64_t plane = b; plane < e; ++plane) {
      PlaneAccumulator<T> acc(gxd + plane * pl.h * pl.w, pl.h * pl.w);
      Acc* a = acc.data();
      const T* gp = god + plane * pl.ho * pl.wo;
      for (int64_t oh = 0; oh < pl.ho; ++oh) {
        const Window wh = avg_window(oh, p.kernel[0], p.stride[0], p.padding[0], pl.h);
        for (int64_t ow = 0; ow < pl.wo; ++ow) {
          const Window ww = avg_window(ow, p.kernel[1], p.stride[1], p.padding[1], pl.w);
          if (wh.begin >= wh.end || ww.begin >= ww.end) continue;
          const Acc g = static_cast<Acc>(gp[oh * pl.wo + ow]) / avg_divisor<Acc>(wh, ww, geo);
          for (int64_t ih = wh.begin; ih < wh.end; ++ih)
            for (int64_t iw = ww.begin; iw < ww.end; ++iw) a[ih * pl.w + iw] += g;
        }
      }
      acc.finish();
    }
  });
}

// ---- adaptive average pooling ----------------------------------------------------------------

using kernels::adaptive_begin;
using kernels::adaptive_end;

template <typename T>
void adaptive_avg_pool2d_kernel(const Tensor& out, const Tensor& x) {
  const Planes pl = planes_of(x, out);
  const kernels::PoolGeometry g = geometry(pl, Pool2dParams{});
  const T* xd = x.data_ptr<T>();
  T* od = out.data_ptr<T>();
  // Each input element is read about once per output window covering it.
  parallel_for(0, pl.count, plane_grain(pl.h * pl.w + pl.ho * pl.wo), [&](int64_t b, int64_t e) {
    for (int64_t plane = b; plane < e; ++plane) {
      const T* xp = xd + plane * pl.h * pl.w;
      T* op = od + plane * pl.ho * pl.wo;
      for (int64_t oh = 0; oh < pl.ho; ++oh)
        for (int64_t ow = 0; ow < pl.wo; ++ow)
          op[oh * pl.wo + ow] = convert<T>(kernels::adaptive_avg_pool2d_window(xp, g, oh, ow));
    }
  });
}

template <typename T>
void adaptive_avg_pool2d_backward_kernel(const Tensor& grad_x, const Tensor& grad_out) {
  using Acc = opmath_t<T>;
  const Planes pl = planes_of(grad_x, grad_out);
  T* gxd = grad_x.data_ptr<T>();
  const T* god = grad_out.data_ptr<T>();
  parallel_for(0, pl.count, plane_grain(pl.h * pl.w + pl.ho * pl.wo), [&](int64_t b, int64_t e) {
    for (int64_t plane = b; plane < e; ++plane) {
      PlaneAccumulator<T> acc(gxd + plane * pl.h * pl.w, pl.h * pl.w);
      Acc* a = acc.data();
      const T* gp = god + plane * pl.ho * pl.wo;
      for (int64_t oh = 0; oh < pl.ho; ++oh) {
        const int64_t h0 = adaptive_begin(oh, pl.h, pl.ho), h1 = adaptive_end(oh, pl.h, pl.ho);
        for (int64_t ow = 0; ow < pl.wo; ++ow) {
          const int64_t w0 = adaptive_begin(ow, pl.w, pl.wo), w1 = adaptive_end(ow, pl.w, pl.wo);
          const Acc g = static_cast<Acc>(gp[oh * pl.wo + ow]) / static_cast<Acc>((h1 - h0) * (w1 - w0));
          for (int64_t ih = h0; ih < h1; ++ih)
            for (int64_t iw = w0; iw < w1; ++iw) a[ih * pl.w + iw] += g;
        }
      }
      acc.finish();
    }
  });
}

template <typename T>
void register_for() {
  constexpr DType dt = dtype_of<T>();
  register_kernel<kernels::MaxPool2dKernel>(OpId::max_pool2d, DeviceType::cpu, dt, &max_pool2d_kernel<T>);
  register_kernel<kernels::MaxPool2dBackwardKernel>(OpId::max_pool2d_backward, DeviceType::cpu, dt,
                                                    &max_pool2d_backward_kernel<T>);
  register_kernel<kernels::AvgPool2dKernel>(OpId::avg_pool2d, DeviceType::cpu, dt, &avg_pool2d_kernel<T>);
  register_kernel<kernels::AvgPool2dBackwardKernel>(OpId::avg_pool2d_backward, DeviceType::cpu, dt,
                                                    &avg_pool2d_backward_kernel<T>);
  register_kernel<kernels::AdaptiveAvgPool2dKernel>(OpId::adaptive_avg_pool2d, DeviceType::cpu, dt,
                                                    &adaptive_avg_pool2d_kernel<T>);
  register_kernel<kernels::AdaptiveAvgPool2dBackwardKernel>(OpId::adaptive_avg_pool2d_backward, DeviceType::cpu, dt,
                                                            &adaptive_avg_pool2d_backward_kernel<T>);
}

}  // namespace

void register_pool_kernels() {
  register_for<float>();
  register_for<double>();
  register_for<Half>();
  register_for<BFloat16>();
}

}  // namespace precis::cpu
