#include "optim/clip_grad.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <mutex>
#include <string>
#include <unordered_map>

#include "autograd/grad_mode.h"
#include "ops/contracts/kernels_optim.h"
#include "ops/op_table.h"
#include "tensor/factory.h"

namespace precis::optim {
namespace {

/// The gradients of `params` that exist, as the kernels take them: contiguous (a copy where the
/// gradient is not), floating, all on one device.
struct GradList {
  std::vector<Tensor> grads;     // what the kernels see
  std::vector<Tensor> owners;    // the gradients themselves (differ from grads[i] for copies)
  std::vector<size_t> index;     // position of each in params
  Device device = Device::cpu();  // the gradients' device (the CPU when there are none)
};

// mark_sharded_gradient's parameters (kept alive by the optimizer that marked them) and what to
// call instead; the count spares unsharded training the lock.
std::mutex g_sharded_mutex;
std::unordered_map<const TensorImpl*, std::string> g_sharded;
std::atomic<size_t> g_sharded_count{0};

void refuse_sharded(const std::vector<Tensor>& params, const char* op) {
  if (g_sharded_count.load(std::memory_order_acquire) == 0) return;
  std::lock_guard<std::mutex> lock(g_sharded_mutex);
  for (size_t i = 0; i < params.size(); ++i) {
    if (!params[i].defined()) continue;
    auto it = g_sharded.find(params[i].impl());
    PRECIS_CHECK_T(StateError, it == g_sharded.end(), op, ": parameter ", i, " (", params[i].describe(),
                   ") has its gradient sharded: its .grad is this rank's unreduced gradient, not the one its "
                   "optimizer steps; ", it->second);
  }
}

GradList collect(const std::vector<Tensor>& params, const char* op) {
  refuse_sharded(params, op);
  GradList out;
  for (size_t i = 0; i < params.size(); ++i) {
    Tensor g = params[i].grad();
    if (!g.defined()) continue;
    PRECIS_CHECK_DTYPE(g.is_floating_point(), op, ": gradient ", i, " is ", g.describe(), "; expected a floating dtype");
    if (out.grads.empty()) out.device = g.device();
    PRECIS_CHECK_DEVICE(g.device() == out.device, op, ": gradient ", i, " is ", g.describe(), " but gradient ",
                        out.index.front(), " is on ", out.device.str(),
                        "; clip the parameters of each device in a separate call");
    out.grads.push_back(g.is_contiguous() ? g : g.contiguous());
    out.owners.push_back(g);
    out.index.push_back(i);
  }
  return out;
}

/// Copies the kernels' results back into non-contiguous gradients and bumps every version.
void finish_in_place(const GradList& l) {
  for (size_t k = 0; k < l.grads.size(); ++k) {
    Tensor owner = l.owners[k];
    if (!l.grads[k].is_same(owner)) owner.copy_(l.grads[k]);
    owner.bump_version();
  }
}

/// The kernel of a gradient-list op (registered under every floating dtype; looked up by f32).
template <typename Fn>
KernelRef<Fn> list_kernel(OpId op, Device device) {
  return kernel<Fn>(op, device.type, DType::f32);
}

/// Power sums (1-D f64 on the gradients' device) of every gradient of `l`.
Tensor power_sums(const GradList& l, double norm_type) {
  Tensor sums = zeros({static_cast<int64_t>(l.grads.size())}, {.dtype = DType::f64, .device = l.device});
  list_kernel<kernels::GradNormKernel>(OpId::grad_norms, l.device)(l.grads, norm_type, sums);
  return sums;
}

/// With error_if_nonfinite: reads the power sums (the one host synchronisation, as in PyTorch)
/// and throws ValueError naming the parameters whose gradients are not finite when the total is
/// not finite.
void check_finite(const GradList& l, const std::vector<Tensor>& params, const Tensor& sums, double norm_type,
                  const std::string& what) {
  const std::vector<double> s = sums.to(Device::cpu()).to_vector<double>();
  const kernels::NormKind kind = kernels::norm_kind(norm_type);
  double acc = 0.0;
  for (double v : s) acc = kernels::norm_combine(acc, v < 0 ? NAN : v, kind);
  const double total = kernels::norm_root(acc, kind, norm_type);
  if (std::isfinite(total)) return;
  std::string bad;
  for (size_t k = 0; k < s.size(); ++k) {
    if (!std::isfinite(s[k]))
      bad += precis::detail::str_cat(bad.empty() ? "" : ", ", "parameter ", l.index[k], " (",
                                     params[l.index[k]].describe(), ")");
  }
  throw ValueError(precis::detail::str_cat(
      "clip_grad_norm_: the total ", what, " of the gradients is ", total, "; non-finite gradients: ",
      bad.empty() ? "none found per tensor (the total overflowed)" : bad,
      ". Pass error_if_nonfinite = false to get the norm back and skip the step instead"));
}

/// The clip itself, on the gradients' device: total norm from the power sums, then the scaling
/// when it is finite and above max_norm. Returns the total (0-d on that device: f64 when every
/// gradient is f64, else f32).
Tensor clip_with(const GradList& l, const Tensor& sums, double norm_type, double max_norm) {
  if (l.grads.empty()) return scalar_tensor(0.0, {.dtype = DType::f32});
  NoGradGuard no_grad;
  const bool all_f64 =
      std::all_of(l.grads.begin(), l.grads.end(), [](const Tensor& g) { return g.dtype() == DType::f64; });
  Tensor total = empty({}, {.dtype = all_f64 ? DType::f64 : DType::f32, .device = l.device});
  list_kernel<kernels::ClipGradNormKernel>(OpId::clip_grad_norm, l.device)(l.grads, sums, norm_type, max_norm, total);
  finish_in_place(l);
  return total;
}

std::string norm_name(double norm_type) { return std::to_string(norm_type) + "-norm"; }

}  // namespace

std::vector<double> grad_norms(const std::vector<Tensor>& params, double norm_type) {
  PRECIS_CHECK(norm_type > 0, "grad_norms: norm_type must be > 0 (or INFINITY), got ", norm_type);
  const GradList l = collect(params, "grad_norms");
  std::vector<double> out(params.size(), 0.0);
  if (l.grads.empty()) return out;
  // A host vector: this reads the device.
  const std::vector<double> s = power_sums(l, norm_type).to(Device::cpu()).to_vector<double>();
  const kernels::NormKind kind = kernels::norm_kind(norm_type);
  for (size_t k = 0; k < s.size(); ++k) out[l.index[k]] = kernels::norm_root(kernels::norm_combine(0.0, s[k], kind), kind, norm_type);
  return out;
}

Tensor clip_grad_norm_(const std::vector<Tensor>& params, double max_norm, double norm_type,
                       bool error_if_nonfinite) {
  PRECIS_CHECK(norm_type > 0, "clip_grad_norm_: norm_type must be > 0 (or INFINITY), got ", norm_type);
  PRECIS_CHECK(max_norm >= 0, "clip_grad_norm_: max_norm must be >= 0, got ", max_norm);
  const GradList l = collect(params, "clip_grad_norm_");
  if (l.grads.empty()) return scalar_tensor(0.0, {.dtype = DType::f32});
  const Tensor sums = power_sums(l, norm_type);
  if (error_if_nonfinite) check_finite(l, params, sums, norm_type, norm_name(norm_type));
  return clip_with(l, sums, norm_type, max_norm);
}

Tensor clip_grad_norm_(const std::vector<Tensor>& params, double max_norm,
                       const std::vector<double>& per_param_sq_norms, bool error_if_nonfinite) {
  PRECIS_CHECK(max_norm >= 0, "clip_grad_norm_: max_norm must be >= 0, got ", max_norm);
  PRECIS_CHECK_SHAPE(per_param_sq_norms.size() == params.size(), "clip_grad_norm_: got ", per_param_sq_norms.size(),
                     " precomputed squared norms for ", params.size(), " parameters");
  const GradList l = collect(params, "clip_grad_norm_");
  std::vector<double> used;
  for (size_t k = 0; k < l.index.size(); ++k) {
    const double v = per_param_sq_norms[l.index[k]];
    PRECIS_CHECK(!(v < 0), "clip_grad_norm_: precomputed squared norm ", l.index[k], " is negative (", v, ")");
    used.push_back(v);
  }
  if (l.grads.empty()) return scalar_tensor(0.0, {.dtype = DType::f32});
  const Tensor sums = from_vector<double>(used).to(l.device);
  if (error_if_nonfinite) check_finite(l, params, sums, 2.0, "2-norm");
  return clip_with(l, sums, 2.0, max_norm);
}

Tensor clip_grad_norm_(const std::vector<Tensor>& params, double max_norm, const Tensor& per_param_sq_norms,
                       bool error_if_nonfinite) {
  PRECIS_CHECK(max_norm >= 0, "clip_grad_norm_: max_norm must be >= 0, got ", max_norm);
  PRECIS_CHECK_SHAPE(per_param_sq_norms.defined() && per_param_sq_norms.dim() == 1 &&
                         per_param_sq_norms.numel() == static_cast<int64_t>(params.size()),
                     "clip_grad_norm_: the precomputed squared norms must be a 1-D tensor with one entry per "
                     "parameter (", params.size(), "), got ",
                     per_param_sq_norms.defined() ? per_param_sq_norms.describe() : std::string("an undefined tensor"));
  PRECIS_CHECK_DTYPE(per_param_sq_norms.dtype() == DType::f32 || per_param_sq_norms.dtype() == DType::f64,
                     "clip_grad_norm_: the precomputed squared norms must be f32 or f64, got ",
                     per_param_sq_norms.describe());
  const GradList l = collect(params, "clip_grad_norm_");
  if (l.grads.empty()) return scalar_tensor(0.0, {.dtype = DType::f32});
  NoGradGuard no_grad;
  // The entries of the parameters with a gradient, on the gradients' device: the tensor itself
  // when every parameter has one (the loss scaler's case), else device copies of each run of
  // consecutive entries. Nothing is read on the host.
  Tensor sums = per_param_sq_norms.to(l.device).contiguous();
  if (l.index.size() != params.size()) {
    Tensor picked = empty({static_cast<int64_t>(l.index.size())}, {.dtype = sums.dtype(), .device = l.device});
    for (size_t k = 0; k < l.index.size();) {
      size_t run = 1;
      while (k + run < l.index.size() && l.index[k + run] == l.index[k] + run) ++run;
      const auto at = static_cast<int64_t>(l.index[k]);
      picked.slice(0, static_cast<int64_t>(k), static_cast<int64_t>(k + run)).copy_(sums.slice(0, at, at + static_cast<int64_t>(run)));
      k += run;
    }
    sums = picked;
  }
  if (error_if_nonfinite) check_finite(l, params, sums, 2.0, "2-norm");
  return clip_with(l, sums, 2.0, max_norm);
}

void clip_grad_value_(const std::vector<Tensor>& params, double clip_value) {
  PRECIS_CHECK(clip_value >= 0, "clip_grad_value_: clip_value must be >= 0, got ", clip_value);
  const GradList l = collect(params, "clip_grad_value_");
  if (l.grads.empty()) return;
  NoGradGuard no_grad;
  list_kernel<kernels::ClipGradValueKernel>(OpId::clip_grad_value, l.device)(l.grads, clip_value);
  finish_in_place(l);
}

void mark_sharded_gradient(const Tensor& param, std::string instead) {
  std::lock_guard<std::mutex> lock(g_sharded_mutex);
  g_sharded[param.impl()] = std::move(instead);
  g_sharded_count.store(g_sharded.size(), std::memory_order_release);
}

void unmark_sharded_gradient(const Tensor& param) {
  std::lock_guard<std::mutex> lock(g_sharded_mutex);
  g_sharded.erase(param.impl());
  g_sharded_count.store(g_sharded.size(), std::memory_order_release);
}

}  // namespace precis::optim
