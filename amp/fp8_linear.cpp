// fp8_linear: a linear layer's GEMMs through scaled_matmul with delayed scaling (amp/fp8_linear.h).
#include "amp/fp8_linear.h"

#include <utility>

#include "autograd/grad_mode.h"
#include "autograd/record.h"
#include "core/error.h"
#include "ops/functional.h"

namespace precis::amp {

namespace {

DelayedScalingOptions options_for(Fp8Format format, const Fp8LinearOptions& o) {
  return {.format = format, .margin = o.margin, .amax_history_len = o.amax_history_len, .amax_compute = o.amax_compute};
}

// An fp8 operand and the scale-inverse it was cast with.
struct Fp8Operand {
  Tensor data, scale_inv;
};

// "(M, K)": an operand's shape in the audit's names.
std::string shape_text(const Tensor& t) {
  std::string s = "(";
  for (size_t i = 0; i < t.sizes().size(); ++i) s += (i ? ", " : "") + std::to_string(t.sizes()[i]);
  return s + ")";
}

// The GEMM's output dtype: bf16 for bf16 activations, else f32 (scaled_matmul writes those two).
DType gemm_dtype(DType activation) { return activation == DType::bf16 ? DType::bf16 : DType::f32; }

void check_operands(const Tensor& x, const Tensor& w, const Tensor& b, const Fp8LinearState& state) {
  auto all = [&] {
    return "x is " + x.describe() + ", weight is " + w.describe() + (b.defined() ? ", bias is " + b.describe() : "");
  };
  PRECIS_CHECK(x.defined() && w.defined(), "fp8_linear: x and weight must be defined");
  PRECIS_CHECK_DTYPE(x.dtype() == DType::f32 || x.dtype() == DType::bf16 || x.dtype() == DType::f16,
                     "fp8_linear: x must be f32, bf16 or f16, ", all());
  PRECIS_CHECK_DTYPE(w.dtype() == DType::f32 || w.dtype() == DType::bf16,
                     "fp8_linear: the weight must be f32 or bf16, ", all());
  PRECIS_CHECK_SHAPE(w.dim() == 2 && x.dim() >= 1 && x.size(-1) == w.size(1),
                     "fp8_linear: expected x (..., K) and weight (N, K), ", all());
  PRECIS_CHECK_SHAPE(!b.defined() || (b.dim() == 1 && b.size(0) == w.size(0)),
                     "fp8_linear: the bias must be (N) = (", w.size(0), "), ", all());
  const Device d = state.input.scale().device();
  PRECIS_CHECK_DEVICE(x.device() == d && w.device() == d && (!b.defined() || b.device() == d),
                      "fp8_linear: operands and the fp8 state must share one device (the state is on ", d.str(),
                      "), ", all());
}

}  // namespace

namespace {
thread_local bool t_fp8_autocast = false;
}  // namespace

Fp8Autocast::Fp8Autocast(bool enabled) : previous_(t_fp8_autocast) { t_fp8_autocast = enabled; }
Fp8Autocast::~Fp8Autocast() { t_fp8_autocast = previous_; }
bool is_fp8_autocast_enabled() { return t_fp8_autocast; }

Fp8LinearState::Fp8LinearState(Device device, Fp8LinearOptions options)
    : input(options_for(Fp8Format::e4m3, options), device),
      weight(options_for(Fp8Format::e4m3, options), device),
      grad_output(options_for(Fp8Format::e5m2, options), device),
      weight_cache(std::make_shared<Fp8WeightCache>()) {}

Fp8LinearState::Fp8LinearState(DelayedScalingState input_state, DelayedScalingState weight_state,
                               DelayedScalingState grad_output_state, std::shared_ptr<Fp8WeightCache> cache)
    : input(std::move(input_state)),
      weight(std::move(weight_state)),
      grad_output(std::move(grad_output_state)),
      weight_cache(std::move(cache)) {}

void Fp8LinearState::update() {
  input.update();
  weight.update();
  grad_output.update();
  if (weight_cache) weight_cache->clear();
}

StateDict Fp8LinearState::state_dict() const {
  StateDict out;
  state_merge(out, input.state_dict(), "input.");
  state_merge(out, weight.state_dict(), "weight.");
  state_merge(out, grad_output.state_dict(), "grad_output.");
  return out;
}

void Fp8LinearState::load_state_dict(const StateDict& dict) {
  input.load_state_dict(state_subset(dict, "input."));
  weight.load_state_dict(state_subset(dict, "weight."));
  grad_output.load_state_dict(state_subset(dict, "grad_output."));
}

// Written out, not through the ops' front-end (ops/frontend.h): its precision is the fp8
// recipe's state, not the precision policy's, and its backward updates that state.
Tensor fp8_linear(const Tensor& x, const Tensor& weight, const Tensor& bias, Fp8LinearState& state) {
  check_operands(x, weight, bias, state);
  const int64_t k = weight.size(1), n = weight.size(0);
  Shape out_shape = x.sizes();
  out_shape.back() = n;
  const DType out_dtype = gemm_dtype(x.dtype());
  Fp8Operand xs, ws;  // the fp8 operands and the scale-inverses they were cast with (kept for backward)
  Tensor out;
  {
    NoGradGuard no_grad;
    const Tensor x2 = x.detach().reshape({-1, k});
    const Fp8Cast cx = fp8_scaled_cast(x2, state.input.scale(), Fp8Format::e4m3, "fp8_linear input " + shape_text(x2));
    state.input.record(cx.amax);
    // The scale-inverses as they are now: update() may run before this backward (a second step
    // through a retained graph), and the casts kept belong to these scales.
    xs = {cx.data, state.input.scale_inv().clone()};
    Fp8WeightCache* cache = state.weight_cache.get();
    if (cache != nullptr && cache->valid_for(weight)) {  // a later micro-batch of the step
      ws = {cache->data, cache->scale_inv};
    } else {
      const Fp8Cast cw = fp8_scaled_cast(weight.detach(), state.weight.scale(), Fp8Format::e4m3,
                                         "fp8_linear weight " + shape_text(weight));
      state.weight.record(cw.amax);
      ws = {cw.data, state.weight.scale_inv().clone()};
      if (cache != nullptr) *cache = {ws.data, ws.scale_inv, weight.impl(), weight.version()};
    }
    // (M, K) · (K, N): the weight's transpose is a view; scaled_matmul takes any strides.
    // The forward GEMM with cuBLASLt's fast fp8 accumulation, the gradients without, as
    // Transformer Engine runs them (the CPU accumulates exactly in fp32 either way).
    out = scaled_matmul(xs.data, ws.data.t(), xs.scale_inv, ws.scale_inv, {.out_dtype = out_dtype, .fast_accum = true})
              .out;
    if (bias.defined()) out = add(out, bias.detach().to(out_dtype));
    out = out.reshape(out_shape).to(x.dtype());
  }
  if (autograd::needs_grad({&x, &weight, &bias})) {
    autograd::record(
        OpId::linear, {x, weight, bias}, {out},
        [xs, ws, grad_state = state.grad_output, x_shape = x.sizes(), x_dtype = x.dtype(), w_dtype = weight.dtype(),
         b_dtype = bias.defined() ? bias.dtype() : DType::f32, has_bias = bias.defined(),
         n](const autograd::TensorList& g) -> autograd::TensorList {
          const Tensor g2 = g[0].reshape({-1, n});
          DelayedScalingState s = grad_state;  // shares the layer's tensors
          const Fp8Cast cg = fp8_scaled_cast(g2, s.scale(), Fp8Format::e5m2, "fp8_linear grad_output " + shape_text(g2));
          s.record(cg.amax);
          const Tensor g_inv = s.scale_inv();
          // dx = g · W: (M, N) E5M2 × (N, K) E4M3; dW = gᵀ · x: (N, M) E5M2 × (M, K) E4M3.
          const Tensor dx = scaled_matmul(cg.data, ws.data, g_inv, ws.scale_inv, {.out_dtype = DType::f32}).out;
          const Tensor dw = scaled_matmul(cg.data.t(), xs.data, g_inv, xs.scale_inv, {.out_dtype = DType::f32}).out;
          Tensor db;
          if (has_bias) db = sum(g2.to(DType::f32), {0}).to(b_dtype);
          return {dx.reshape(x_shape).to(x_dtype), dw.to(w_dtype), db};
        });
  }
  return out;
}

}  // namespace precis::amp
