// Host-side convolution planning shared by the library back ends (see ops/math/conv_plan.h).
#include "ops/math/conv_plan.h"

#include <atomic>
#include <climits>
#include <cstdint>

#include "core/checked_math.h"
#include "core/error.h"

namespace precis::kernels {

const char* conv_layout_name(ConvLayout layout) { return layout == ConvLayout::nchw ? "NCHW" : "NHWC"; }

std::array<int64_t, 4> conv_dense_strides(const std::array<int64_t, 4>& s, ConvLayout layout) {
  // A zero size would make every outer stride 0; dense strides treat it as 1, as contiguous() does.
  auto at_least_1 = [](int64_t v) { return v < 1 ? int64_t{1} : v; };
  const int64_t c = at_least_1(s[1]), h = at_least_1(s[2]), w = at_least_1(s[3]);
  if (layout == ConvLayout::nchw) return {c * h * w, h * w, w, 1};
  return {h * w * c, 1, w * c, c};
}

bool conv_is_dense(const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides, ConvLayout layout) {
  if (sizes.size() != 4 || strides.size() != 4) return false;
  const std::array<int64_t, 4> dense = conv_dense_strides({sizes[0], sizes[1], sizes[2], sizes[3]}, layout);
  for (int d = 0; d < 4; ++d)
    if (sizes[d] != 1 && strides[d] != dense[d]) return false;
  return true;
}

std::optional<ConvLayout> conv_layout_of(const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides) {
  for (ConvLayout layout : {ConvLayout::nchw, ConvLayout::nhwc})
    if (conv_is_dense(sizes, strides, layout)) return layout;
  return std::nullopt;
}

int64_t conv2d_out_size(int64_t in, int64_t kernel, int64_t stride, int64_t padding, int64_t dilation) {
  const int64_t span = in + 2 * padding - dilation * (kernel - 1) - 1;
  return span < 0 ? 0 : span / stride + 1;
}

ConvProblem make_conv_problem(const std::vector<int64_t>& x, const std::vector<int64_t>& w, const Conv2dParams& p,
                              DType dtype, ConvLayout layout) {
  PRECIS_CHECK_SHAPE(x.size() == 4 && w.size() == 4 && p.groups >= 1 && x[1] == w[1] * p.groups,
                     "conv2d: a plan needs x (N, C, H, W) and w (O, C / groups, kH, kW) with C = w.size(1) · groups (",
                     p.groups, "); got x of ", x.size(), " dims, w of ", w.size(), " dims");
  for (int64_t v : x) PRECIS_CHECK_SHAPE(v >= 0, "conv2d: negative input size ", v);
  for (int64_t v : w) PRECIS_CHECK_SHAPE(v >= 0, "conv2d: negative weight size ", v);
  ConvProblem pr;
  pr.dtype = dtype;
  pr.layout = layout;
  pr.n = x[0], pr.c = x[1], pr.h = x[2], pr.w = x[3];
  pr.o = w[0], pr.kh = w[2], pr.kw = w[3];
  pr.p = p;
  pr.ho = conv2d_out_size(pr.h, pr.kh, p.stride[0], p.padding[0], p.dilation[0]);
  pr.wo = conv2d_out_size(pr.w, pr.kw, p.stride[1], p.padding[1], p.dilation[1]);
  return pr;
}

std::string describe(const ConvProblem& pr) {
  return detail::str_cat("conv2d ", dtype_name(pr.dtype), " ", conv_layout_name(pr.layout), " x (", pr.n, ", ", pr.c,
                         ", ", pr.h, ", ", pr.w, ") w (", pr.o, ", ", pr.p.groups > 0 ? pr.c / pr.p.groups : 0, ", ",
                         pr.kh, ", ", pr.kw, ") -> (", pr.n, ", ", pr.o, ", ", pr.ho, ", ", pr.wo, ") stride (",
                         pr.p.stride[0], ", ", pr.p.stride[1], ") padding (", pr.p.padding[0], ", ", pr.p.padding[1],
                         ") dilation (", pr.p.dilation[0], ", ", pr.p.dilation[1], ") groups ", pr.p.groups);
}

namespace {

// The int32 value of v, or a NotImplementedError naming the problem.
int to_int(int64_t v, const ConvProblem& pr, const char* what) {
  PRECIS_CHECK_T(NotImplementedError, v >= INT_MIN && v <= INT_MAX, "conv2d on cuDNN: the ", what, " (", v,
                 ") exceeds int32, which cuDNN's descriptors take; ", describe(pr),
                 ". Split the batch, or run this convolution on the CPU");
  return static_cast<int>(v);
}

// Element count of a 4-D tensor, checked against int32 (cuDNN indexes a tensor with int).
void check_elements(const std::array<int64_t, 4>& s, const ConvProblem& pr, const char* what) {
  std::optional<int64_t> count = int64_t{1};
  for (int64_t v : s) count = count ? checked_mul(*count, v) : std::nullopt;
  PRECIS_CHECK_T(NotImplementedError, count && *count <= INT_MAX, "conv2d on cuDNN: the ", what,
                 " has more than 2^31-1 elements, which cuDNN's descriptors cannot address; ", describe(pr),
                 ". Split the batch, or run this convolution on the CPU");
}

}  // namespace

ConvDescriptorDims conv_descriptor_dims(const ConvProblem& pr) {
  const std::array<int64_t, 4> xs{pr.n, pr.c, pr.h, pr.w}, ys{pr.n, pr.o, pr.ho, pr.wo};
  const std::array<int64_t, 4> ws{pr.o, pr.p.groups > 0 ? pr.c / pr.p.groups : 0, pr.kh, pr.kw};
  check_elements(xs, pr, "input");
  check_elements(ys, pr, "output");
  check_elements(ws, pr, "weight");
  const std::array<int64_t, 4> xst = conv_dense_strides(xs, pr.layout), yst = conv_dense_strides(ys, pr.layout);
  ConvDescriptorDims d;
  for (int i = 0; i < 4; ++i) {
    d.x_dims[i] = to_int(xs[i], pr, "input size");
    d.y_dims[i] = to_int(ys[i], pr, "output size");
    d.w_dims[i] = to_int(ws[i], pr, "weight size");
    d.x_strides[i] = to_int(xst[i], pr, "input stride");
    d.y_strides[i] = to_int(yst[i], pr, "output stride");
  }
  for (int i = 0; i < 2; ++i) {
    d.pad[i] = to_int(pr.p.padding[i], pr, "padding");
    d.stride[i] = to_int(pr.p.stride[i], pr, "stride");
    d.dilation[i] = to_int(pr.p.dilation[i], pr, "dilation");
  }
  d.groups = to_int(pr.p.groups, pr, "group count");
  return d;
}

namespace {
std::atomic<bool> g_deterministic{true};
}  // namespace

bool conv_deterministic() { return g_deterministic.load(std::memory_order_relaxed); }
void set_conv_deterministic(bool deterministic) { g_deterministic.store(deterministic, std::memory_order_relaxed); }

int64_t common_alignment(std::initializer_list<const void*> addresses) {
  int64_t alignment = 256;
  for (const void* a : addresses) {
    if (a == nullptr) continue;
    const auto bits = reinterpret_cast<uintptr_t>(a);
    while (alignment > 1 && bits % static_cast<uintptr_t>(alignment) != 0) alignment /= 2;
  }
  return alignment;
}

PlanKey conv_plan_key(ConvPass pass, const ConvProblem& pr, int device_index, int64_t alignment, bool deterministic,
                      bool tf32) {
  return {static_cast<int64_t>(pass),
          static_cast<int64_t>(pr.dtype),
          static_cast<int64_t>(pr.layout),
          pr.n, pr.c, pr.h, pr.w, pr.o, pr.kh, pr.kw, pr.ho, pr.wo,
          pr.p.stride[0], pr.p.stride[1], pr.p.padding[0], pr.p.padding[1],
          pr.p.dilation[0], pr.p.dilation[1], pr.p.groups,
          device_index, alignment, deterministic ? 1 : 0, tf32 ? 1 : 0};
}

size_t PlanKeyHash::operator()(const PlanKey& key) const noexcept {
  uint64_t h = 1469598103934665603ull;
  for (int64_t v : key) {
    auto u = static_cast<uint64_t>(v);
    for (int b = 0; b < 8; ++b) {
      h ^= (u >> (8 * b)) & 0xffu;
      h *= 1099511628211ull;
    }
  }
  return static_cast<size_t>(h);
}

}  // namespace precis::kernels
