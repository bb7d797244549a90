// interpolate (torch.nn.functional.interpolate) in its nearest and linear modes, as a composite:
// per spatial dim, from the last to the first (the order of PyTorch's kernels), the output picks
// its source (nearest: index_select of the source index) or blends two neighbours (linear:
// index_select of both, weighted by λ0 and λ1). The source indices and weights come from PyTorch's
// arithmetic in PyTorch's precision (float for f32, f16 and bf16; double for f64), so nearest is
// exact and linear within rounding of PyTorch's values. Every device has it, and its gradient is
// index_select's (index_add). f16/bf16 are blended in f32 and rounded once, as PyTorch's kernels
// accumulate in float.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/checked_math.h"
#include "ops/frontend.h"
#include "ops/functional.h"
#include "ops/memory_format.h"
#include "ops/op_table.h"
#include "tensor/factory.h"

namespace precis {

using detail::Domain;
using detail::OpContext;

namespace {

const char* mode_name(InterpolateMode mode) {
  switch (mode) {
    case InterpolateMode::nearest: return "nearest";
    case InterpolateMode::nearest_exact: return "nearest-exact";
    case InterpolateMode::linear: return "linear";
    case InterpolateMode::bilinear: return "bilinear";
    case InterpolateMode::trilinear: return "trilinear";
  }
  return "?";
}

bool is_linear(InterpolateMode mode) {
  return mode != InterpolateMode::nearest && mode != InterpolateMode::nearest_exact;
}

// Per spatial dim: the output size and the scale PyTorch's kernel receives (nullopt: in/out).
struct DimPlan {
  int64_t in = 0, out = 0;
  std::optional<double> scale_factor;
};

std::vector<DimPlan> plan(const Tensor& x, const InterpolateOptions& o) {
  const int64_t nd = x.dim();
  const size_t spatial = nd >= 3 ? static_cast<size_t>(nd - 2) : 0;
  const char* mode = mode_name(o.mode);
  PRECIS_CHECK_SHAPE(nd >= 3 && nd <= 5, "interpolate: input must be 3-D (N, C, L), 4-D (N, C, H, W) or 5-D ",
                     "(N, C, D, H, W), got ", x.describe(), "; add the batch dim with unsqueeze(0)");
  const int64_t wanted = o.mode == InterpolateMode::linear ? 3 : o.mode == InterpolateMode::bilinear ? 4 : 5;
  PRECIS_CHECK_SHAPE(!is_linear(o.mode) || nd == wanted, "interpolate: mode ", mode, " needs ", wanted,
                     "-D input, got ", x.describe(), "; linear is for 3-D, bilinear for 4-D, trilinear for 5-D");
  PRECIS_CHECK(is_linear(o.mode) || !o.align_corners.has_value(), "interpolate: align_corners can only be set with ",
               "the linear modes (linear, bilinear, trilinear), not with ", mode, "; leave it unset");
  PRECIS_CHECK_DTYPE(!is_linear(o.mode) || is_floating(x.dtype()), "interpolate: mode ", mode,
                     " needs a floating input, got ", x.describe(), "; convert it with .to(DType::f32) or use nearest");
  PRECIS_CHECK(o.size.empty() != o.scale_factor.empty(), "interpolate: give exactly one of size and scale_factor ",
               "for input ", x.describe(), ", got ", o.size.empty() ? "neither" : "both; drop one");
  const size_t given = o.size.empty() ? o.scale_factor.size() : o.size.size();
  PRECIS_CHECK(given == 1 || given == spatial, "interpolate: ", o.size.empty() ? "scale_factor" : "size",
               " must hold 1 or ", spatial, " values for input ", x.describe(), ", got ", given);
  PRECIS_CHECK(!o.recompute_scale_factor || !o.scale_factor.empty(), "interpolate: recompute_scale_factor needs ",
               "scale_factor, not size (input ", x.describe(), "); with size, leave it false");
  PRECIS_CHECK_SHAPE(x.size(1) > 0, "interpolate: input ", x.describe(), " has no channels");
  std::vector<DimPlan> dims(spatial);
  for (size_t i = 0; i < spatial; ++i) {
    DimPlan& d = dims[i];
    d.in = x.size(static_cast<int64_t>(i) + 2);
    const size_t k = given == 1 ? 0 : i;
    if (!o.size.empty()) {
      d.out = o.size[k];
    } else {
      const double f = o.scale_factor[k];
      PRECIS_CHECK(std::isfinite(f) && f > 0, "interpolate: scale_factor must be positive and finite, got ", f,
                   " for dim ", i + 2, " of input ", x.describe());
      const double out = std::floor(static_cast<double>(d.in) * f);  // PyTorch: floor(in * factor)
      PRECIS_CHECK(out < 9.2e18, "interpolate: scale_factor ", f, " makes dim ", i + 2, " of input ", x.describe(),
                   " too large");
      d.out = static_cast<int64_t>(out);
      if (!o.recompute_scale_factor) d.scale_factor = f;
    }
    PRECIS_CHECK_SHAPE(d.in > 0 && d.out > 0, "interpolate: input and output sizes must be positive, got input ",
                       x.describe(), " and output size ", d.out, " for dim ", i + 2,
                       o.size.empty() ? "; floor(size · scale_factor) is 0: use a larger factor or give size" : "");
  }
  // Its elements' bytes (f32 for f16/bf16's blend) and each dim's i64 indices must fit int64.
  std::optional<int64_t> bytes = checked_mul(x.size(0), x.size(1));
  for (const DimPlan& d : dims) bytes = bytes ? checked_mul(*bytes, d.out) : std::nullopt;
  if (bytes) bytes = checked_mul(*bytes, std::max<int64_t>(4, static_cast<int64_t>(element_size(x.dtype()))));
  for (const DimPlan& d : dims) bytes = bytes && checked_mul(d.out, 8) ? bytes : std::nullopt;
  PRECIS_CHECK_SHAPE(bytes.has_value(), "interpolate: the output of input ", x.describe(), " would need more than ",
                     "2^63 bytes; ask for a smaller size or scale_factor");
  return dims;
}

// PyTorch's compute_scales_value and area_pixel_compute_scale, in T (its opmath type).
template <typename T>
T sample_scale(const DimPlan& d, bool align_corners) {
  if (align_corners) return d.out > 1 ? static_cast<T>(d.in - 1) / static_cast<T>(d.out - 1) : T(0);
  return d.scale_factor && *d.scale_factor > 0 ? static_cast<T>(1.0 / *d.scale_factor)
                                               : static_cast<T>(d.in) / static_cast<T>(d.out);
}

// PyTorch's nearest source indices, always in float: nearest floor(dst·scale), nearest-exact
// floor((dst + 0.5)·scale) with the sum in double; at most in - 1. PyTorch's 2-D kernel (4-D input)
// takes two shortcuts, out == in: dst and out == 2·in: dst / 2, which differ from the formula when
// a scale_factor gives those sizes (e.g. 1.2 on 4 samples); its 1-D and 3-D kernels do not.
Tensor nearest_sources(const DimPlan& d, bool exact, bool shortcuts) {
  Tensor src = empty({d.out}, {.dtype = DType::i64});
  int64_t* out = src.data_ptr<int64_t>();
  const float scale = sample_scale<float>(d, false);
  for (int64_t i = 0; i < d.out; ++i) {
    int64_t s;
    if (exact) s = static_cast<int64_t>(std::floor(static_cast<float>((static_cast<double>(i) + 0.5) * scale)));
    else if (shortcuts && d.out == d.in) s = i;
    else if (shortcuts && d.out == 2 * d.in) s = i >> 1;
    else s = static_cast<int64_t>(std::floor(static_cast<float>(i) * scale));
    out[i] = std::min(s, d.in - 1);
  }
  return src;
}

// linear, along spatial dim `dim` of an nd-dim tensor: the two neighbours of each output sample
// (i64, (out)) and their weights λ0, λ1 (T, (out, 1, ..., 1): broadcasting over the dims after it).
struct LinearSources {
  Tensor i0, i1, w0, w1;
};

template <typename T>
LinearSources linear_sources(const DimPlan& d, bool align_corners, int64_t dim, int64_t nd) {
  Shape wshape(static_cast<size_t>(nd - dim), 1);
  wshape[0] = d.out;
  LinearSources r{empty({d.out}, {.dtype = DType::i64}), empty({d.out}, {.dtype = DType::i64}),
                  empty(wshape, {.dtype = dtype_of<T>()}), empty(wshape, {.dtype = dtype_of<T>()})};
  int64_t *i0 = r.i0.data_ptr<int64_t>(), *i1 = r.i1.data_ptr<int64_t>();
  T *w0 = r.w0.data_ptr<T>(), *w1 = r.w1.data_ptr<T>();
  const T scale = sample_scale<T>(d, align_corners);
  for (int64_t i = 0; i < d.out; ++i) {
    if (d.out == d.in) {  // PyTorch's shortcut (by sizes alone): the sample itself, weights 1 and 0
      i0[i] = i1[i] = i, w0[i] = T(1), w1[i] = T(0);
      continue;
    }
    T real = align_corners ? scale * static_cast<T>(i) : scale * (static_cast<T>(i) + T(0.5)) - T(0.5);
    if (!align_corners && real < T(0)) real = T(0);
    const int64_t lo = std::min(static_cast<int64_t>(std::floor(real)), d.in - 1);
    const T lambda = std::clamp(real - static_cast<T>(lo), T(0), T(1));
    i0[i] = lo;
    i1[i] = lo + (lo < d.in - 1 ? 1 : 0);
    w1[i] = lambda;
    w0[i] = T(1) - lambda;
  }
  return r;
}

template <typename T>
Tensor run(const Tensor& input, const InterpolateOptions& o, const std::vector<DimPlan>& dims) {
  const int64_t nd = input.dim();
  const bool align = o.align_corners.value_or(false);
  const Device device = input.device();
  Tensor x = input;
  // f16/bf16 in f32: linear modes blend there, and every mode's gradient sums there, rounding once.
  if (x.dtype() == DType::f16 || x.dtype() == DType::bf16) x = x.to(DType::f32);
  // A channels-last input is resized in its memory order, (N, H, W, C): each source sample is a
  // contiguous row of C values, and the result is channels-last, as PyTorch's (the convolution
  // after it stays channels-last).
  const bool channels_last = nd == 4 && !input.is_contiguous() && is_contiguous(input, MemoryFormat::ChannelsLast);
  if (channels_last) x = x.permute({0, 2, 3, 1});
  for (int64_t k = static_cast<int64_t>(dims.size()) - 1; k >= 0; --k) {
    const DimPlan& d = dims[static_cast<size_t>(k)];
    const int64_t dim = channels_last ? k + 1 : k + 2;
    if (!is_linear(o.mode)) {
      x = index_select(x, dim, nearest_sources(d, o.mode == InterpolateMode::nearest_exact, nd == 4).to(device));
      continue;
    }
    const LinearSources s = linear_sources<T>(d, align, dim, nd);
    x = add(mul(index_select(x, dim, s.i0.to(device)), s.w0.to(device)),
            mul(index_select(x, dim, s.i1.to(device)), s.w1.to(device)));
  }
  if (channels_last) x = x.permute({0, 3, 1, 2});
  return x.dtype() == input.dtype() ? x : x.to(input.dtype());
}

// The operand is the input; the options are parameters. The inner ops record the graph.
struct Interpolate {
  static constexpr OpId id = OpId::interpolate;
  static constexpr Domain domain = Domain::any;
  static Tensor forward(OpContext<detail::NoSaved>&, const std::array<Tensor, 1>& in, const InterpolateOptions& o) {
    const std::vector<DimPlan> dims = plan(in[0], o);
    try {
      return in[0].dtype() == DType::f64 ? run<double>(in[0], o, dims) : run<float>(in[0], o, dims);
    } catch (const OutOfMemoryError& e) {  // the allocator's words, with the op and its operand
      Shape out{in[0].size(0), in[0].size(1)};
      for (const DimPlan& d : dims) out.push_back(d.out);
      throw OutOfMemoryError(detail::str_cat("interpolate: resizing input ", in[0].describe(), " to ",
                                             shape_str(out), ": ", e.what()),
                             e.requested_bytes(), e.device());
    }
  }
};

}  // namespace

Tensor interpolate(const Tensor& input, const InterpolateOptions& options) {
  return detail::call<Interpolate>({input}, options);
}

}  // namespace precis
