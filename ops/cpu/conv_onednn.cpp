// Convolution through oneDNN's convolution primitives: forward (bias fused), backward data and
// backward weights (bias gradient fused), f32 and bf16 (fp32 accumulation).
//
// Activations come NCHW or channels-last (NHWC); weights OIHW. For NCHW activations oneDNN's
// fastest kernels want blocked layouts (nChw16c activations, OIhw16i16o weights), so each
// primitive is created with layout `any`, and operands are reordered into the layout it chose and
// the result reordered back, per call (grad_out once for both backward passes of a layer).
// Channels-last activations are given to the primitive as they are (its nhwc kernels; no
// activation reorder; docs/design/cpu-conv.md has the measurements); where oneDNN has only a
// reference kernel for nhwc, the primitive is created with `any` and reorders as for NCHW.
// The reorders are memory-bound passes, cheap next to the convolution's flops at the shapes that
// matter (see docs/design/cpu-conv.md for the measurements behind this choice).
// f32 3x3 stride-1 convolutions run oneDNN's Winograd F(4x4, 3x3) kernels where the CPU's conv
// precision setting is tf32 (ops/float32_precision.h; ieee by default, as PyTorch's oneDNN
// convolutions): 2.2x faster than its direct kernels at ResNet's shapes, ~5x their error (below).
// Primitives and their reorders are cached per problem, dtype and thread count, and shared by all
// threads: every execution brings its own scratchpad (ops/cpu/onednn_util.h).
#ifdef PRECIS_HAS_ONEDNN

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <string_view>
#include <unordered_map>

#include "core/error.h"
#include "core/thread_pool.h"
#include "ops/cpu/conv_impl.h"
#include "ops/float32_precision.h"
#include "ops/cpu/onednn_compat.h"
#include "ops/cpu/onednn_util.h"
#include "tensor/factory.h"

namespace precis::cpu {

namespace {

using dnnl::memory;
using tag = memory::format_tag;

enum class Pass : int64_t { forward, backward_input, backward_weight };

// pass, dtype, threads, bias?, nhwc?, Winograd allowed?, n, c, h, w, o, kh, kw, ho, wo, strides,
// paddings, dilations, groups.
using Key = std::array<int64_t, 22>;

Key make_key(Pass pass, DType dtype, int threads, bool bias, bool winograd, const ConvShape& s) {
  return {static_cast<int64_t>(pass), static_cast<int64_t>(dtype), threads, bias, s.nhwc, winograd, s.n, s.c, s.h,
          s.w, s.o, s.kh, s.kw, s.ho, s.wo, s.p.stride[0], s.p.stride[1], s.p.padding[0], s.p.padding[1],
          s.p.dilation[0], s.p.dilation[1], s.p.groups};
}

// One operand of a primitive: the plain layout precis holds it in, the layout the primitive
// chose, and the reorder between them (empty when they are the same).
struct Operand {
  int arg = 0;
  memory::desc plain, chosen;
  dnnl::reorder reorder;
  memory::desc reorder_scratchpad;
  bool needs_reorder() const { return static_cast<bool>(reorder); }
};

// A ready primitive with its two inputs and one output (forward: src, weights → dst; backward
// input: diff_dst, weights → diff_src; backward weight: diff_dst, src → diff_weights: both
// backward passes take diff_dst first, so a reorder of it can be shared) and the bias (an input of
// forward, an output of backward weight). An empty primitive records that oneDNN has no fast
// implementation for the key.
struct CachedConv {
  dnnl::primitive primitive;
  memory::desc scratchpad;
  Operand in0, in1, out;
  int bias_arg = 0;
  memory::desc bias;
  // Input gradient run as a forward convolution: in1 must be the flipped, transposed weights.
  bool flipped_weights = false;
  bool winograd = false;  // oneDNN's Winograd kernels, not its direct ones
  bool supported() const { return static_cast<bool>(primitive); }
};

using ConvCache = PrimitiveCache<Key, CachedConv>;

ConvCache& conv_cache() {
  static auto* cache = new ConvCache();  // never destroyed: used until exit
  return *cache;
}

struct Descs {
  memory::dims src, weights, dst;
  onednn::ConvWindow window;
  memory::data_type dt;
  tag weights_tag;
};

Descs descs_of(DType dtype, const ConvShape& s) {
  Descs d;
  d.dt = dtype == DType::bf16 ? memory::data_type::bf16 : memory::data_type::f32;
  d.src = {s.n, s.c, s.h, s.w};
  d.dst = {s.n, s.o, s.ho, s.wo};
  if (s.p.groups > 1) {
    d.weights = {s.p.groups, s.o / s.p.groups, s.c / s.p.groups, s.kh, s.kw};
    d.weights_tag = tag::goihw;
  } else {
    d.weights = {s.o, s.c, s.kh, s.kw};
    d.weights_tag = tag::oihw;
  }
  d.window.strides = {s.p.stride[0], s.p.stride[1]};
  d.window.dilates = {s.p.dilation[0] - 1, s.p.dilation[1] - 1};  // oneDNN counts dilation from 0
  // Right padding as PyTorch passes it: equal to the left; oneDNN floors the window count.
  d.window.padding_l = {s.p.padding[0], s.p.padding[1]};
  d.window.padding_r = d.window.padding_l;
  return d;
}

Operand make_operand(int arg, const memory::desc& plain, const memory::desc& chosen, bool is_output) {
  Operand op;
  op.arg = arg;
  op.plain = plain;
  op.chosen = chosen;
  if (plain != chosen) {
    const dnnl::engine& e = cpu_engine();
    const auto pd = is_output ? dnnl::reorder::primitive_desc(e, chosen, e, plain, scratchpad_attr())
                              : dnnl::reorder::primitive_desc(e, plain, e, chosen, scratchpad_attr());
    op.reorder = dnnl::reorder(pd);
    op.reorder_scratchpad = pd.scratchpad_desc();
  }
  return op;
}

bool is_reference(const char* impl) {
  const std::string_view s(impl);
  return s.starts_with("ref");
}

// ---- the input gradient as a forward convolution ---------------------------------------------
// oneDNN 2.6 has no brgemm kernel for the input gradient: its jit one runs at 0.65-0.85x the
// forward brgemm kernel's speed on the same shape (2-vCPU AMX machine, 2 threads; ResNet-18 CIFAR
// b64 per step, f32: 64 channels on 32x32 67 ms against 57 ms for the forward, 128 on 16x16 45
// against 41, 256 on 8x8 49 against 40; bf16: 1.9/2.0/2.4 against 1.75/1.4/1.7 ms a call). With
// stride 1 the input gradient *is* a forward convolution: of grad_out, by the weights with input
// and output channels swapped and the window flipped, padded by k - 1 - p. oneDNN 3.x does this
// itself (its "brg_fwd" input-gradient kernel), so it is done here for 2.x only. Not on 4x4 maps,
// where 2.6's input-gradient kernel beats its forward one (f32 41 against 60 ms per step), nor
// on channel counts that are not whole 16-channel blocks. Measured (benchmarks/results/
// onednn-2026-12-05-amx.md) on AMX machines only, so the rule is on there only, as the GEMM
// route's (gemm_conv_rule_active): f32 channels-last conv forward + backward 0.94x (64 channels,
// 32x32), 0.97x (128, 16x16); the f32 ResNet-18 step 0.97x; bf16 unchanged.

std::atomic<int64_t> input_gradients_as_forward{0};

// out (C, O, kh, kw) = w (O, C, kh, kw) with the channels swapped and the window flipped, element
// by element (Bits: an unsigned integer of the element's width; bit patterns are moved, not converted).
template <typename Bits>
void flip_transpose(const ConvShape& s, const Bits* w, Bits* out) {
  const int64_t taps = s.kh * s.kw;
  parallel_for(0, s.c, 1, [&](int64_t begin, int64_t end) {
    for (int64_t c = begin; c < end; ++c)
      for (int64_t o = 0; o < s.o; ++o) {
        const Bits* from = w + (o * s.c + c) * taps;
        Bits* to = out + (c * s.o + o) * taps;
        for (int64_t t = 0; t < taps; ++t) to[t] = from[taps - 1 - t];
      }
  });
}

// The weights as the input gradient's forward convolution wants them, in `holder`.
const void* flipped_weights(DType dtype, const ConvShape& s, const void* w, Tensor& holder) {
  ++input_gradients_as_forward;
  holder = empty({s.c, s.o, s.kh, s.kw}, {.dtype = dtype});
  if (dtype == DType::f32)
    flip_transpose(s, static_cast<const uint32_t*>(w), static_cast<uint32_t*>(holder.data_ptr()));
  else
    flip_transpose(s, static_cast<const uint16_t*>(w), static_cast<uint16_t*>(holder.data_ptr()));
  return holder.data_ptr();
}

// act: the activations' layout the primitive is created with (`any`, or nhwc to work on
// channels-last tensors in place).
dnnl::convolution_forward::primitive_desc forward_pd(const Descs& d, bool bias, tag act, dnnl::algorithm alg) {
  const memory::desc any_src(d.src, d.dt, act), any_w(d.weights, d.dt, tag::any), any_dst(d.dst, d.dt, act);
  const memory::desc b({d.dst[1]}, d.dt, tag::a);
  return onednn::conv_forward_pd(cpu_engine(), dnnl::prop_kind::forward_training, any_src, any_w,
                                 bias ? &b : nullptr, any_dst, d.window, scratchpad_attr(), alg);
}

// The primitive of a pass by `alg` with activations created in layout `act`; empty when oneDNN has
// only a reference implementation (or none) for it.
std::shared_ptr<const CachedConv> build(Pass pass, DType dtype, bool bias, const ConvShape& s, tag act,
                                        dnnl::algorithm alg = dnnl::algorithm::convolution_direct) {
  const bool winograd = alg == dnnl::algorithm::convolution_winograd;
  const Descs d = descs_of(dtype, s);
  const tag user_act = s.nhwc ? tag::nhwc : tag::nchw;
  const memory::desc plain_src(d.src, d.dt, user_act), plain_w(d.weights, d.dt, d.weights_tag),
      plain_dst(d.dst, d.dt, user_act);
  const dnnl::engine& e = cpu_engine();
  auto c = std::make_shared<CachedConv>();
  c->winograd = winograd;
  try {
    if (pass == Pass::forward) {
      const auto pd = forward_pd(d, bias, act, alg);
      if (is_reference(pd.impl_info_str())) return std::make_shared<CachedConv>();
      c->primitive = dnnl::convolution_forward(pd);
      c->scratchpad = pd.scratchpad_desc();
      c->in0 = make_operand(DNNL_ARG_SRC, plain_src, pd.src_desc(), false);
      c->in1 = make_operand(DNNL_ARG_WEIGHTS, plain_w, pd.weights_desc(), false);
      c->out = make_operand(DNNL_ARG_DST, plain_dst, pd.dst_desc(), true);
      if (bias) {
        c->bias_arg = DNNL_ARG_BIAS;
        c->bias = pd.bias_desc();
      }
    } else if (pass == Pass::backward_input && !winograd && onednn_input_gradient_as_forward(s)) {
      Descs f = d;  // grad_out → grad_x by the flipped weights, padded by k - 1 - p
      f.src = d.dst;
      f.dst = d.src;
      f.weights = {s.c, s.o, s.kh, s.kw};
      f.window.padding_l = {s.kh - 1 - s.p.padding[0], s.kw - 1 - s.p.padding[1]};
      f.window.padding_r = f.window.padding_l;
      const auto pd = forward_pd(f, false, act, alg);
      if (is_reference(pd.impl_info_str())) return std::make_shared<CachedConv>();
      c->primitive = dnnl::convolution_forward(pd);
      c->scratchpad = pd.scratchpad_desc();
      c->flipped_weights = true;
      c->in0 = make_operand(DNNL_ARG_SRC, plain_dst, pd.src_desc(), false);
      c->in1 = make_operand(DNNL_ARG_WEIGHTS, memory::desc(f.weights, d.dt, tag::oihw), pd.weights_desc(), false);
      c->out = make_operand(DNNL_ARG_DST, plain_src, pd.dst_desc(), true);
    } else if (pass == Pass::backward_input) {
      const auto hint = forward_pd(d, false, act, alg);
      const auto pd = onednn::conv_backward_data_pd(e, memory::desc(d.src, d.dt, act),
                                                    memory::desc(d.weights, d.dt, tag::any),
                                                    memory::desc(d.dst, d.dt, act), d.window, hint, scratchpad_attr(),
                                                    alg);
      if (is_reference(pd.impl_info_str())) return std::make_shared<CachedConv>();
      c->primitive = dnnl::convolution_backward_data(pd);
      c->scratchpad = pd.scratchpad_desc();
      c->in0 = make_operand(DNNL_ARG_DIFF_DST, plain_dst, pd.diff_dst_desc(), false);
      c->in1 = make_operand(DNNL_ARG_WEIGHTS, plain_w, pd.weights_desc(), false);
      c->out = make_operand(DNNL_ARG_DIFF_SRC, plain_src, pd.diff_src_desc(), true);
    } else {
      const auto hint = forward_pd(d, bias, act, alg);
      const memory::desc any_src(d.src, d.dt, act), any_w(d.weights, d.dt, tag::any), any_dst(d.dst, d.dt, act);
      const memory::desc b({s.o}, d.dt, tag::a);
      const auto pd = onednn::conv_backward_weights_pd(e, any_src, any_w, bias ? &b : nullptr, any_dst, d.window,
                                                       hint, scratchpad_attr(), alg);
      if (is_reference(pd.impl_info_str())) return std::make_shared<CachedConv>();
      c->primitive = dnnl::convolution_backward_weights(pd);
      c->scratchpad = pd.scratchpad_desc();
      c->in0 = make_operand(DNNL_ARG_DIFF_DST, plain_dst, pd.diff_dst_desc(), false);
      c->in1 = make_operand(DNNL_ARG_SRC, plain_src, pd.src_desc(), false);
      c->out = make_operand(DNNL_ARG_DIFF_WEIGHTS, plain_w, pd.diff_weights_desc(), true);
      if (bias) {
        c->bias_arg = DNNL_ARG_DIFF_BIAS;
        c->bias = pd.diff_bias_desc();
      }
    }
  } catch (const dnnl::error&) {
    return std::make_shared<CachedConv>();  // unimplemented here (e.g. bf16 without AVX-512)
  }
  return c;
}

// Scratch memory for an operand in the primitive's layout, from precis's caching allocator.
memory scratch(const memory::desc& desc, Tensor& holder) {
  holder = empty({static_cast<int64_t>((desc.get_size() + 3) / 4)}, {.dtype = DType::f32});
  return memory(desc, cpu_engine(), holder.data_ptr());
}

// ---- Winograd ------------------------------------------------------------------------------------
// oneDNN 2.6's jit_wino_4x3 kernels (AVX-512) compute an f32 3x3 stride-1 convolution as
// F(4x4, 3x3) Winograd: 4x fewer multiplies (36 per 4x4 output tile, not 144), and transforms
// whose roundings add error. At ResNet-18 CIFAR's shapes (b64, 2 threads, AMD Zen 4;
// benchmarks/tools/conv_winograd_probe.cpp, benchmarks/results/conv-winograd-2026-12-06-zen4.md)
// forward, input and weight gradient take 353 ms a step against 776 direct (activations in the
// primitive's blocked layout) and 403 against 801 from channels-last (Winograd has no nhwc
// kernel: reorders in and out per call); the largest error against an f64 reference is 2e-6 to
// 1.1e-5 of the outputs' rms, against 5e-7 to 3e-6 direct: ~100x inside TF32's 2^-11. So it runs
// where the CPU's conv setting allows TF32-sized error (tf32); the default, ieee, keeps the direct
// kernels and PyTorch's numerics. Where oneDNN has no Winograd kernel for a problem (no AVX-512,
// other channel counts) the direct one runs.

std::atomic<int64_t> winograd_passes{0};

bool winograd_allowed(DType dtype, const ConvShape& s) {
  const auto& p = s.p;
  return dtype == DType::f32 &&
         float32_precision(Float32OpFamily::conv, DeviceType::cpu) == Float32Precision::tf32 && s.kh == 3 &&
         s.kw == 3 && p.groups == 1 && p.stride[0] == 1 && p.stride[1] == 1 && p.dilation[0] == 1 &&
         p.dilation[1] == 1;
}

// The cached primitive for a problem (built on first use); null when oneDNN has no fast
// implementation for it.
std::shared_ptr<const CachedConv> primitive_for(Pass pass, DType dtype, int threads, bool bias, const ConvShape& s) {
  const bool winograd = winograd_allowed(dtype, s);
  const Key key = make_key(pass, dtype, threads, bias, winograd, s);
  ConvCache& cache = conv_cache();
  std::shared_ptr<const CachedConv> c = cache.find(key);
  if (c == nullptr) {
    // Winograd where allowed (its kernels take blocked activations only); else channels-last: nhwc
    // kernels first (no activation reorders); where oneDNN has none but the reference, its blocked
    // kernels with reorders from and to nhwc.
    std::shared_ptr<const CachedConv> built;
    if (winograd) built = build(pass, dtype, bias, s, tag::any, dnnl::algorithm::convolution_winograd);
    if (built == nullptr || !built->supported()) built = build(pass, dtype, bias, s, s.nhwc ? tag::nhwc : tag::any);
    if (s.nhwc && !built->supported()) built = build(pass, dtype, bias, s, tag::any);
    c = cache.insert(key, built);
  }
  return c->supported() ? c : nullptr;
}

// An input operand in the layout its primitive chose: the user's memory itself, or a reordered
// copy in scratch memory held by `holder`.
memory prepare_input(const Operand& op, const void* data, Tensor& holder) {
  memory user(op.plain, cpu_engine(), const_cast<void*>(data));
  if (!op.needs_reorder()) return user;
  memory m = scratch(op.chosen, holder);
  execute_primitive(op.reorder, op.reorder_scratchpad, {{DNNL_ARG_FROM, user}, {DNNL_ARG_TO, m}});
  return m;
}

// Runs one cached primitive on user (plain-layout) buffers. `ready0`, when given, is in0 already
// in the chosen layout (shared between the two backward passes).
void execute(const CachedConv& c, const void* in0, const void* in1, void* out, void* bias,
             const memory* ready0 = nullptr) {
  Tensor holders[3];
  try {
    std::unordered_map<int, memory> args;
    args.emplace(c.in0.arg, ready0 != nullptr ? *ready0 : prepare_input(c.in0, in0, holders[0]));
    args.emplace(c.in1.arg, prepare_input(c.in1, in1, holders[1]));
    memory user_out(c.out.plain, cpu_engine(), out);
    memory prim_out = c.out.needs_reorder() ? scratch(c.out.chosen, holders[2]) : user_out;
    args.emplace(c.out.arg, prim_out);
    if (bias != nullptr) args.emplace(c.bias_arg, memory(c.bias, cpu_engine(), bias));
    execute_primitive(c.primitive, c.scratchpad, std::move(args));
    if (c.winograd) ++winograd_passes;
    if (c.out.needs_reorder())
      execute_primitive(c.out.reorder, c.out.reorder_scratchpad, {{DNNL_ARG_FROM, prim_out}, {DNNL_ARG_TO, user_out}});
  } catch (const dnnl::error& err) {
    PRECIS_INTERNAL_ASSERT(false, "oneDNN convolution failed: ", err.what());
  }
}

// f32 and bf16 problems with at least one input channel: with none, oneDNN's backward-weights
// pass leaves the bias gradient zero instead of summing grad_out, so the fallback runs them.
bool supported(DType dtype, const ConvShape& s) {
  return (dtype == DType::f32 || dtype == DType::bf16) && s.c > 0;
}

}  // namespace

// The rule of the section "the input gradient as a forward convolution" above.
bool onednn_input_gradient_as_forward(const ConvShape& s) {
  if (onednn_major_version() >= 3 || !gemm_conv_rule_active()) return false;
  const auto& p = s.p;
  return p.groups == 1 && p.stride[0] == 1 && p.stride[1] == 1 && p.dilation[0] == 1 && p.dilation[1] == 1 &&
         p.padding[0] <= s.kh - 1 && p.padding[1] <= s.kw - 1 && s.ho * s.wo >= 64 && s.c % 16 == 0 &&
         s.o % 16 == 0;
}

int64_t onednn_input_gradients_as_forward_run() { return input_gradients_as_forward.load(); }

int64_t onednn_winograd_passes_run() { return winograd_passes.load(); }

int onednn_major_version() { return DNNL_VERSION_MAJOR; }

bool onednn_conv_forward(DType dtype, const ConvShape& s, const void* x, const void* w, const void* bias, void* out) {
  if (!supported(dtype, s)) return false;
  const auto c = primitive_for(Pass::forward, dtype, sync_thread_count(), bias != nullptr, s);
  if (c == nullptr) return false;
  execute(*c, x, w, out, const_cast<void*>(bias));
  return true;
}

bool onednn_conv_backward(DType dtype, const ConvShape& s, const void* grad_out, const void* x, const void* w,
                          void* grad_x, void* grad_w, void* grad_bias) {
  if (!supported(dtype, s)) return false;
  const int threads = sync_thread_count();
  std::shared_ptr<const CachedConv> data, weights;
  if (grad_x != nullptr && (data = primitive_for(Pass::backward_input, dtype, threads, false, s)) == nullptr)
    return false;
  if (grad_w != nullptr &&
      (weights = primitive_for(Pass::backward_weight, dtype, threads, grad_bias != nullptr, s)) == nullptr)
    return false;
  // grad_out is in0 of both passes. When both want it in the same blocked layout (the usual case),
  // it is reordered once: one activation-sized pass per layer saved.
  Tensor shared_holder;
  memory shared;
  const bool share = data != nullptr && weights != nullptr && data->in0.needs_reorder() &&
                     data->in0.chosen == weights->in0.chosen;
  if (share) {
    try {
      shared = prepare_input(data->in0, grad_out, shared_holder);
    } catch (const dnnl::error& err) {
      PRECIS_INTERNAL_ASSERT(false, "oneDNN reorder failed: ", err.what());
    }
  }
  Tensor flipped;
  if (data != nullptr)
    execute(*data, grad_out, data->flipped_weights ? flipped_weights(dtype, s, w, flipped) : w, grad_x, nullptr,
            share ? &shared : nullptr);
  if (weights != nullptr) execute(*weights, grad_out, x, grad_w, grad_bias, share ? &shared : nullptr);
  return true;
}

}  // namespace precis::cpu

#endif  // PRECIS_HAS_ONEDNN
