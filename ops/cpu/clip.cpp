// Gradient norms and clipping on the CPU (grad_norms, clip_grad_norm, clip_grad_value;
// ops/contracts/kernels_optim.h). The element math is ops/math/optim_math.h, shared with the CUDA kernels.
#include <algorithm>
#include <limits>
#include <vector>

#include "core/dtype_visit.h"
#include "core/error.h"
#include "core/half.h"
#include "core/opmath.h"
#include "core/thread_pool.h"
#include "ops/cpu/cpu_backend.h"
#include "ops/contracts/kernels_optim.h"
#include "ops/op_table.h"
#include "ops/math/optim_args.h"

namespace precis::cpu {
namespace {

using kernels::NormKind;
using kernels::visit_norm_kind;

constexpr int64_t kBlock = 8192;  // elements per partial power sum (fixed: results independent of threads)
constexpr int64_t kConvert = 512;  // f16/bf16 elements converted at a time
constexpr int64_t kScaleGrain = 32768;

/// The block's values as T (float, double) or converted to float (f16, bf16) into buf.
template <typename T>
const auto* block_values(const T* data, int64_t n, float* buf) {
  if constexpr (std::is_same_v<T, Half>) {
    half_to_float(data, buf, n);
    return static_cast<const float*>(buf);
  } else if constexpr (std::is_same_v<T, BFloat16>) {
    bfloat16_to_float(data, buf, n);
    return static_cast<const float*>(buf);
  } else {
    return data;
  }
}

/// The power sum of one contiguous gradient g: (numel,), accumulated in f64 per block of kBlock
/// elements, the blocks combined in order.
template <NormKind K, typename T>
double power_sum(const T* data, int64_t numel, double p) {
  const int64_t nblocks = (numel + kBlock - 1) / kBlock;
  std::vector<double> partial(static_cast<size_t>(nblocks), 0.0);
  parallel_for(0, nblocks, 4, [&](int64_t b0, int64_t b1) {
    float buf[kConvert];
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t begin = b * kBlock, end = std::min(numel, begin + kBlock);
      double acc = 0.0;
      for (int64_t i = begin; i < end; i += kConvert) {
        const int64_t n = std::min(kConvert, end - i);
        const auto* x = block_values<T>(data + i, n, buf);
        for (int64_t j = 0; j < n; ++j) acc = kernels::norm_accumulate<K>(acc, static_cast<double>(x[j]), p);
      }
      partial[static_cast<size_t>(b)] = acc;
    }
  });
  double total = 0.0;
  for (double v : partial) total = kernels::norm_combine(total, v, K);
  return total;
}

// The device the list's tensors must share: the CPU's host memory, or the tests' fake CUDA
// device's (tests/support/fake_cuda), which runs these kernels on its host memory too.
Device list_device(const std::vector<Tensor>& grads) {
  return grads.empty() || !grads[0].defined() ? Device::cpu() : grads[0].device();
}

void grad_norms_kernel(const std::vector<Tensor>& grads, double norm_type, const Tensor& out) {
  const Device device = list_device(grads);
  kernels::check_grad_list("grad_norms", grads, device);
  kernels::check_vector_arg("grad_norms", "out", out, static_cast<int64_t>(grads.size()), true, device);
  double* o = out.data_ptr<double>();
  const NormKind kind = kernels::norm_kind(norm_type);
  for (size_t i = 0; i < grads.size(); ++i) {
    const Tensor& g = grads[i];
    visit_floating_dtype(g.dtype(), [&]<typename T>() {
      visit_norm_kind(kind, [&]<NormKind K>() {
        o[i] = power_sum<K, T>(static_cast<const T*>(g.data_ptr()), g.numel(), norm_type);
      });
    });
  }
}

/// Multiplies g by coef in g's compute type, in place. g: (numel,).
template <typename A>
void scale_grad(const Tensor& g, A coef) {
  visit_floating_dtype(g.dtype(), [&]<typename T>() {
    using C = opmath_t<T>;
    T* data = static_cast<T*>(g.data_ptr());
    const C c = static_cast<C>(coef);
    parallel_for(0, g.numel(), kScaleGrain, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) data[i] = store_op<T>(static_cast<C>(load_op(data[i]) * c));
    });
  });
}

void clip_grad_norm_kernel(const std::vector<Tensor>& grads, const Tensor& power_sums, double norm_type,
                           double max_norm, const Tensor& total_out) {
  const Device device = list_device(grads);
  kernels::check_grad_list("clip_grad_norm", grads, device);
  kernels::check_vector_arg("clip_grad_norm", "power_sums", power_sums, static_cast<int64_t>(grads.size()), false,
                            device);
  kernels::check_total_out("clip_grad_norm", total_out, device, /*allow_f64=*/true);
  const NormKind kind = kernels::norm_kind(norm_type);
  double acc = 0.0;
  for (size_t i = 0; i < grads.size(); ++i) {
    double v = power_sums.dtype() == DType::f64 ? power_sums.data_ptr<double>()[i]
                                                  : static_cast<double>(power_sums.data_ptr<float>()[i]);
    if (v < 0) v = std::numeric_limits<double>::quiet_NaN();  // not a power sum: no clip, a NaN norm
    acc = kernels::norm_combine(acc, v, kind);
  }
  const double total = kernels::norm_root(acc, kind, norm_type);
  if (total_out.dtype() == DType::f64)
    *total_out.data_ptr<double>() = total;
  else
    *total_out.data_ptr<float>() = static_cast<float>(total);
  // Each gradient by the factor of its own kind: f64 ones in f64, the others PyTorch's f32.
  const float coef = kernels::clip_coefficient<float>(total, max_norm);
  const double coef64 = kernels::clip_coefficient<double>(total, max_norm);
  for (const Tensor& g : grads) {
    if (g.dtype() == DType::f64) {
      if (kernels::clip_scales(total, coef64)) scale_grad(g, coef64);
    } else if (kernels::clip_scales(total, coef)) {
      scale_grad(g, coef);
    }
  }
}

void clip_grad_value_kernel(const std::vector<Tensor>& grads, double clip_value) {
  kernels::check_grad_list("clip_grad_value", grads, list_device(grads));
  for (const Tensor& g : grads) {
    visit_floating_dtype(g.dtype(), [&]<typename T>() {
      using C = opmath_t<T>;
      T* data = static_cast<T*>(g.data_ptr());
      const C hi = static_cast<C>(clip_value);
      // g: (numel,); elements inside the range keep their bits (are not rewritten)
      parallel_for(0, g.numel(), kScaleGrain, [&](int64_t b, int64_t e) {
        for (int64_t k = b; k < e; ++k) {
          const C x = load_op(data[k]);
          if (x > hi || x < -hi) data[k] = store_op<T>(kernels::clip_value_element(x, hi));
        }
      });
    });
  }
}

}  // namespace

void register_clip_kernels() {
  // One kernel per op handles gradients of every floating dtype (dispatched per gradient inside),
  // registered under each floating key as unscale_grads is.
  for (DType dt : {DType::f32, DType::f64, DType::f16, DType::bf16}) {
    register_kernel<kernels::GradNormKernel>(OpId::grad_norms, DeviceType::cpu, dt, &grad_norms_kernel);
    register_kernel<kernels::ClipGradNormKernel>(OpId::clip_grad_norm, DeviceType::cpu, dt, &clip_grad_norm_kernel);
    register_kernel<kernels::ClipGradValueKernel>(OpId::clip_grad_value, DeviceType::cpu, dt, &clip_grad_value_kernel);
  }
}

}  // namespace precis::cpu
