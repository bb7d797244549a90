// pad (constant mode, as torch's F.pad): a filled tensor of the padded shape with the overlapping
// region of x copied in. Negative amounts crop. Backward is pad of the gradient with the amounts
// negated (crop what was added, zero-fill what was cropped), so it is differentiable too. Declared
// once for the op front-end (ops/frontend.h).
#include <algorithm>
#include <cstdint>

#include "core/checked_math.h"
#include "ops/frontend.h"
#include "ops/functional.h"
#include "ops/contracts/kernels.h"
#include "ops/op_table.h"
#include "ops/detail/scalar_check.h"
#include "tensor/factory.h"

namespace precis {

using autograd::TensorList;

using detail::Domain;
using detail::OpContext;

namespace {

// x is the operand; the amounts and the fill value are parameters.
struct Pad {
  static constexpr OpId id = OpId::pad;
  static constexpr Domain domain = Domain::any;
  struct Saved {
    std::vector<int64_t> back;  // the amounts negated
  };
  static Tensor forward(OpContext<Saved>& ctx, const std::array<Tensor, 1>& in, const std::vector<int64_t>& pads,
                        Scalar value) {
    const Tensor& x = in[0];
    const int64_t nd = x.dim();
    PRECIS_CHECK_SHAPE(pads.size() % 2 == 0 && static_cast<int64_t>(pads.size()) <= 2 * nd,
                       "pad: pads must hold an even number of amounts, at most 2 per dim (", 2 * nd, " for input ",
                       x.describe(), "), got ", pads.size());
    Shape out_shape = x.sizes();
    // Per dim: the region [src_begin, src_begin + len) of x lands at dst_begin of the output.
    Shape src_begin(nd, 0), dst_begin(nd, 0), len = x.sizes();
    for (size_t i = 0; i < pads.size() / 2; ++i) {
      const int64_t d = nd - 1 - static_cast<int64_t>(i);
      const int64_t left = pads[2 * i], right = pads[2 * i + 1];
      // The amounts are the caller's: the padded size must fit in int64, and each amount must have
      // a negation (the backward pads by -left, -right).
      const std::optional<int64_t> padded = checked_add(x.size(d), left);
      const std::optional<int64_t> sized = padded ? checked_add(*padded, right) : std::nullopt;
      PRECIS_CHECK_SHAPE(sized && left != INT64_MIN && right != INT64_MIN, "pad: padding (", left, ", ", right,
                         ") of dim ", d, " of input ", x.describe(), " overflows int64");
      const int64_t size = *sized;
      PRECIS_CHECK_SHAPE(size >= 0, "pad: padding (", left, ", ", right, ") of dim ", d, " of input ", x.describe(),
                         " gives a negative size ", size);
      out_shape[d] = size;
      src_begin[d] = std::max<int64_t>(0, -left);
      dst_begin[d] = std::max<int64_t>(0, left);
      len[d] = std::max<int64_t>(
          0, std::min(x.size(d) + std::min<int64_t>(left, 0) + std::min<int64_t>(right, 0), size));
    }
    check_scalar_fits("pad", "padding value", value, x.dtype(), "input " + x.describe());
    Tensor out = full(out_shape, value, {.dtype = x.dtype(), .device = x.device()});
    bool any = true;
    for (int64_t d = 0; d < nd; ++d) any = any && len[d] > 0;
    if (any) {
      Tensor dst = out, src = x.detach();
      for (int64_t d = 0; d < nd; ++d) {
        dst = dst.narrow(d, dst_begin[d], len[d]);
        src = src.narrow(d, src_begin[d], len[d]);
      }
      kernel<kernels::CopyKernel>(OpId::copy, x.device().type, x.dtype())(dst.detach(), src);
    }
    if (ctx.grad) {
      std::vector<int64_t> back(pads.size());
      std::transform(pads.begin(), pads.end(), back.begin(), [](int64_t v) { return -v; });
      ctx.saved = {std::move(back)};
    }
    return out;
  }
  static TensorList backward(const Saved& s, const TensorList& g) { return {pad(g[0], s.back, 0.0)}; }
};

}  // namespace

Tensor pad(const Tensor& x, const std::vector<int64_t>& pads, Scalar value) {
  return detail::call<Pad>({x}, pads, value);
}

}  // namespace precis
