// The fused optimizer updates on the CPU (sgd_step, adam_step; ops/contracts/kernels_optim.h): one pass per
// parameter over contiguous buffers, in blocks of kBlock elements so that f16/bf16 gradients and
// parameters are converted with the vectorised bulk conversions (core/half.h) and the inner
// loops run over plain float/double arrays.
#include <algorithm>
#include <type_traits>

#include "core/dtype_visit.h"
#include "core/error.h"
#include "core/half.h"
#include "core/opmath.h"
#include "core/thread_pool.h"

// The element math (ops/math/optim_math.h) says where it fuses multiply-adds, as PyTorch's kernels do;
// GCC would contract other multiply-adds into FMA by default in C++ when -mfma is on, changing
// last bits, so contraction is off for this file. (The build also compiles this file with
// -fno-math-errno, cmake/precis_library.cmake: sqrt without errno is the bare correctly rounded
// instruction, which Adam's element loop needs to vectorise; no pragma can say that for GCC.)
#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include "ops/cpu/cpu_backend.h"
#include "ops/contracts/kernels_optim.h"
#include "ops/op_table.h"
#include "ops/math/optim_args.h"

namespace precis::cpu {
namespace {

using kernels::AdamHyper;
using kernels::AdamTensor;
using kernels::StepInputs;
using kernels::SgdHyper;
using kernels::SgdTensor;

constexpr int64_t kBlock = 512;    // elements converted per block (stack buffers)
constexpr int64_t kGrain = 16384;  // elements per parallel chunk, at least

/// The gradient block as compute-type values, scaled by inv_scale when `scaled`: either a pointer
/// into the gradient itself (same type, no scaling) or `buf` filled with converted values.
template <typename G, typename C>
const C* load_grad(const G* g, C* buf, int64_t n, bool scaled, C inv_scale) {
  if constexpr (std::is_same_v<G, C>) {
    if (!scaled) return g;
    for (int64_t i = 0; i < n; ++i) buf[i] = g[i] * inv_scale;
    return buf;
  } else {
    static_assert(std::is_same_v<C, float>);
    if constexpr (std::is_same_v<G, Half>) {
      half_to_float(g, buf, n);
    } else if constexpr (std::is_same_v<G, BFloat16>) {
      bfloat16_to_float(g, buf, n);
    } else {
      for (int64_t i = 0; i < n; ++i) buf[i] = load_op(g[i]);
    }
    if (scaled)
      for (int64_t i = 0; i < n; ++i) buf[i] = buf[i] * inv_scale;
    return buf;
  }
}

/// Writes the rounded fp32 master block into the low-precision parameter.
template <typename P>
void store_low_precision(const float* master, P* param, int64_t n) {
  if constexpr (std::is_same_v<P, Half>) {
    float_to_half(master, param, n);
  } else {
    float_to_bfloat16(master, param, n);
  }
}

/// The parameter values the update works on, in the update's compute type opmath_t<P> (f64 for
/// f64 parameters, f32 otherwise): the master copy for f16/bf16, else the parameter.
template <typename P>
opmath_t<P>* working_values(void* param, float* master) {
  if constexpr (is_reduced_float_v<P>) {
    return master;
  } else {
    return static_cast<P*>(param);
  }
}

bool skipped(const StepInputs& sc) { return sc.found_inf != nullptr && *sc.found_inf != 0.0f; }

/// The SGD update of n elements with the configuration flags fixed at compile time, so the loop
/// has no per-element branches and vectorises (with the flags as run-time values GCC kept the
/// momentum loop scalar: ~27 instructions per element, callgrind). The element formula is
/// kernels::sgd_element unchanged; the constants only fold its tests (a zero weight decay is
/// skipped there, as here), so the result is the generic loop's bit for bit. p, g, buf: distinct
/// buffers (param or master, gradient or the scaled block, momentum).
template <bool kMaximize, bool kDecay, bool kMomentum, bool kFirst, bool kNesterov, typename C>
void sgd_block(C* __restrict p, const C* __restrict g, C* __restrict buf, int64_t n, kernels::SgdScalars<C> s) {
  s.maximize = kMaximize;
  s.has_momentum = kMomentum;
  s.nesterov = kNesterov;
  if constexpr (!kDecay) s.weight_decay = C(0);
  for (int64_t i = 0; i < n; ++i) kernels::sgd_element<C>(p[i], g[i], kMomentum ? buf + i : nullptr, kFirst, s);
}

template <typename C>
using SgdBlockFn = void (*)(C*, const C*, C*, int64_t, kernels::SgdScalars<C>);

/// The sgd_block instantiation for flags[0..5) (maximize, decay, momentum, first, nesterov).
template <typename C, bool... B>
SgdBlockFn<C> pick_sgd_block(const bool (&flags)[5]) {
  if constexpr (sizeof...(B) == 5) {
    return &sgd_block<B..., C>;
  } else {
    return flags[sizeof...(B)] ? pick_sgd_block<C, B..., true>(flags) : pick_sgd_block<C, B..., false>(flags);
  }
}

template <typename P, typename G>
void sgd_tensor(const SgdTensor& t, const SgdHyper& h, const StepInputs& sc) {
  using C = opmath_t<P>;
  // The momentum buffer is new (takes the gradient as it is) until one step has been applied.
  const bool first = t.step != nullptr && *t.step == 0.0f;
  const kernels::SgdScalars<C> s = kernels::make_sgd_scalars<C>(h);
  const bool scaled = sc.grad_scale != nullptr;
  const C inv_scale = scaled ? static_cast<C>(kernels::inverse_scale(*sc.grad_scale)) : C(1);
  C* p_all = working_values<P>(t.param, t.master);
  const G* g_all = static_cast<const G*>(t.grad);
  C* buf_all = static_cast<C*>(t.momentum_buffer);
  const bool momentum = s.has_momentum && buf_all != nullptr;
  const SgdBlockFn<C> block = pick_sgd_block<C>(
      {s.maximize, s.weight_decay != C(0), momentum, momentum && first, momentum && s.nesterov});
  // param, grad, buffer: (numel,)
  parallel_for(0, t.numel, kGrain, [&](int64_t begin, int64_t end) {
    C gbuf[kBlock];
    for (int64_t b0 = begin; b0 < end; b0 += kBlock) {
      const int64_t n = std::min(kBlock, end - b0);
      C* p = p_all + b0;
      const C* g = load_grad<G, C>(g_all + b0, gbuf, n, scaled, inv_scale);
      block(p, g, buf_all ? buf_all + b0 : nullptr, n, s);
      if constexpr (is_reduced_float_v<P>) store_low_precision<P>(p, static_cast<P*>(t.param) + b0, n);
    }
  });
  if (t.step != nullptr) *t.step = *t.step + 1.0f;
}

/// The Adam(W) update of n elements with the configuration flags fixed at compile time, as
/// sgd_block: the same kernels::adam_element with its tests folded, so the loop vectorises and
/// the results equal the generic loop's bit for bit. vmax: null unless kAmsgrad.
template <bool kMaximize, bool kDecay, bool kDecoupled, bool kAmsgrad, typename C>
void adam_block(C* __restrict p, const C* __restrict g, C* __restrict m, C* __restrict v, C* __restrict vmax,
                int64_t n, kernels::AdamScalars<C> s) {
  s.maximize = kMaximize;
  s.has_weight_decay = kDecay;
  s.decoupled = kDecoupled;
  s.amsgrad = kAmsgrad;
  for (int64_t i = 0; i < n; ++i) kernels::adam_element<C>(p[i], g[i], m[i], v[i], kAmsgrad ? vmax + i : nullptr, s);
}

template <typename C>
using AdamBlockFn = void (*)(C*, const C*, C*, C*, C*, int64_t, kernels::AdamScalars<C>);

/// The adam_block instantiation for flags[0..4) (maximize, decay, decoupled, amsgrad).
template <typename C, bool... B>
AdamBlockFn<C> pick_adam_block(const bool (&flags)[4]) {
  if constexpr (sizeof...(B) == 4) {
    return &adam_block<B..., C>;
  } else {
    return flags[sizeof...(B)] ? pick_adam_block<C, B..., true>(flags) : pick_adam_block<C, B..., false>(flags);
  }
}

template <typename P, typename G>
void adam_tensor(const AdamTensor& t, const AdamHyper& h, const StepInputs& sc) {
  using C = opmath_t<P>;
  const float step = *t.step + 1.0f;  // f32 like PyTorch's state["step"]
  const kernels::AdamScalars<C> s = kernels::make_adam_scalars<C>(h, static_cast<double>(step));
  const bool scaled = sc.grad_scale != nullptr;
  const C inv_scale = scaled ? static_cast<C>(kernels::inverse_scale(*sc.grad_scale)) : C(1);
  C* p_all = working_values<P>(t.param, t.master);
  const G* g_all = static_cast<const G*>(t.grad);
  C* m_all = static_cast<C*>(t.exp_avg);
  C* v_all = static_cast<C*>(t.exp_avg_sq);
  C* vmax_all = static_cast<C*>(t.max_exp_avg_sq);
  const bool amsgrad = s.amsgrad && vmax_all != nullptr;
  const AdamBlockFn<C> block = pick_adam_block<C>({s.maximize, s.has_weight_decay, s.decoupled, amsgrad});
  // param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq: (numel,)
  parallel_for(0, t.numel, kGrain / 2, [&](int64_t begin, int64_t end) {
    C gbuf[kBlock];
    for (int64_t b0 = begin; b0 < end; b0 += kBlock) {
      const int64_t n = std::min(kBlock, end - b0);
      C* p = p_all + b0;
      const C* g = load_grad<G, C>(g_all + b0, gbuf, n, scaled, inv_scale);
      block(p, g, m_all + b0, v_all + b0, amsgrad ? vmax_all + b0 : nullptr, n, s);
      if constexpr (is_reduced_float_v<P>) store_low_precision<P>(p, static_cast<P*>(t.param) + b0, n);
    }
  });
  *t.step = step;
}

// An optimizer kernel's body: checks the scaler inputs and the parameters' tensors (op names
// the kernel in messages), skips the step when found_inf is set, else updates each parameter with
// update<G>, G the gradient's element type (P, or f32 for an f16/bf16 parameter's fp32 gradient).
template <typename P, typename Param, typename Hyper, typename MakeTensors, typename Update>
void run_step(const char* op, const std::vector<Param>& params, const Hyper& host_hyper, const Tensor& grad_scale,
              const Tensor& found_inf, const Tensor& scheduled, MakeTensors make_tensors, Update update) {
  // Host memory: the CPU's, or the tests' fake CUDA device's (tests/support/fake_cuda), which runs
  // these kernels too; the operands must share the parameters' device either way.
  const Device device = params.empty() ? Device::cpu() : params[0].param.device();
  const StepInputs sc = kernels::step_inputs(op, grad_scale, found_inf, scheduled, device);
  const auto ts = make_tensors(op, params, host_hyper, device, dtype_of<P>());
  if (skipped(sc)) return;
  const Hyper h = kernels::apply_scheduled(host_hyper, sc);
  for (size_t i = 0; i < ts.size(); ++i) {
    if (params[i].grad.dtype() == params[i].param.dtype()) {
      update.template operator()<P>(ts[i], h, sc);
    } else if constexpr (is_reduced_float_v<P>) {
      update.template operator()<float>(ts[i], h, sc);
    }
  }
}

template <typename P>
void sgd_kernel(const std::vector<kernels::SgdParam>& params, const SgdHyper& h, const Tensor& grad_scale,
                const Tensor& found_inf, const Tensor& scheduled) {
  run_step<P>("sgd_step", params, h, grad_scale, found_inf, scheduled, &kernels::sgd_tensors,
              []<typename G>(const SgdTensor& t, const SgdHyper& hy, const StepInputs& sc) { sgd_tensor<P, G>(t, hy, sc); });
}

template <typename P>
void adam_kernel(const std::vector<kernels::AdamParam>& params, const AdamHyper& h, const Tensor& grad_scale,
                 const Tensor& found_inf, const Tensor& scheduled) {
  run_step<P>("adam_step", params, h, grad_scale, found_inf, scheduled, &kernels::adam_tensors,
              []<typename G>(const AdamTensor& t, const AdamHyper& hy, const StepInputs& sc) {
                adam_tensor<P, G>(t, hy, sc);
              });
}

}  // namespace

void register_optim_kernels() {
  // One instantiation per parameter dtype; the gradient's dtype (the parameter's, or f32 for an
  // f16/bf16 parameter) is dispatched per tensor inside.
  for (DType dt : {DType::f32, DType::f64, DType::f16, DType::bf16}) {
    visit_floating_dtype(dt, [&]<typename P>() {
      register_kernel<kernels::SgdStepKernel>(OpId::sgd_step, DeviceType::cpu, dt, &sgd_kernel<P>);
      register_kernel<kernels::AdamStepKernel>(OpId::adam_step, DeviceType::cpu, dt, &adam_kernel<P>);
    });
  }
}

}  // namespace precis::cpu
