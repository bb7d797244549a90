#include "ops/math/optim_args.h"

#include <string>

#include "core/error.h"

namespace precis::kernels {
namespace {

std::string describe(const Tensor& t) { return t.defined() ? t.describe() : std::string("an undefined tensor"); }

/// Checks one buffer of parameter `index`: present iff `required`; then on `device`, of `dtype`,
/// contiguous with `numel` elements. Returns its data (null when absent).
void* buffer(const char* op, size_t index, const char* what, const Tensor& t, bool required, int64_t numel,
             DType dtype, Device device) {
  if (!required) {
    PRECIS_CHECK(!t.defined(), op, ": parameter ", index, ": unexpected ", what, " ", t.describe(),
                 " (not used with these options)");
    return nullptr;
  }
  PRECIS_CHECK(t.defined(), op, ": parameter ", index, ": the ", what, " tensor is missing");
  PRECIS_CHECK_DEVICE(t.device() == device, op, ": parameter ", index, ": ", what, " ", t.describe(), " is not on ",
                      device.str());
  PRECIS_CHECK_DTYPE(t.dtype() == dtype, op, ": parameter ", index, ": ", what, " is ", t.describe(), "; expected ",
                     dtype_name(dtype));
  PRECIS_CHECK_SHAPE(t.numel() == numel && t.is_contiguous(), op, ": parameter ", index, ": ", what, " ",
                     t.describe(), " must be contiguous with ", numel, " elements");
  return t.data_ptr();
}

/// Checks the parameter's dtype and its gradient's (the parameter's, or f32 for f16/bf16).
void check_pair(const char* op, size_t index, const Tensor& param, const Tensor& grad, DType param_dtype) {
  PRECIS_CHECK_DTYPE(param.defined() && param.dtype() == param_dtype, op, ": parameter ", index, " is ",
                     describe(param), " but the kernel is the ", dtype_name(param_dtype),
                     " one; call it once per parameter dtype");
  const bool ok = grad.defined() && (grad.dtype() == param.dtype() ||
                                     (is_low_precision(param.dtype()) && grad.dtype() == DType::f32));
  PRECIS_CHECK_DTYPE(ok, op, ": parameter ", index, " ", param.describe(), " has gradient ", describe(grad),
                     "; a gradient must have its parameter's dtype (or f32 for an f16/bf16 parameter)");
}

DType state_dtype(DType param) { return param == DType::f64 ? DType::f64 : DType::f32; }

// Checks a parameter's (param, grad) pair and sets what every optimizer's tensor has: param,
// grad, the fp32 master (low-precision params only) and numel, which it returns.
template <typename Tensors, typename Param>
int64_t common_buffers(Tensors& t, const char* op, size_t i, const Param& a, Device device, DType param_dtype) {
  check_pair(op, i, a.param, a.grad, param_dtype);
  const int64_t n = a.param.numel();
  t.param = buffer(op, i, "param", a.param, true, n, param_dtype, device);
  t.grad = buffer(op, i, "grad", a.grad, true, n, a.grad.dtype(), device);
  t.master = static_cast<float*>(
      buffer(op, i, "master", a.master, is_low_precision(param_dtype), n, DType::f32, device));
  t.numel = n;
  return n;
}

}  // namespace

std::vector<SgdTensor> sgd_tensors(const char* op, const std::vector<SgdParam>& params, const SgdHyper& hyper,
                                   Device device, DType param_dtype) {
  const bool momentum = hyper.momentum != 0.0;
  std::vector<SgdTensor> out(params.size());
  for (size_t i = 0; i < params.size(); ++i) {
    const SgdParam& a = params[i];
    SgdTensor& t = out[i];
    const int64_t n = common_buffers(t, op, i, a, device, param_dtype);
    t.momentum_buffer = buffer(op, i, "momentum_buffer", a.momentum_buffer, momentum, n, state_dtype(param_dtype), device);
    t.step = static_cast<float*>(buffer(op, i, "step", a.step, momentum, 1, DType::f32, device));
  }
  return out;
}

std::vector<AdamTensor> adam_tensors(const char* op, const std::vector<AdamParam>& params, const AdamHyper& hyper,
                                     Device device, DType param_dtype) {
  std::vector<AdamTensor> out(params.size());
  const DType state = state_dtype(param_dtype);
  for (size_t i = 0; i < params.size(); ++i) {
    const AdamParam& a = params[i];
    AdamTensor& t = out[i];
    const int64_t n = common_buffers(t, op, i, a, device, param_dtype);
    t.exp_avg = buffer(op, i, "exp_avg", a.exp_avg, true, n, state, device);
    t.exp_avg_sq = buffer(op, i, "exp_avg_sq", a.exp_avg_sq, true, n, state, device);
    t.max_exp_avg_sq = buffer(op, i, "max_exp_avg_sq", a.max_exp_avg_sq, hyper.amsgrad, n, state, device);
    t.step = static_cast<float*>(buffer(op, i, "step", a.step, true, 1, DType::f32, device));
  }
  return out;
}

StepInputs step_inputs(const char* op, const Tensor& grad_scale, const Tensor& found_inf, const Tensor& scheduled,
                       Device device) {
  for (const auto& [what, t] : {std::pair<const char*, const Tensor&>{"grad_scale", grad_scale},
                                std::pair<const char*, const Tensor&>{"found_inf", found_inf}}) {
    if (!t.defined()) continue;
    PRECIS_CHECK_DTYPE(t.dtype() == DType::f32 && t.numel() == 1, op, ": ", what, " must be one f32 value, got ",
                       t.describe());
    PRECIS_CHECK_DEVICE(t.device() == device, op, ": ", what, " ", t.describe(), " is not on the parameters' device ",
                        device.str());
  }
  StepInputs s;
  if (grad_scale.defined()) s.grad_scale = static_cast<const float*>(grad_scale.data_ptr());
  if (found_inf.defined()) s.found_inf = static_cast<const float*>(found_inf.data_ptr());
  if (scheduled.defined()) {
    PRECIS_CHECK_DTYPE(scheduled.dtype() == DType::f64 && scheduled.dim() == 1 && scheduled.numel() == 2 &&
                           scheduled.is_contiguous(),
                       op, ": scheduled must be a contiguous 1-D f64 tensor of 2 values (lr, momentum), got ",
                       scheduled.describe());
    PRECIS_CHECK_DEVICE(scheduled.device() == device, op, ": scheduled ", scheduled.describe(),
                        " is not on the parameters' device ", device.str());
    s.scheduled = static_cast<const double*>(scheduled.data_ptr());
  }
  return s;
}

void check_grad_list(const char* op, const std::vector<Tensor>& grads, Device device) {
  for (size_t i = 0; i < grads.size(); ++i) {
    const Tensor& g = grads[i];
    PRECIS_CHECK(g.defined(), op, ": gradient ", i, " is undefined");
    PRECIS_CHECK_DEVICE(g.device() == device, op, ": gradient ", i, " is ", g.describe(), "; expected a tensor on ",
                        device.str());
    PRECIS_CHECK_DTYPE(g.is_floating_point(), op, ": gradient ", i, " is ", g.describe(), "; expected a floating dtype");
    PRECIS_CHECK(g.is_contiguous(), op, ": gradient ", i, " ", g.describe(), " is not contiguous");
  }
}

void check_vector_arg(const char* op, const char* what, const Tensor& t, int64_t n, bool f64_only, Device device) {
  PRECIS_CHECK(t.defined(), op, ": ", what, " is undefined");
  PRECIS_CHECK_DEVICE(t.device() == device, op, ": ", what, " is ", t.describe(), "; expected a tensor on ",
                      device.str());
  PRECIS_CHECK_DTYPE(t.dtype() == DType::f64 || (!f64_only && t.dtype() == DType::f32), op, ": ", what, " is ",
                     t.describe(), f64_only ? "; expected f64" : "; expected f32 or f64");
  if (n < 0) {
    PRECIS_CHECK_SHAPE(t.numel() == 1, op, ": ", what, " is ", t.describe(), "; expected one value");
  } else {
    PRECIS_CHECK_SHAPE(t.dim() == 1 && t.numel() == n && t.is_contiguous(), op, ": ", what, " is ", t.describe(),
                       "; expected a contiguous 1-D tensor of ", n, " entries (one per gradient)");
  }
}

void check_total_out(const char* op, const Tensor& t, Device device, bool allow_f64) {
  PRECIS_CHECK(t.defined(), op, ": total_out is undefined");
  PRECIS_CHECK_DEVICE(t.device() == device, op, ": total_out is ", t.describe(), "; expected a tensor on ", device.str());
  PRECIS_CHECK_DTYPE((t.dtype() == DType::f32 || (allow_f64 && t.dtype() == DType::f64)) && t.numel() == 1, op,
                     ": total_out is ", t.describe(),
                     allow_f64 ? "; expected one f32 or f64 value" : "; expected one f32 value");
}

}  // namespace precis::kernels
