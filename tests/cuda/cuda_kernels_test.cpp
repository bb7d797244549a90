// The CUDA kernels of the loss-scaler path (unary, where/masked_fill, reductions, unscale_grads)
// checked against the CPU kernels on the same inputs (and the composites made of them), and a GradScaler training run on cuda:0
// checked against the same run on the CPU. Tests tagged [cuda] return early (with a warning)
// without a GPU; the [cuda_api] test checks the registrations on any machine.
#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include "amp/grad_scaler.h"
#include "core/device.h"
#include "ops/functional.h"
#include "ops/contracts/kernels.h"
#include "ops/contracts/kernels_amp.h"
#include "ops/op_table.h"
#include "optim/sgd.h"
#include "tensor/factory.h"
#include "tests/support/fake_cuda/cpu_only_ops.h"
#include "tests/support/tensor_testing.h"

using namespace precis;
using precis::testing::randn_input;
using precis::testing::uniform_input;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr DType kFloating[] = {DType::f32, DType::f64, DType::f16, DType::bf16};
constexpr DType kAll[] = {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i64, DType::i32, DType::boolean};
const Device kGpu = Device::cuda(0);

std::vector<double> values(const Tensor& t) { return t.to_vector<double>(); }

// An f64 tensor's values as bit patterns (equal for equal NaNs, unlike the doubles).
std::vector<uint64_t> bits(const Tensor& t) {
  REQUIRE(t.dtype() == DType::f64);
  std::vector<uint64_t> out;
  for (double v : values(t)) out.push_back(std::bit_cast<uint64_t>(v));
  return out;
}

// Bitwise-equal values (NaN equal to NaN).
void require_same(const Tensor& actual, const Tensor& expected) {
  REQUIRE(actual.sizes() == expected.sizes());
  const std::vector<double> a = values(actual), b = values(expected);
  for (size_t i = 0; i < a.size(); ++i) {
    INFO("flat index " << i << ": " << a[i] << " vs " << b[i]);
    REQUIRE((a[i] == b[i] || (std::isnan(a[i]) && std::isnan(b[i]))));
  }
}

// Inputs of `dtype` in [lo, hi) (integers: rounded), shape (4, 6, 5).
Tensor input(DType dtype, double lo, double hi, uint64_t seed, const Shape& shape = {4, 6, 5}) {
  if (is_floating(dtype)) return uniform_input(shape, lo, hi, false, seed, dtype);
  return uniform_input(shape, lo, hi, false, seed).to(DType::i64).to(dtype);
}

struct UnaryCase {
  OpId op;
  double lo, hi;  // input range
  double param;
  bool integers;  // has i32/i64 kernels
};

const UnaryCase kUnaryCases[] = {
    {OpId::neg, -3, 3, 0, true},      {OpId::abs, -3, 3, 0, true},         {OpId::relu, -3, 3, 0, true},
    {OpId::exp, -5, 5, 0, false},     {OpId::log, 0.01, 9, 0, false},      {OpId::sqrt, 0, 9, 0, false},
    {OpId::rsqrt, 0.01, 9, 0, false}, {OpId::tanh, -4, 4, 0, false},       {OpId::sigmoid, -9, 9, 0, false},
    {OpId::gelu, -6, 4, 0, false},    {OpId::gelu, -6, 4, 1, false},       {OpId::erf, -3, 3, 0, false},
    {OpId::silu, -9, 9, 0, false},
    {OpId::pow_scalar, 0.1, 3, 2.5, false}, {OpId::pow_scalar, -3, 3, 2, false}, {OpId::pow_scalar, 0.1, 3, -0.5, false},
};

}  // namespace

TEST_CASE("the fake CUDA device leaves empty exactly the kernel slots the real backend leaves empty", "[cuda_api]") {
#ifdef PRECIS_HAS_CUDA
  // (op, dtype) slots the CPU fills and the real backend does not, against the fake device's list
  // (tests/support/fake_cuda/cpu_only_ops.h): the fake tests take the GPU's composed paths.
  std::set<std::string> real, fake;
  for (int o = 0; o < kNumOps; ++o)
    for (int d = 0; d < kNumDTypes; ++d) {
      const auto op = static_cast<OpId>(o);
      const auto dt = static_cast<DType>(d);
      if (find_kernel(op, DeviceType::cpu, dt) == nullptr) continue;
      const std::string slot = std::string(op_name(op)) + " " + std::string(dtype_name(dt));
      if (find_kernel(op, DeviceType::cuda, dt) == nullptr) real.insert(slot);
      if (std::find(fake_cuda_testing::kCpuOnlyOps.begin(), fake_cuda_testing::kCpuOnlyOps.end(), op) !=
          fake_cuda_testing::kCpuOnlyOps.end())
        fake.insert(slot);
    }
  for (const std::string& slot : real) {
    INFO("the real backend lacks " << slot << ": add its op to kCpuOnlyOps");
    CHECK(fake.count(slot) == 1);
  }
  for (const std::string& slot : fake) {
    INFO("the real backend has " << slot << ": take its op out of kCpuOnlyOps");
    CHECK(real.count(slot) == 1);
  }
#else
  WARN("built without CUDA; the fake device's list of CPU-only ops is not checked");
#endif
}

TEST_CASE("the CUDA backend registers the scaler-path kernels without a GPU", "[cuda_api]") {
#ifdef PRECIS_HAS_CUDA
  for (DType dt : kAll) {
    CHECK(find_kernel(OpId::where, DeviceType::cuda, dt) != nullptr);
    CHECK(find_kernel(OpId::masked_fill, DeviceType::cuda, dt) != nullptr);
    CHECK(find_kernel(OpId::sum, DeviceType::cuda, dt) != nullptr);
    CHECK(find_kernel(OpId::max, DeviceType::cuda, dt) != nullptr);
  }
  for (DType dt : kFloating) {
    for (const UnaryCase& c : kUnaryCases) CHECK(find_kernel(c.op, DeviceType::cuda, dt) != nullptr);
    CHECK(find_kernel(OpId::relu_backward, DeviceType::cuda, dt) != nullptr);
    CHECK(find_kernel(OpId::gelu_backward, DeviceType::cuda, dt) != nullptr);
    CHECK(find_kernel(OpId::mean, DeviceType::cuda, dt) != nullptr);
    CHECK(find_kernel(OpId::unscale_grads, DeviceType::cuda, dt) != nullptr);
    for (OpId op : {OpId::sgd_step, OpId::adam_step, OpId::grad_norms, OpId::clip_grad_norm, OpId::clip_grad_value})
      CHECK(find_kernel(op, DeviceType::cuda, dt) != nullptr);
  }
  CHECK(find_kernel(OpId::neg, DeviceType::cuda, DType::i64) != nullptr);
  CHECK(find_kernel(OpId::exp, DeviceType::cuda, DType::i64) == nullptr);
  CHECK(find_kernel(OpId::mean, DeviceType::cuda, DType::i32) == nullptr);
#else
  CHECK(find_kernel(OpId::unscale_grads, DeviceType::cuda, DType::f32) == nullptr);
  CHECK(find_kernel(OpId::adam_step, DeviceType::cuda, DType::f32) == nullptr);
#endif
}

// ---- unary ------------------------------------------------------------------------------------

TEST_CASE("CUDA unary kernels match the CPU kernels on contiguous and permuted inputs", "[cuda]") {
  PRECIS_REQUIRE_CUDA();
  uint64_t seed = 100;
  for (const UnaryCase& c : kUnaryCases) {
    for (DType dt : kAll) {
      if (dt == DType::boolean || (!is_floating(dt) && !c.integers)) continue;
      INFO(op_name(c.op) << " param " << c.param << " " << dtype_name(dt));
      const Tensor x = input(dt, c.lo, c.hi, ++seed);
      const Tensor xg = x.to(kGpu);
      const auto unary = [&](const Tensor& in) {
        Tensor out = empty(in.sizes(), {.dtype = dt, .device = in.device()});
        kernel<kernels::UnaryKernel>(c.op, in.device().type, dt)(out, in, c.param);
        return out;
      };
      // Contiguous, then a permuted view (taken on each device: moving makes a tensor contiguous).
      PRECIS_REQUIRE_CLOSE(unary(xg), unary(x), dt);
      const Tensor xp = x.permute({2, 0, 1}), xgp = xg.permute({2, 0, 1});
      REQUIRE_FALSE(xgp.is_contiguous());
      PRECIS_REQUIRE_CLOSE(unary(xgp), unary(xp), dt);
    }
  }
}

TEST_CASE("CUDA unary edge cases: relu passes NaN, sigmoid saturates, exp underflows to 0", "[cuda]") {
  PRECIS_REQUIRE_CUDA();
  const Tensor x = from_vector<float>({NAN, -1000.0f, 1000.0f, 0.0f}, {4}).to(kGpu);
  const std::vector<double> r = values(relu(x));
  CHECK(std::isnan(r[0]));
  CHECK(r[1] == 0.0);
  CHECK(r[2] == 1000.0);
  const std::vector<double> s = values(sigmoid(x));
  CHECK(s[1] == 0.0);
  CHECK(s[2] == 1.0);
  CHECK(values(exp(x))[1] == 0.0);
  CHECK(values(pow(x, 0.0))[0] == 1.0);  // x^0 = 1 even for NaN
  // abs(-0.0) is +0.0 (the CPU's and PyTorch's; 1/abs(x) is then +inf).
  CHECK_FALSE(std::signbit(values(abs(from_vector<float>({-0.0f}).to(kGpu)))[0]));
  // gelu' (erf form) at ±inf in fp32 is the CPU's 1 and 0, not inf·0; f64 gives NaN on both.
  for (DType dt : {DType::f32, DType::f64}) {
    INFO(dtype_name(dt));
    const Tensor inf = from_vector<double>({INFINITY, -INFINITY}).to(dt);
    const auto grad = [&](const Device& device) {
      const Tensor xi = inf.to(device).detach().requires_grad_();
      gelu(xi).backward(ones_like(xi));
      return values(xi.grad());
    };
    const std::vector<double> cpu = grad(Device::cpu()), gpu = grad(kGpu);
    if (dt == DType::f32) CHECK(cpu == std::vector<double>{1.0, 0.0});
    for (size_t i = 0; i < cpu.size(); ++i) CHECK((gpu[i] == cpu[i] || (std::isnan(gpu[i]) && std::isnan(cpu[i]))));
  }
}

TEST_CASE("CUDA relu and gelu backward kernels match the CPU kernels", "[cuda]") {
  PRECIS_REQUIRE_CUDA();
  for (DType dt : kFloating) {
    for (const auto& op_param : {std::pair{OpId::relu_backward, 0.0}, std::pair{OpId::gelu_backward, 0.0},
                                 std::pair{OpId::gelu_backward, 1.0}}) {
      // Named copies, not a structured binding: clang 14 (the sanitizer build) cannot capture one.
      const OpId op = op_param.first;
      const double param = op_param.second;
      INFO(op_name(op) << " param " << param << " " << dtype_name(dt));
      const Tensor x = input(dt, -5, 4, 7), g = input(dt, -2, 2, 8);
      const auto run = [&](const Tensor& gi, const Tensor& xi) {
        Tensor out = empty(xi.sizes(), {.dtype = dt, .device = xi.device()});
        kernel<kernels::BinaryKernel>(op, xi.device().type, dt)(out, gi, xi, param);
        return out;
      };
      PRECIS_REQUIRE_CLOSE(run(g.to(kGpu), x.to(kGpu)), run(g, x), dt);
      // A transposed gradient: the strided path.
      PRECIS_REQUIRE_CLOSE(run(g.to(kGpu).transpose(0, 2).contiguous().transpose(0, 2), x.to(kGpu)), run(g, x), dt);
    }
  }
}

// leaky_relu and the regression losses are composites of the kernels above: on the GPU they must
// give the CPU's values and gradients.
TEST_CASE("CUDA leaky_relu, l1_loss, smooth_l1_loss and huber_loss match the CPU, values and gradients", "[cuda]") {
  PRECIS_REQUIRE_CUDA();
  for (DType dt : kFloating) {
    INFO(dtype_name(dt));
    const Tensor a0 = input(dt, -3, 3, 21), b0 = input(dt, -3, 3, 22);
    const auto run = [&](Device device, int which) {
      Tensor a = a0.to(device).detach().requires_grad_(), b = b0.to(device).detach().requires_grad_();
      Tensor y;
      switch (which) {
        case 0: y = sum(leaky_relu(a, 0.2)); break;
        case 1: y = l1_loss(a, b); break;
        case 2: y = smooth_l1_loss(a, b, Reduction::sum, 0.5); break;
        default: y = huber_loss(a, b, Reduction::mean, 0.7); break;
      }
      y.backward();
      std::vector<Tensor> r{y.to(Device::cpu()), a.grad().to(Device::cpu())};
      if (which > 0) r.push_back(b.grad().to(Device::cpu()));
      return r;
    };
    for (int which = 0; which < 4; ++which) {
      INFO("op " << which << " (leaky_relu, l1, smooth_l1, huber)");
      const std::vector<Tensor> gpu = run(kGpu, which), cpu = run(Device::cpu(), which);
      for (size_t k = 0; k < gpu.size(); ++k) PRECIS_REQUIRE_CLOSE(gpu[k], cpu[k], dt);
    }
  }
}

// ---- where / masked_fill ----------------------------------------------------------------------

TEST_CASE("CUDA where and masked_fill match the CPU with broadcasting and strided operands", "[cuda]") {
  PRECIS_REQUIRE_CUDA();
  const Tensor cond = gt(uniform_input({3, 1, 4}, -1, 1, false, 1), 0.0);  // (3, 1, 4) bool
  const Tensor mask = gt(uniform_input({5, 1}, -1, 1, false, 2), 0.0);     // (5, 1) bool
  for (DType dt : kAll) {
    INFO(dtype_name(dt));
    const Tensor a_base = input(dt, -9, 9, 3, {4, 5});  // used transposed: (5, 4), non-contiguous
    const Tensor b = input(dt, -9, 9, 4, {1, 4});
    const Tensor expected = where(cond, a_base.t(), b);
    const Tensor got = where(cond.to(kGpu), a_base.to(kGpu).t(), b.to(kGpu));
    REQUIRE(got.device() == kGpu);
    require_same(got, expected);
    // Contiguous same-shape operands: the fast path.
    const Shape s = expected.sizes();
    require_same(where(cond.expand(s).contiguous().to(kGpu), expected.to(kGpu), a_base.t().expand(s).contiguous().to(kGpu)),
                 where(cond.expand(s), expected, a_base.t().expand(s)));
    const double v = dt == DType::boolean ? 1.0 : -2.5;
    require_same(masked_fill(a_base.to(kGpu).t(), mask.to(kGpu), v), masked_fill(a_base.t(), mask, v));
    require_same(masked_fill(a_base.to(kGpu), mask.t().to(kGpu), v), masked_fill(a_base, mask.t(), v));
  }
}

// ---- reductions --------------------------------------------------------------------------------

namespace {

// sum/mean over dims of x (taken as `view` on each device) on the GPU vs the CPU, run twice on
// the GPU to check the result is reproducible bit for bit.
template <typename ViewFn>
void check_reduction(bool is_mean, const Tensor& x, ViewFn view, const std::vector<int64_t>& dims, bool keepdim) {
  const Tensor xc = view(x), xg = view(x.to(kGpu));
  const Tensor expected = is_mean ? mean(xc, dims, keepdim) : sum(xc, dims, keepdim);
  const Tensor got = is_mean ? mean(xg, dims, keepdim) : sum(xg, dims, keepdim);
  const Tensor again = is_mean ? mean(xg, dims, keepdim) : sum(xg, dims, keepdim);
  REQUIRE(got.device() == kGpu);
  REQUIRE(got.dtype() == expected.dtype());
  PRECIS_REQUIRE_CLOSE(got, expected, x.dtype());
  REQUIRE(values(got) == values(again));
}

const auto kSameView = [](const Tensor& t) { return t; };
const auto kPermuted = [](const Tensor& t) { return t.permute({2, 0, 1}); };

}  // namespace

TEST_CASE("CUDA sum and mean match the CPU over any dims, for every dtype", "[cuda]") {
  PRECIS_REQUIRE_CUDA();
  const std::vector<std::vector<int64_t>> dim_sets = {{}, {0}, {1}, {2}, {0, 2}, {1, 2}, {0, 1, 2}};
  for (DType dt : kAll) {
    INFO(dtype_name(dt));
    const Tensor x = dt == DType::boolean ? gt(uniform_input({6, 7, 5}, -1, 1, false, 5), 0.0)
                                          : input(dt, -4, 4, 5, {6, 7, 5});
    for (const auto& dims : dim_sets) {
      INFO("dims of size " << dims.size() << (dims.empty() ? " (all)" : ""));
      check_reduction(false, x, kSameView, dims, false);
      check_reduction(false, x, kPermuted, dims, true);
      if (is_floating(dt)) {
        check_reduction(true, x, kSameView, dims, true);
        check_reduction(true, x, kPermuted, dims, false);
      }
    }
  }
}

TEST_CASE("CUDA sum and mean of large tensors: every launch geometry, deterministic", "[cuda]") {
  PRECIS_REQUIRE_CUDA();
  for (DType dt : {DType::f32, DType::f64}) {
    INFO(dtype_name(dt));
    // Positive values: the sum is as large as the sum of magnitudes, so a relative check is fair.
    const Tensor big = uniform_input({300001}, 0.5, 1.5, false, 11, dt);        // chunks per output > 1
    check_reduction(false, big, kSameView, {}, false);
    check_reduction(true, big, kSameView, {0}, false);
    const Tensor wide = uniform_input({700, 3000}, 0.5, 1.5, false, 12, dt);
    check_reduction(false, wide, kSameView, {1}, false);  // a block per row
    check_reduction(true, wide, kSameView, {0}, true);    // a block per column, strided
    const Tensor tall = uniform_input({20000, 40}, 0.5, 1.5, false, 13, dt);
    check_reduction(false, tall, kSameView, {1}, false);  // a thread per row
    check_reduction(true, tall, kSameView, {0}, false);   // few outputs, long strided columns
  }
}

TEST_CASE("CUDA max matches the CPU: values, first index of ties, NaN wins", "[cuda]") {
  PRECIS_REQUIRE_CUDA();
  for (DType dt : {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i32, DType::i64}) {
    INFO(dtype_name(dt));
    // Few distinct (small integer) values: many ties.
    Tensor x = input(DType::i64, -6, 6, 21, {5, 300, 7}).to(dt).clone();
    if (is_floating(dt)) {
      x.slice(0, 1, 2).slice(1, 40, 41).slice(2, 3, 4).fill_(kNaN);
      x.slice(0, 1, 2).slice(1, 90, 91).slice(2, 3, 4).fill_(kNaN);
    }
    const Tensor xg = x.to(kGpu);
    for (int64_t dim : {0, 1, 2}) {
      INFO("dim " << dim);
      const auto [v, i] = max(x, dim);
      const auto [vg, ig] = max(xg, dim);
      require_same(vg, v);
      require_same(ig, i);
      const auto [vp, ip] = max(x.permute({2, 0, 1}), dim, true);
      const auto [vgp, igp] = max(xg.permute({2, 0, 1}), dim, true);
      require_same(vgp, vp);
      require_same(igp, ip);
    }
    require_same(max(xg), max(x));
  }
  // A long all-elements max (several blocks and a finish pass), with the maximum repeated.
  Tensor big = uniform_input({500000}, -1, 1, false, 22, DType::f32).clone();
  big.slice(0, 123456, 123457).fill_(5.0);
  big.slice(0, 400000, 400001).fill_(5.0);
  const auto [v, i] = max(big.to(kGpu), 0);
  CHECK(v.item<double>() == 5.0);
  CHECK(i.item<int64_t>() == 123456);
  big.slice(0, 300000, 300001).fill_(kNaN);
  const auto [vn, in] = max(big.to(kGpu), 0);
  CHECK(std::isnan(vn.item<double>()));
  CHECK(in.item<int64_t>() == 300000);
}

// ---- unscale_grads ----------------------------------------------------------------------------

namespace {

struct UnscaleOut {
  Tensor found_inf, counts, sq_norms;
  std::vector<Tensor> grads;
};

UnscaleOut run_unscale(const std::vector<Tensor>& grads_in, Device dev, double inv, bool write, double found_before) {
  UnscaleOut r;
  for (const Tensor& g : grads_in) r.grads.push_back(g.to(dev).clone());
  const int64_t n = static_cast<int64_t>(grads_in.size());
  r.found_inf = full({}, found_before, {.device = dev});
  r.counts = zeros({n}, {.device = dev});
  r.sq_norms = zeros({n}, {.dtype = DType::f64, .device = dev});
  const Tensor inv_scale = full({}, inv, {.device = dev});
  kernel<kernels::UnscaleKernel>(OpId::unscale_grads, dev.type, DType::f32)(r.grads, inv_scale, write, r.found_inf,
                                                                            r.counts, r.sq_norms);
  return r;
}

}  // namespace

TEST_CASE("CUDA unscale_grads matches the CPU kernel: counts exactly, norms closely", "[cuda]") {
  PRECIS_REQUIRE_CUDA();
  // 60 gradients (more than one launch's tensor table) of every floating dtype and of sizes from
  // empty to several chunks; some with inf or NaN.
  std::vector<Tensor> grads;
  const int64_t sizes[] = {0, 1, 7, 1000, 65536, 65537, 200003};
  for (int i = 0; i < 60; ++i) {
    const DType dt = kFloating[i % 4];
    const int64_t n = sizes[i % 7];
    // Scaled by 2^10 (randn · 2^16 would overflow f16 before any unscaling).
    Tensor g = (randn_input({n}, false, 300 + i, DType::f32) * 1024.0).to(dt).clone();
    if (n > 0 && i % 5 == 0) g.slice(0, n / 2, n / 2 + 1).fill_(kInf);
    if (n > 1000 && i % 3 == 0) g.slice(0, n - 3, n).fill_(kNaN);
    grads.push_back(g);
  }
  const double inv = 1.0 / 1024.0;
  for (bool write : {false, true}) {
    INFO("write " << write);
    const UnscaleOut cpu = run_unscale(grads, Device::cpu(), inv, write, 0.0);
    const UnscaleOut gpu = run_unscale(grads, kGpu, inv, write, 0.0);
    require_same(gpu.counts, cpu.counts);
    CHECK(gpu.found_inf.item<double>() == 1.0);
    CHECK(cpu.found_inf.item<double>() == 1.0);
    PRECIS_REQUIRE_CLOSE(gpu.sq_norms, cpu.sq_norms, DType::f64);
    for (size_t i = 0; i < grads.size(); ++i) {
      INFO("gradient " << i << " " << grads[i].describe());
      require_same(gpu.grads[i], write ? cpu.grads[i] : grads[i]);  // same fp32 product and rounding
    }
    // Bit for bit reproducible. Compared as bits: the norms of the gradients holding a NaN are NaN,
    // and NaN == NaN is false.
    const UnscaleOut again = run_unscale(grads, kGpu, inv, write, 0.0);
    REQUIRE(bits(again.sq_norms) == bits(gpu.sq_norms));
  }
  // Finite gradients leave found_inf as it was (0 stays 0, 1 stays 1); f32 sq_norms work too.
  std::vector<Tensor> clean;
  for (int i = 0; i < 5; ++i) clean.push_back(randn_input({1000 * i + 3}, false, 400 + i, kFloating[i % 4]));
  CHECK(run_unscale(clean, kGpu, 0.5, true, 0.0).found_inf.item<double>() == 0.0);
  CHECK(run_unscale(clean, kGpu, 0.5, true, 1.0).found_inf.item<double>() == 1.0);
  for (double c : values(run_unscale(clean, kGpu, 0.5, false, 0.0).counts)) CHECK(c == 0.0);
  std::vector<Tensor> gpu_clean;
  for (const Tensor& g : clean) gpu_clean.push_back(g.to(kGpu));
  const Tensor found = zeros({}, {.device = kGpu}), counts = zeros({5}, {.device = kGpu});
  const Tensor sq32 = zeros({5}, {.device = kGpu});
  kernel<kernels::UnscaleKernel>(OpId::unscale_grads, DeviceType::cuda, DType::f32)(
      gpu_clean, full({}, 0.5, {.device = kGpu}), false, found, counts, sq32);
  const UnscaleOut cpu_clean = run_unscale(clean, Device::cpu(), 0.5, false, 0.0);
  PRECIS_REQUIRE_CLOSE(sq32, cpu_clean.sq_norms.to(DType::f32), DType::f32);
}

// ---- GradScaler end to end -----------------------------------------------------------------------

namespace {

struct ScalerTrace {
  std::vector<bool> applied;
  std::vector<amp::SkipReason> reasons;
  std::vector<double> scale_before, scale_after;
  std::vector<Tensor> weights;  // after each step, on the CPU
};

// Five steps of a linear least-squares model with SGD + momentum on `dev`; at step 2 one gradient
// element is set to inf after backward (an overflow with a finite loss).
ScalerTrace run_scaler(Device dev) {
  Tensor w = randn_input({4, 3}, false, 31, DType::f32).to(dev).requires_grad_();
  const Tensor x = randn_input({8, 4}, false, 32, DType::f32).to(dev);
  const Tensor y = randn_input({8, 3}, false, 33, DType::f32).to(dev);
  optim::SGD opt({w}, {.lr = 0.1, .momentum = 0.9});
  amp::GradScaler scaler({.init_scale = 1024.0, .growth_interval = 2});
  ScalerTrace trace;
  for (int step = 0; step < 5; ++step) {
    opt.zero_grad();
    const Tensor d = sub(matmul(x, w), y);
    const Tensor loss = mean(mul(d, d));
    scaler.scale(loss).backward();
    REQUIRE(w.grad().device() == dev);
    if (step == 2) w.grad().view({12}).slice(0, 5, 6).fill_(kInf);
    const Tensor before = w.detach().clone();
    const amp::StepResult r = scaler.step(opt);
    scaler.update();
    if (step == 2) require_same(w.detach(), before);  // the skipped step left the weights alone
    trace.applied.push_back(r.applied());
    trace.reasons.push_back(r.reason());
    trace.scale_before.push_back(r.scale_before());
    trace.scale_after.push_back(r.scale_after());
    trace.weights.push_back(w.detach().to(Device::cpu()).clone());
  }
  return trace;
}

}  // namespace

TEST_CASE("GradScaler on cuda:0 skips an overflowing step on the device, backs off, and matches the CPU run",
          "[cuda]") {
  PRECIS_REQUIRE_CUDA();
  const ScalerTrace gpu = run_scaler(kGpu);
  const ScalerTrace cpu = run_scaler(Device::cpu());
  // growth_interval 2: grow after steps 0-1, back off at the overflow, grow again after 3-4.
  CHECK(gpu.applied == std::vector<bool>{true, true, false, true, true});
  CHECK(gpu.reasons[2] == amp::SkipReason::overflow);
  CHECK(gpu.scale_before == std::vector<double>{1024, 1024, 2048, 1024, 1024});
  CHECK(gpu.scale_after == std::vector<double>{1024, 2048, 1024, 1024, 2048});
  CHECK(gpu.applied == cpu.applied);
  CHECK(gpu.scale_after == cpu.scale_after);
  for (size_t s = 0; s < gpu.weights.size(); ++s) {
    INFO("after step " << s);
    PRECIS_REQUIRE_CLOSE(gpu.weights[s], cpu.weights[s], DType::f32);
  }
}

TEST_CASE("GradScaler on cuda:0: unscale_ is one fused pass and clipping reuses its norms", "[cuda]") {
  PRECIS_REQUIRE_CUDA();
  Tensor w = zeros({4}, {.device = kGpu}).requires_grad_();
  optim::SGD opt({w}, {.lr = 1.0});
  amp::GradScaler scaler({.init_scale = 1024.0});
  scaler.scale(scalar_tensor(1.0, {.device = kGpu}));
  w.set_grad(from_vector<float>({3.0f, 4.0f, 0.0f, 0.0f}).to(kGpu) * 1024.0);
  scaler.unscale_(opt);
  CHECK(w.grad().to_vector<float>() == std::vector<float>{3.0f, 4.0f, 0.0f, 0.0f});
  scaler.unscale_(opt);  // idempotent within the step
  CHECK(w.grad().to_vector<float>() == std::vector<float>{3.0f, 4.0f, 0.0f, 0.0f});
  const Tensor norm = scaler.clip_grad_norm_(opt, 1.0);
  CHECK(norm.item<double>() == Approx(5.0));
  REQUIRE(w.grad().device() == kGpu);
  CHECK(w.grad().to_vector<float>()[0] == Approx(0.6f).epsilon(1e-5));
  const amp::StepResult r = scaler.step(opt);
  REQUIRE(r.grad_norm().has_value());
  CHECK(*r.grad_norm() == Approx(5.0));
  scaler.update();
  CHECK(w.to_vector<float>()[0] == Approx(-0.6f).epsilon(1e-5));
}
