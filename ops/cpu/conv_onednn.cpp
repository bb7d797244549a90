// Convolution through oneDNN's convolution primitives: forward (bias fused), backward data and
// backward weights (bias gradient fused), f32 and bf16 (fp32 accumulation).
//
// precis tensors are plain NCHW / OIHW. oneDNN's fastest kernels want blocked layouts
// (nChw16c activations, OIhw16i16o weights), so each primitive is created with layout `any`,
// and operands are reordered into the layout it chose and the result reordered back, per call.
// The reorders are memory-bound passes, cheap next to the convolution's flops at the shapes that
// matter (see docs/design/cpu-conv.md for the measurements behind this choice).
// Primitives and their reorders are cached per problem, dtype and thread count.
#ifdef PRECIS_HAS_ONEDNN

#include <array>
#include <memory>
#include <string_view>
#include <unordered_map>

#include "core/error.h"
#include "ops/cpu/conv_impl.h"
#include "ops/cpu/onednn_util.h"
#include "tensor/factory.h"

namespace precis::cpu {

namespace {

using dnnl::memory;
using tag = memory::format_tag;

enum class Pass : int64_t { forward, backward_input, backward_weight };

// pass, dtype, threads, bias?, n, c, h, w, o, kh, kw, ho, wo, strides, paddings, dilations, groups.
using Key = std::array<int64_t, 20>;

Key make_key(Pass pass, DType dtype, int threads, bool bias, const ConvShape& s) {
  return {static_cast<int64_t>(pass), static_cast<int64_t>(dtype), threads, bias, s.n, s.c, s.h, s.w, s.o, s.kh, s.kw,
          s.ho, s.wo, s.p.stride[0], s.p.stride[1], s.p.padding[0], s.p.padding[1],
          s.p.dilation[0], s.p.dilation[1], s.p.groups};
}

// One operand of a primitive: the plain layout precis holds it in, the layout the primitive
// chose, and the reorder between them (empty when they are the same).
struct Operand {
  int arg = 0;
  memory::desc plain, chosen;
  dnnl::reorder reorder;
  bool needs_reorder() const { return static_cast<bool>(reorder); }
};

// A ready primitive with its two inputs and one output (forward: src, weights → dst; backward
// input: diff_dst, weights → diff_src; backward weight: src, diff_dst → diff_weights) and the
// bias (an input of forward, an output of backward weight). An empty primitive records that
// oneDNN has no fast implementation for the key.
struct CachedConv {
  dnnl::primitive primitive;
  Operand in0, in1, out;
  int bias_arg = 0;
  memory::desc bias;
  bool supported() const { return static_cast<bool>(primitive); }
};

using ConvCache = PrimitiveCache<Key, CachedConv>;

ConvCache& conv_cache() {
  static auto* cache = new ConvCache();  // never destroyed: used until exit
  return *cache;
}

struct Descs {
  memory::dims src, weights, dst, strides, dilates, padding;
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
  d.strides = {s.p.stride[0], s.p.stride[1]};
  d.dilates = {s.p.dilation[0] - 1, s.p.dilation[1] - 1};  // oneDNN counts dilation from 0
  // Right padding as PyTorch passes it: equal to the left; oneDNN floors the window count.
  d.padding = {s.p.padding[0], s.p.padding[1]};
  return d;
}

Operand make_operand(int arg, const memory::desc& plain, const memory::desc& chosen, bool is_output) {
  Operand op;
  op.arg = arg;
  op.plain = plain;
  op.chosen = chosen;
  if (plain != chosen) {
    const dnnl::engine& e = cpu_engine();
    op.reorder = is_output ? dnnl::reorder(dnnl::reorder::primitive_desc(e, chosen, e, plain))
                           : dnnl::reorder(dnnl::reorder::primitive_desc(e, plain, e, chosen));
  }
  return op;
}

bool is_reference(const char* impl) {
  const std::string_view s(impl);
  return s.starts_with("ref");
}

dnnl::convolution_forward::primitive_desc forward_pd(const Descs& d, bool bias) {
  const memory::desc any_src(d.src, d.dt, tag::any), any_w(d.weights, d.dt, tag::any), any_dst(d.dst, d.dt, tag::any);
  const dnnl::engine& e = cpu_engine();
  if (bias) {
    const memory::desc b({d.dst[1]}, d.dt, tag::a);
    return {dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_direct,
                                            any_src, any_w, b, any_dst, d.strides, d.dilates, d.padding, d.padding),
            e};
  }
  return {dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_direct,
                                          any_src, any_w, any_dst, d.strides, d.dilates, d.padding, d.padding),
          e};
}

std::shared_ptr<const CachedConv> build(Pass pass, DType dtype, bool bias, const ConvShape& s) {
  const Descs d = descs_of(dtype, s);
  const memory::desc plain_src(d.src, d.dt, tag::nchw), plain_w(d.weights, d.dt, d.weights_tag),
      plain_dst(d.dst, d.dt, tag::nchw);
  const dnnl::engine& e = cpu_engine();
  auto c = std::make_shared<CachedConv>();
  try {
    if (pass == Pass::forward) {
      const auto pd = forward_pd(d, bias);
      if (is_reference(pd.impl_info_str())) return std::make_shared<CachedConv>();
      c->primitive = dnnl::convolution_forward(pd);
      c->in0 = make_operand(DNNL_ARG_SRC, plain_src, pd.src_desc(), false);
      c->in1 = make_operand(DNNL_ARG_WEIGHTS, plain_w, pd.weights_desc(), false);
      c->out = make_operand(DNNL_ARG_DST, plain_dst, pd.dst_desc(), true);
      if (bias) {
        c->bias_arg = DNNL_ARG_BIAS;
        c->bias = pd.bias_desc();
      }
    } else if (pass == Pass::backward_input) {
      const auto hint = forward_pd(d, false);
      const dnnl::convolution_backward_data::desc desc(
          dnnl::algorithm::convolution_direct, memory::desc(d.src, d.dt, tag::any),
          memory::desc(d.weights, d.dt, tag::any), memory::desc(d.dst, d.dt, tag::any), d.strides, d.dilates,
          d.padding, d.padding);
      const dnnl::convolution_backward_data::primitive_desc pd(desc, e, hint);
      if (is_reference(pd.impl_info_str())) return std::make_shared<CachedConv>();
      c->primitive = dnnl::convolution_backward_data(pd);
      c->in0 = make_operand(DNNL_ARG_DIFF_DST, plain_dst, pd.diff_dst_desc(), false);
      c->in1 = make_operand(DNNL_ARG_WEIGHTS, plain_w, pd.weights_desc(), false);
      c->out = make_operand(DNNL_ARG_DIFF_SRC, plain_src, pd.diff_src_desc(), true);
    } else {
      const auto hint = forward_pd(d, bias);
      const memory::desc any_src(d.src, d.dt, tag::any), any_w(d.weights, d.dt, tag::any),
          any_dst(d.dst, d.dt, tag::any);
      const auto desc = bias ? dnnl::convolution_backward_weights::desc(
                                   dnnl::algorithm::convolution_direct, any_src, any_w,
                                   memory::desc({s.o}, d.dt, tag::a), any_dst, d.strides, d.dilates, d.padding,
                                   d.padding)
                             : dnnl::convolution_backward_weights::desc(dnnl::algorithm::convolution_direct, any_src,
                                                                        any_w, any_dst, d.strides, d.dilates,
                                                                        d.padding, d.padding);
      const dnnl::convolution_backward_weights::primitive_desc pd(desc, e, hint);
      if (is_reference(pd.impl_info_str())) return std::make_shared<CachedConv>();
      c->primitive = dnnl::convolution_backward_weights(pd);
      c->in0 = make_operand(DNNL_ARG_SRC, plain_src, pd.src_desc(), false);
      c->in1 = make_operand(DNNL_ARG_DIFF_DST, plain_dst, pd.diff_dst_desc(), false);
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

bool run(Pass pass, DType dtype, const ConvShape& s, const void* in0, const void* in1, void* out, void* bias) {
  if (dtype != DType::f32 && dtype != DType::bf16) return false;
  const int threads = sync_thread_count();
  const Key key = make_key(pass, dtype, threads, bias != nullptr, s);
  ConvCache& cache = conv_cache();
  std::shared_ptr<const CachedConv> c = cache.find(key);
  if (c == nullptr) c = cache.insert(key, build(pass, dtype, bias != nullptr, s));
  if (!c->supported()) return false;

  const dnnl::engine& e = cpu_engine();
  dnnl::stream& stream = thread_stream();
  Tensor holders[3];
  try {
    std::unordered_map<int, memory> args;
    const Operand* inputs[2] = {&c->in0, &c->in1};
    const void* in_data[2] = {in0, in1};
    for (int i = 0; i < 2; ++i) {
      const Operand& op = *inputs[i];
      memory user(op.plain, e, const_cast<void*>(in_data[i]));
      if (op.needs_reorder()) {
        memory m = scratch(op.chosen, holders[i]);
        op.reorder.execute(stream, user, m);
        args.emplace(op.arg, m);
      } else {
        args.emplace(op.arg, user);
      }
    }
    memory user_out(c->out.plain, e, out);
    memory prim_out = c->out.needs_reorder() ? scratch(c->out.chosen, holders[2]) : user_out;
    args.emplace(c->out.arg, prim_out);
    if (bias != nullptr) args.emplace(c->bias_arg, memory(c->bias, e, bias));
    c->primitive.execute(stream, args);
    if (c->out.needs_reorder()) c->out.reorder.execute(stream, prim_out, user_out);
    stream.wait();
  } catch (const dnnl::error& err) {
    PRECIS_INTERNAL_ASSERT(false, "oneDNN convolution failed: ", err.what());
  }
  return true;
}

}  // namespace

bool onednn_conv_forward(DType dtype, const ConvShape& s, const void* x, const void* w, const void* bias, void* out) {
  return run(Pass::forward, dtype, s, x, w, out, const_cast<void*>(bias));
}

bool onednn_conv_backward_input(DType dtype, const ConvShape& s, const void* grad_out, const void* w, void* grad_x) {
  return run(Pass::backward_input, dtype, s, grad_out, w, grad_x, nullptr);
}

bool onednn_conv_backward_weight(DType dtype, const ConvShape& s, const void* grad_out, const void* x, void* grad_w,
                                 void* grad_bias) {
  return run(Pass::backward_weight, dtype, s, x, grad_out, grad_w, grad_bias);
}

}  // namespace precis::cpu

#endif  // PRECIS_HAS_ONEDNN
