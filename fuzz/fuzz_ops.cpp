// Op calls with fuzzed operands: the bytes choose an op from a table and then its operands' dtypes,
// shapes (small, occasionally empty, huge or negative), layouts (contiguous, transposed, strided
// slices, broadcast views) and its arguments (dims, strides, paddings, indices, valid or not).
// Every call must return or throw a precis::Error; results that require grad are back-propagated.
#include <fuzzer/FuzzedDataProvider.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <vector>

#include "core/allocator.h"
#include "core/error.h"
#include "core/rng.h"
#include "fuzz/common.h"
#include "ops/functional.h"
#include "tensor/factory.h"

using namespace precis;

namespace {

constexpr DType kDTypes[] = {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i64, DType::i32, DType::boolean};

struct Gen {
  FuzzedDataProvider& in;
  Generator rng;

  int64_t small(int64_t lo, int64_t hi) { return in.ConsumeIntegralInRange<int64_t>(lo, hi); }
  // A dim size or an int argument: usually small, sometimes a hostile value.
  int64_t size_arg(int64_t lo = 0, int64_t hi = 5) {
    switch (in.ConsumeIntegralInRange<int>(0, 31)) {
      case 0: return -1;
      case 1: return -small(2, 1000);
      case 2: return int64_t{1} << 40;
      case 3: return std::numeric_limits<int64_t>::max();
      case 4: return std::numeric_limits<int64_t>::min();
      default: return small(lo, hi);
    }
  }
  // A floating Scalar argument, any double (NaN, inf and values no integer dtype holds included):
  // ops that write one into an integer tensor raise a typed error for those.
  double scalar_arg() { return in.ConsumeFloatingPoint<double>(); }
  int64_t dim_arg(int64_t rank) { return in.ConsumeBool() ? small(-rank - 1, rank) : size_arg(-6, 6); }
  DType dtype() { return kDTypes[in.ConsumeIntegralInRange<size_t>(0, std::size(kDTypes) - 1)]; }
  DType float_dtype() { return kDTypes[in.ConsumeIntegralInRange<size_t>(0, 3)]; }
  Shape shape(int max_rank = 4) {
    Shape s(static_cast<size_t>(small(0, max_rank)));
    for (auto& d : s) d = size_arg(0, 5);
    return s;
  }
  std::vector<int64_t> ints(int n_max, int64_t lo, int64_t hi) {
    std::vector<int64_t> v(static_cast<size_t>(small(0, n_max)));
    for (auto& x : v) x = in.ConsumeBool() ? small(lo, hi) : size_arg(lo, hi);
    return v;
  }

  // A tensor of `s` and `dt` in one of several layouts; values from the fixed-seed generator.
  Tensor tensor(const Shape& s, DType dt) {
    int layout = in.ConsumeIntegralInRange<int>(0, 3);
    Shape base = s;
    if (layout == 2 && !base.empty() && base.back() >= 0 && base.back() < 1024) base.back() *= 2;  // sliced with step 2 below
    Tensor t = mul(randn(base, {}, &rng), 3.0);
    t = dt == DType::boolean ? gt(t, 0.0) : cast(t, dt);
    if (layout == 1 && t.dim() >= 2) t = t.transpose(0, t.dim() - 1).contiguous().transpose(0, t.dim() - 1);
    if (layout == 2 && t.dim() >= 1 && base.back() != (s.empty() ? 0 : s.back())) t = t.slice(t.dim() - 1, 0, base.back(), 2);
    if (layout == 3 && t.dim() >= 1 && t.numel() > 0) t = t.select(0, 0).unsqueeze(0).expand(s);
    if (is_floating(dt) && in.ConsumeBool()) t.requires_grad_(true);
    return t;
  }
  Tensor tensor() {
    Shape s = shape();
    return tensor(s, dtype());
  }
  Tensor float_tensor(int max_rank = 4) {
    Shape s = shape(max_rank);
    return tensor(s, float_dtype());
  }
  Tensor index_tensor(int64_t hi) {
    Shape s = shape(2);
    const int64_t top = std::min<int64_t>(std::max<int64_t>(hi, 1), std::numeric_limits<int64_t>::max() - 1) + 1;
    Tensor t = randint(-2, top, s, {.dtype = in.ConsumeBool() ? DType::i64 : DType::i32}, &rng);
    return t;
  }
  Tensor maybe(Tensor t) { return in.ConsumeBool() ? t : Tensor(); }
};

Tensor call(Gen& g) {
  auto& in = g.in;
  switch (in.ConsumeIntegralInRange<int>(0, 31)) {
    case 0: { Tensor a = g.tensor(), b = g.tensor(); return add(a, b, g.scalar_arg()); }
    case 1: { Tensor a = g.tensor(); Tensor b = in.ConsumeBool() ? g.tensor(a.sizes(), g.dtype()) : g.tensor();
              switch (in.ConsumeIntegralInRange<int>(0, 4)) {
                case 0: return sub(a, b); case 1: return mul(a, b); case 2: return div(a, b);
                case 3: return maximum(a, b); default: return where(gt(a, 0.0), a, b); } }
    case 2: { Tensor a = g.tensor(); return in.ConsumeBool() ? matmul(a, g.tensor(a.sizes(), a.dtype()).transpose(-1, -2)) : matmul(a, g.tensor()); }
    case 3: { Tensor x = g.float_tensor(); Tensor w = g.tensor(g.shape(), x.dtype());
              Tensor b = g.maybe(g.tensor(g.shape(1), x.dtype()));
              return conv2d(x, w, b, g.ints(3, -1, 3), g.ints(3, -1, 3), g.ints(3, -1, 3), g.size_arg(0, 4)); }
    case 4: { Tensor a = g.tensor(); return a.reshape(g.ints(5, -1, 8)); }
    case 5: { Tensor a = g.tensor(); return a.view(g.ints(5, -1, 8)); }
    case 6: { Tensor a = g.tensor(); return a.slice(g.dim_arg(a.dim()), g.size_arg(-6, 6), g.size_arg(-6, 6), g.size_arg(-2, 3)); }
    case 7: { Tensor a = g.tensor(); return sum(a, g.ints(3, -4, 4), in.ConsumeBool()); }
    case 8: { Tensor a = g.tensor(); std::optional<DType> dt; if (in.ConsumeBool()) dt = g.dtype();
              return in.ConsumeBool() ? softmax(a, g.dim_arg(a.dim()), dt) : log_softmax(a, g.dim_arg(a.dim()), dt); }
    case 9: { Tensor x = g.float_tensor(3); int64_t c = x.dim() >= 2 ? x.size(1) : (x.dim() == 1 ? x.size(0) : 1);
              Tensor t = in.ConsumeBool() ? g.index_tensor(c) : g.tensor();
              if (in.ConsumeBool()) t = cast(t, DType::i64);
              return cross_entropy(x, t, g.maybe(g.tensor(g.shape(1), x.dtype())), g.size_arg(-100, 5),
                                   static_cast<Reduction>(g.small(0, 2)), in.ConsumeFloatingPointInRange<double>(-0.5, 1.5)); }
    case 10: { Tensor a = g.tensor(); int64_t d = g.dim_arg(a.dim());
               return index_select(a, d, g.index_tensor(a.dim() > 0 ? a.size(0) : 1)); }
    case 11: case 12: { std::vector<Tensor> ts; Tensor a = g.tensor(); ts.push_back(a);
               for (int64_t i = g.small(0, 3); i > 0; --i) ts.push_back(in.ConsumeBool() ? g.tensor(a.sizes(), g.dtype()) : g.tensor());
               if (in.ConsumeBool()) ts.clear();
               return in.ConsumeBool() ? cat(ts, g.dim_arg(a.dim())) : stack(ts, g.dim_arg(a.dim() + 1)); }
    case 13: { Tensor a = g.tensor(); return in.ConsumeBool() ? a.transpose(g.dim_arg(a.dim()), g.dim_arg(a.dim())) : a.permute(g.ints(5, -4, 4)); }
    case 14: { Tensor a = g.tensor(); return a.expand(g.ints(5, -1, 6)); }
    case 15: { Tensor x = g.float_tensor(); auto k = g.ints(3, -1, 4), s = g.ints(3, -1, 3), p = g.ints(3, -1, 2);
               if (in.ConsumeBool()) return max_pool2d(x, k, s, p, g.ints(3, -1, 2), in.ConsumeBool());
               if (in.ConsumeBool()) return avg_pool2d(x, k, s, p);
               return adaptive_avg_pool2d(x, g.ints(3, -1, 4)); }
    case 16: { Tensor a = g.tensor(); int64_t d = g.dim_arg(a.dim()); Tensor idx = g.index_tensor(a.dim() > 0 ? a.size(0) : 1);
               switch (g.small(0, 2)) {
                 case 0: return gather(a, d, idx);
                 case 1: return scatter_add(a, d, idx, g.tensor(idx.sizes(), a.dtype()));
                 default: return index_add(a, d, idx, g.tensor()); } }
    case 17: { Tensor x = g.float_tensor(); Shape ns = g.shape(2);
               if (in.ConsumeBool()) return layer_norm(x, ns, g.maybe(g.tensor(ns, x.dtype())), g.maybe(g.tensor(ns, x.dtype())));
               int64_t c = x.dim() >= 2 ? x.size(1) : 1;
               return group_norm(x, g.size_arg(0, 4), g.maybe(g.tensor({c}, x.dtype())), g.maybe(g.tensor({c}, x.dtype()))); }
    case 18: { Tensor w = g.float_tensor(2); std::optional<int64_t> pad; if (in.ConsumeBool()) pad = g.size_arg(-3, 5);
               return embedding(g.index_tensor(w.dim() > 0 ? w.size(0) : 1), w, pad); }
    case 19: { Tensor a = g.tensor(); return pad(a, g.ints(6, -3, 3), g.scalar_arg()); }
    case 20: { Tensor a = g.tensor(); return cast(a, g.dtype()); }
    case 21: { Tensor a = g.tensor(); Tensor m = in.ConsumeBool() ? gt(g.tensor(a.sizes(), DType::f32), 0.0) : g.tensor();
               return masked_fill(a, m, g.scalar_arg()); }
    case 22: { Tensor x = g.float_tensor(3); Tensor t = in.ConsumeBool() ? g.tensor(x.sizes(), x.dtype()) : g.tensor();
               auto red = static_cast<Reduction>(g.small(0, 2));
               switch (g.small(0, 3)) {
                 case 0: return mse_loss(x, t, red);
                 case 1: return binary_cross_entropy_with_logits(x, t, g.maybe(g.tensor()));
                 case 2: return binary_cross_entropy(sigmoid(x), t);
                 default: return nll_loss(x, g.index_tensor(x.dim() >= 2 ? x.size(1) : 2), g.maybe(g.tensor()), g.size_arg(-100, 4)); } }
    case 23: { Tensor a = g.tensor(); int64_t d = g.dim_arg(a.dim()); bool keep = in.ConsumeBool();
               switch (g.small(0, 4)) {
                 case 0: return mean(a, g.ints(3, -4, 4), keep);
                 case 1: return var(a, g.ints(3, -4, 4), g.size_arg(0, 2), keep);
                 case 2: return argmax(a, in.ConsumeBool() ? std::optional<int64_t>(d) : std::nullopt, keep);
                 case 3: return std::get<0>(max(a, d, keep));
                 default: return max(a); } }
    case 24: { Tensor a = g.tensor(); int64_t d = g.dim_arg(a.dim());
               switch (g.small(0, 4)) {
                 case 0: return a.narrow(d, g.size_arg(-3, 4), g.size_arg(-1, 4));
                 case 1: return a.select(d, g.size_arg(-4, 4));
                 case 2: return a.squeeze(d);
                 case 3: return a.unsqueeze(d);
                 default: return a.flatten(d, g.dim_arg(a.dim())); } }
    case 25: { Tensor x = g.float_tensor(); Tensor w = g.tensor(g.shape(2), x.dtype());
               return linear(x, w, g.maybe(g.tensor(g.shape(1), x.dtype()))); }
    case 26: { Tensor q = g.float_tensor(); Tensor k = in.ConsumeBool() ? g.tensor(q.sizes(), q.dtype()) : g.tensor();
               Tensor v = in.ConsumeBool() ? g.tensor(k.sizes(), q.dtype()) : g.tensor();
               Tensor mask = g.maybe(g.tensor());
               return scaled_dot_product_attention(q, k, v, mask, in.ConsumeBool() ? 0.0 : in.ConsumeFloatingPoint<double>(),
                                                   in.ConsumeBool(), in.ConsumeBool() ? 0.0 : in.ConsumeFloatingPoint<double>(), &g.rng); }
    case 27: { Tensor x = g.float_tensor(); int64_t c = x.dim() >= 2 ? x.size(1) : 1;
               Tensor rm = g.maybe(g.tensor({c}, DType::f32)), rv = g.maybe(abs(g.tensor({c}, DType::f32)));
               return batch_norm(x, rm, rv, g.maybe(g.tensor({c}, x.dtype())), g.maybe(g.tensor({c}, x.dtype())),
                                 in.ConsumeBool(), in.ConsumeFloatingPoint<double>(), in.ConsumeFloatingPointInRange<double>(-1.0, 1.0)); }
    case 28: { Tensor a = g.tensor(); return dropout(a, in.ConsumeFloatingPointInRange<double>(-0.5, 1.5), in.ConsumeBool(), &g.rng); }
    case 29: { Tensor a = g.tensor(); switch (g.small(0, 5)) {
                 case 0: return exp(a); case 1: return log(a); case 2: return gelu(a, in.ConsumeBool() ? "tanh" : in.ConsumeRandomLengthString(8));
                 case 3: return pow(a, g.scalar_arg()); case 4: return erf(a); default: return relu(a); } }
    case 30: { Shape s = g.ints(4, -2, 6); DType dt = g.dtype();
               switch (g.small(0, 3)) {
                 case 0: return full(s, g.scalar_arg(), {.dtype = dt});
                 case 1: { const double start = in.ConsumeFloatingPoint<double>(), end = in.ConsumeFloatingPoint<double>(),
                                        step = in.ConsumeFloatingPoint<double>();
                           // A valid range of more than 2^22 values is only memory and time (3e8 values:
                           // 2.4 GB, 7 s under ASan, past libFuzzer's limits); hostile ones still go in.
                           if (const double n = std::ceil((end - start) / step); std::isfinite(n) && n > 0x1p22) return Tensor();
                           return arange(start, end, step, {.dtype = dt}); }
                 case 2: return randint(g.size_arg(-5, 5), g.size_arg(-5, 5), s, {.dtype = dt}, &g.rng);
                 default: return zeros(s, {.dtype = dt}); } }
    default: { Tensor a = g.tensor(); return sum_to(a, g.ints(4, -1, 5)); }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  precis::fuzz::init_once();
  FuzzedDataProvider in(data, size);
  Gen g{in, Generator(in.ConsumeIntegral<uint64_t>())};
  try {
    Tensor out = call(g);
    // The harness's own follow-up (backward, and reading every value) runs on results of a size
    // that can be summed within the 10 s timeout: an expand can return a stride-0 view of 2^43
    // elements, whose sum is hours of valid work (and 2 GiB of per-chunk partial sums).
    const bool checkable = out.defined() && out.numel() > 0 && out.numel() <= (int64_t{1} << 20);
    if (checkable && out.requires_grad()) sum(cast(out, DType::f32)).backward();
    if (checkable) (void)sum(cast(out, DType::f64)).item<double>();
  } catch (const precis::Error&) {
  }
  // The caching allocator keeps every freed block for reuse in its size class. Thousands of inputs
  // with random shapes leave cached blocks of hundreds of classes, which libFuzzer's RSS limit
  // (2 GiB) reads as a leak: 2.9 GB after 3756 inputs in CI. Each input starts from an empty cache.
  precis::cpu_allocator().empty_cache();
  return 0;
}
