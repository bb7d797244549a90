// attention_softmax (ops/detail/attention_softmax.h): checks, the Philox reservation, the fused kernel
// (ops/cpu/attention_softmax.cpp), and a backward that runs the fused backward kernel on the saved
// fp32 softmax output. Saving y rather than recomputing it keeps backward bit for bit the composed
// path's (softmax saves the same tensor). The dropout mask is packed by the forward, one bit per
// score (1/32 of y's bytes), and read by the backward: drawing it again (one Philox block per four
// scores) was 40 % of the backward's time (BERT-mini's 4×512 bf16 scores, AMD Zen 4).
#include "ops/detail/attention_softmax.h"

#include <atomic>

#include "ops/frontend.h"
#include "ops/contracts/kernels_attention.h"
#include "ops/op_table.h"
#include "ops/recompute.h"
#include "ops/detail/random_draw.h"
#include "tensor/factory.h"

namespace precis {

using autograd::SavedTensor;
using autograd::TensorList;
using detail::Domain;
using detail::OpContext;

namespace {

Tensor attention_softmax_backward(const Tensor& grad, const Tensor& y, const Tensor& keep, const Tensor& mask,
                                  DType dtype, const kernels::AttentionSoftmaxArgs& args) {
  PRECIS_CHECK_DTYPE(is_floating(grad.dtype()), "attention_softmax_backward: the gradient must be floating, got ",
                     grad.describe(), " for weights of dtype ", dtype_name(dtype));
  const Tensor g = (grad.dtype() == dtype ? grad : grad.to(dtype)).contiguous();
  Tensor ds = empty(y.sizes(), {.dtype = dtype, .device = y.device()});
  kernel<kernels::AttentionSoftmaxBackwardKernel>(OpId::attention_softmax_backward, y.device().type, dtype)(
      ds, g, y, keep, mask, args);
  return ds;
}

struct AttentionSoftmax {
  static constexpr OpId id = OpId::attention_softmax;
  static constexpr Domain domain = Domain::floating;
  static constexpr const char* names[] = {"scores"};
  struct Saved {
    SavedTensor y;
    Tensor keep;  // the packed dropout mask (dropout_p > 0)
    Tensor mask;
    DType dtype = DType::f32;
    kernels::AttentionSoftmaxArgs args;
  };
  static Tensor forward(OpContext<Saved>& ctx, const std::array<Tensor, 1>& in, const Tensor& attn_mask,
                        bool is_causal, double scale, double dropout_p, Generator* generator) {
    const Tensor& scores = in[0];
    const char* op = "attention_softmax";
    auto operands = [&] {
      std::string s = "scores " + scores.describe();
      if (attn_mask.defined()) s += ", attn_mask " + attn_mask.describe();
      return s;
    };
    PRECIS_CHECK_SHAPE(scores.dim() >= 2, op, ": scores must be (..., L, S), got ", operands());
    PRECIS_CHECK(!(is_causal && attn_mask.defined()), op, ": pass either attn_mask or is_causal, not both");
    PRECIS_CHECK(dropout_p >= 0.0 && dropout_p < 1.0, op, ": dropout_p must be in [0, 1), got ", dropout_p);
    PRECIS_CHECK(scale > 0.0, op, ": scale must be positive, got ", scale);
    if (attn_mask.defined()) {
      PRECIS_CHECK_DTYPE(attn_mask.dtype() == DType::boolean || attn_mask.is_floating_point(), op,
                         ": attn_mask must be bool (true = attend) or floating (added to the scores), got ", operands());
      PRECIS_CHECK_DEVICE(attn_mask.device() == scores.device(), op, ": attn_mask must be on the scores' device, got ",
                          operands());
      bool fits = attn_mask.dim() <= scores.dim();
      for (int64_t d = 1; fits && d <= attn_mask.dim(); ++d)
        fits = attn_mask.size(-d) == 1 || attn_mask.size(-d) == scores.size(-d);
      PRECIS_CHECK_SHAPE(fits, op, ": attn_mask must broadcast to the scores' shape without growing it, got ",
                         operands());
    }
    const DType dtype = scores.dtype();
    const DType acc = dtype == DType::f64 ? DType::f64 : DType::f32;
    kernels::AttentionSoftmaxArgs args{.scale = scale, .dropout_p = dropout_p, .rng = {}};
    Tensor mask;
    if (is_causal) {
      args.mask = kernels::AttentionMask::causal;
    } else if (attn_mask.defined()) {
      const bool keep = attn_mask.dtype() == DType::boolean;
      args.mask = keep ? kernels::AttentionMask::keep : kernels::AttentionMask::additive;
      mask = (keep ? attn_mask : attn_mask.to(acc)).detach().expand(scores.sizes());
    }
    if (dropout_p > 0.0) {
      Generator& gen = generator != nullptr ? *generator : default_generator();
      args.rng = detail::draw_for(gen, (static_cast<uint64_t>(scores.numel()) + 3) / 4, scores.device(),
                                  "attention_softmax");
    }
    const Tensor sc = scores.detach().contiguous();
    Tensor p = empty(sc.sizes(), {.dtype = dtype, .device = sc.device()});
    // y is the weights themselves when nothing separates them (f32 or f64 scores, no dropout), and
    // not written at all without a backward to read it (a no-grad forward: evaluation, or a
    // checkpointed region's first pass), sparing a pass of acc-dtype writes over the scores.
    const Tensor y = dtype == acc && dropout_p == 0.0 ? p
                     : ctx.grad                       ? empty(sc.sizes(), {.dtype = acc, .device = sc.device()})
                                                      : Tensor();
    const auto run = [&](kernels::DropoutKeep how, const Tensor& keep) {
      kernels::AttentionSoftmaxArgs a = args;
      a.keep = how;
      kernel<kernels::AttentionSoftmaxKernel>(OpId::attention_softmax, sc.device().type, dtype)(p, y, keep, sc, mask,
                                                                                               a);
    };
    const Tensor keep = dropout_p > 0.0 ? dropout_mask(ctx.grad, sc, run) : Tensor();
    if (dropout_p == 0.0) run(kernels::DropoutKeep::draw, keep);
    if (ctx.grad) ctx.saved = {SavedTensor(y), keep, mask, dtype, args};
    return p;
  }
  static TensorList backward(const Saved& s, const TensorList& g) {
    return {attention_softmax_backward(g[0], s.y.unpack("attention_softmax"), s.keep, s.mask, s.dtype, s.args)};
  }

 private:
  // Runs the forward kernel (run(how, keep)) with dropout, and returns the packed mask the
  // backward reads (undefined when nothing needs it). In a selective checkpoint the mask is this
  // op's kept output (ops/recompute.h): the region's forward packs it, and its recomputation
  // applies it again instead of drawing the Philox blocks.
  template <typename Run>
  static Tensor dropout_mask(bool grad, const Tensor& sc, const Run& run) {
    const int64_t S = sc.size(-1), rows = S == 0 ? 0 : sc.numel() / S;
    const auto packed = [&] {
      const auto shape = kernels::dropout_keep_shape(rows, S);
      return empty({shape[0], shape[1]}, {.dtype = DType::i32, .device = sc.device()});
    };
    bool drawn = false;
    const auto draw = [&] {
      drawn = true;
      const Tensor keep = grad || keeps_for_recompute(OpId::attention_softmax) ? packed() : Tensor();
      run(keep.defined() ? kernels::DropoutKeep::draw_store : kernels::DropoutKeep::draw, keep);
      return keep;
    };
    if (!kept_outputs_active()) return draw();
    const Tensor keep = kept_or_computed(OpId::attention_softmax, draw);
    if (!drawn) run(kernels::DropoutKeep::replay, keep);
    return keep;
  }
};

}  // namespace

Tensor attention_softmax(const Tensor& scores, const Tensor& attn_mask, bool is_causal, double scale,
                         double dropout_p, Generator* generator) {
  return detail::call<AttentionSoftmax>({scores}, attn_mask, is_causal, scale, dropout_p, generator);
}

}  // namespace precis
