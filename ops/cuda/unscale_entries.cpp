// Tensor unpacking and registration of the loss scaler's fused unscale pass on CUDA devices
// (unscale_grads, ops/contracts/kernels_amp.h). The device code is in unscale.cu.
#include "core/cuda/cuda_context.h"
#include "ops/cuda/cuda_backend.h"
#include "ops/contracts/kernels_amp.h"
#include "ops/op_table.h"
#include "tensor/factory.h"

namespace precis::cuda {

namespace {

// grads: contiguous floating tensors on one CUDA device; inv_scale, found_inf: 0-d f32; counts:
// (n,) f32; sq_norms: (n,) f32 or f64; all on the gradients' device.
void unscale_kernel(const std::vector<Tensor>& grads, const Tensor& inv_scale, bool write, const Tensor& found_inf,
                    const Tensor& counts, const Tensor& sq_norms) {
  const Device dev = found_inf.device();
  auto describe_all = [&] {
    return precis::detail::str_cat("inv_scale ", inv_scale.describe(), ", found_inf ", found_inf.describe(),
                                   ", counts ", counts.describe(), ", sq_norms ", sq_norms.describe());
  };
  const int64_t n = static_cast<int64_t>(grads.size());
  PRECIS_CHECK_DEVICE(dev.is_cuda() && inv_scale.device() == dev && counts.device() == dev && sq_norms.device() == dev,
                      "unscale_grads: the scaler tensors must be on one CUDA device; got ", describe_all());
  PRECIS_CHECK_DTYPE(inv_scale.dtype() == DType::f32 && inv_scale.numel() == 1 && found_inf.dtype() == DType::f32 &&
                         found_inf.numel() == 1 && counts.dtype() == DType::f32 &&
                         (sq_norms.dtype() == DType::f32 || sq_norms.dtype() == DType::f64),
                     "unscale_grads: expects one-element f32 inv_scale and found_inf, f32 counts and f32/f64 "
                     "sq_norms; got ", describe_all());
  PRECIS_CHECK_SHAPE(counts.numel() == n && sq_norms.numel() == n && counts.is_contiguous() && sq_norms.is_contiguous(),
                     "unscale_grads: counts and sq_norms need one contiguous entry per gradient (", n, "); got ",
                     describe_all());
  std::vector<GradBuffer> args;
  args.reserve(grads.size());
  for (size_t i = 0; i < grads.size(); ++i) {
    const Tensor& g = grads[i];
    PRECIS_CHECK_DEVICE(g.device() == dev, "unscale_grads: gradient ", i, " is ", g.describe(),
                        " but the scaler tensors are on ", dev.str());
    PRECIS_CHECK_DTYPE(is_floating(g.dtype()), "unscale_grads: gradient ", i, " is ", g.describe(),
                       "; gradients are floating");
    PRECIS_CHECK(g.is_contiguous(), "unscale_grads: gradient ", i, " ", g.describe(), " is not contiguous");
    args.push_back({g.data_ptr(), g.numel(), g.dtype()});
  }
  if (args.empty()) return;
  DeviceGuard guard(dev.index);
  const size_t bytes = unscale_scratch_bytes(args.data(), static_cast<int>(args.size()));
  // Freed on return: the stream-ordered allocator reuses it only for work queued after the pass.
  Tensor scratch = empty({static_cast<int64_t>((bytes + 7) / 8)}, {.dtype = DType::i64, .device = dev});
  launch_unscale(args.data(), static_cast<int>(args.size()), static_cast<const float*>(inv_scale.data_ptr()), write,
                 static_cast<float*>(found_inf.data_ptr()), static_cast<float*>(counts.data_ptr()),
                 sq_norms.data_ptr(), sq_norms.dtype() == DType::f64, scratch.data_ptr(), device_stream(dev.index));
}

}  // namespace

void register_unscale_kernels() {
  // Looked up by found_inf's dtype (f32); registered under every floating dtype as on the CPU, so
  // a lookup by a gradient's dtype finds it too.
  for (DType dt : {DType::f32, DType::f64, DType::f16, DType::bf16})
    register_kernel<kernels::UnscaleKernel>(OpId::unscale_grads, DeviceType::cuda, dt, &unscale_kernel);
}

}  // namespace precis::cuda
