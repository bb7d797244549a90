// The CPU sgd_step and adam_step kernels run their element loops as compile-time variants per
// configuration (ops/cpu/optim.cpp: sgd_block, adam_block) so that they vectorise; their contract
// is the element functions of ops/math/optim_math.h applied one element at a time with the flags as
// run-time values. These tests hold them to that bit for bit: every configuration flag, every
// parameter dtype (f16/bf16 with masters, also with f32 gradients), scaled and unscaled
// gradients, sizes around the vector width and the 512-element blocks and the parallel chunks,
// starts that are not vector-aligned, several tensors per call, first and later steps, 1 and 2
// threads. A variant that folded a flag wrongly or reordered an operation changes last bits here.
#include <catch2/catch.hpp>

#include <cstring>
#include <vector>

#include "core/thread_pool.h"
#include "ops/contracts/kernels_optim.h"
#include "ops/op_table.h"
#include "tensor/factory.h"
#include "tests/support/tensor_testing.h"

// The reference loop below must round like the kernel file, which forbids contraction.
#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

using namespace precis;
using namespace precis::kernels;
using precis::testing::randn_input;

namespace {

// 1, 7: below one vector; 37: vector + tail; 1031: two 512-element blocks + tail; 40003: several
// parallel chunks of 16384 (two threads split it), odd tail.
const int64_t kSizes[] = {1, 7, 37, 1031, 40003};

struct DTypePair {
  DType param, grad;
};
const DTypePair kPairs[] = {{DType::f32, DType::f32}, {DType::f64, DType::f64}, {DType::f16, DType::f16},
                            {DType::bf16, DType::bf16}, {DType::f16, DType::f32}, {DType::bf16, DType::f32}};

DType state_dtype(DType param) { return param == DType::f64 ? DType::f64 : DType::f32; }

/// A contiguous 1-D tensor of n elements starting one element into its storage (not aligned to a
/// vector), holding seeded normals times `scale` rounded to dtype.
Tensor unaligned(int64_t n, DType dtype, uint64_t seed, double scale = 1.0) {
  Tensor big = (randn_input({n + 1}, false, seed) * scale).to(dtype).contiguous();
  Tensor t = big.narrow(0, 1, n);
  REQUIRE(t.is_contiguous());
  return t;
}

template <typename C>
std::vector<C> as(const Tensor& t) {
  const std::vector<double> d = t.to(DType::f64).contiguous().to_vector<double>();
  return std::vector<C>(d.begin(), d.end());  // exact: t holds C-representable values
}

/// True when `t` (converted to f64, exact) equals `want` bit for bit; counts the mismatches.
template <typename C>
bool same_bits(const Tensor& t, const std::vector<C>& want, DType dtype) {
  const std::vector<double> got = t.to(DType::f64).contiguous().to_vector<double>();
  std::vector<double> w(want.begin(), want.end());
  // A low-precision parameter is its f32 master rounded (the reference holds the master).
  if (is_low_precision(dtype)) w = from_vector<double>(w).to(DType::f32).to(dtype).to(DType::f64).to_vector<double>();
  int64_t bad = 0;
  for (size_t k = 0; k < got.size(); ++k) bad += std::memcmp(&got[k], &w[k], sizeof(double)) != 0;
  if (bad) UNSCOPED_INFO(bad << " of " << got.size() << " elements differ, e.g. got " << got[0] << " want " << w[0]);
  return got.size() == w.size() && bad == 0;
}

/// One tensor's state on the reference side, in the compute type C.
template <typename C>
struct Ref {
  std::vector<C> p, buf, m, v, vmax;
};

/// The gradient the kernel uses: the stored gradient in C, times float(1 / scale) when scaled.
template <typename C>
std::vector<C> ref_grad(const Tensor& g, const float* scale) {
  std::vector<C> r = as<C>(g);
  if (scale) {
    const C inv = static_cast<C>(inverse_scale(*scale));
    for (C& x : r) x = x * inv;
  }
  return r;
}

template <typename C>
void check_sgd(const DTypePair& dt, const SgdHyper& h, bool scaled, int threads) {
  const float scale = 4.0f;
  std::vector<SgdParam> args;
  std::vector<Ref<C>> refs;
  uint64_t seed = 100;
  for (int64_t n : kSizes) {
    const Tensor p = unaligned(n, dt.param, seed++);
    const bool low = is_low_precision(dt.param);
    SgdParam a{p, Tensor(), low ? unaligned(n, DType::f32, 1).copy_(p.to(DType::f32)) : Tensor(), Tensor(), Tensor()};
    if (h.momentum != 0) {
      a.momentum_buffer = zeros({n}, {.dtype = state_dtype(dt.param)});
      a.step = zeros({});
    }
    Ref<C> r;
    r.p = as<C>(low ? a.master : p);
    r.buf.assign(static_cast<size_t>(n), C(0));
    refs.push_back(std::move(r));
    args.push_back(a);
  }
  const SgdScalars<C> s = make_sgd_scalars<C>(h);
  for (int step = 0; step < 3; ++step) {
    for (size_t i = 0; i < args.size(); ++i) {
      args[i].grad = unaligned(args[i].param.numel(), dt.grad, 500 + 10 * step + i, scaled ? scale : 1.0);
      const std::vector<C> g = ref_grad<C>(args[i].grad, scaled ? &scale : nullptr);
      Ref<C>& r = refs[i];
      for (size_t k = 0; k < g.size(); ++k)
        sgd_element<C>(r.p[k], g[k], h.momentum != 0 ? &r.buf[k] : nullptr, step == 0, s);
    }
    set_num_threads(threads);
    kernel<SgdStepKernel>(OpId::sgd_step, DeviceType::cpu, dt.param)(
        args, h, scaled ? scalar_tensor(scale, {.dtype = DType::f32}) : Tensor(), Tensor(), Tensor());
  }
  for (size_t i = 0; i < args.size(); ++i) {
    INFO("tensor of " << args[i].param.numel() << " elements");
    CHECK(same_bits<C>(args[i].param, refs[i].p, dt.param));
    if (args[i].master.defined()) CHECK(same_bits<C>(args[i].master, refs[i].p, DType::f32));
    if (h.momentum != 0) CHECK(same_bits<C>(args[i].momentum_buffer, refs[i].buf, state_dtype(dt.param)));
  }
}

template <typename C>
void check_adam(const DTypePair& dt, const AdamHyper& h, bool scaled, int threads) {
  const float scale = 4.0f;
  std::vector<AdamParam> args;
  std::vector<Ref<C>> refs;
  uint64_t seed = 200;
  const DType sd = state_dtype(dt.param);
  for (int64_t n : kSizes) {
    const Tensor p = unaligned(n, dt.param, seed++);
    const bool low = is_low_precision(dt.param);
    AdamParam a{p, Tensor(), low ? unaligned(n, DType::f32, 1).copy_(p.to(DType::f32)) : Tensor(),
                zeros({n}, {.dtype = sd}), zeros({n}, {.dtype = sd}),
                h.amsgrad ? zeros({n}, {.dtype = sd}) : Tensor(), zeros({})};
    Ref<C> r;
    r.p = as<C>(low ? a.master : p);
    r.m.assign(static_cast<size_t>(n), C(0));
    r.v = r.m;
    r.vmax = r.m;
    refs.push_back(std::move(r));
    args.push_back(a);
  }
  for (int step = 1; step <= 3; ++step) {
    const AdamScalars<C> s = make_adam_scalars<C>(h, static_cast<double>(step));
    for (size_t i = 0; i < args.size(); ++i) {
      args[i].grad = unaligned(args[i].param.numel(), dt.grad, 700 + 10 * step + i, scaled ? scale : 1.0);
      const std::vector<C> g = ref_grad<C>(args[i].grad, scaled ? &scale : nullptr);
      Ref<C>& r = refs[i];
      for (size_t k = 0; k < g.size(); ++k)
        adam_element<C>(r.p[k], g[k], r.m[k], r.v[k], h.amsgrad ? &r.vmax[k] : nullptr, s);
    }
    set_num_threads(threads);
    kernel<AdamStepKernel>(OpId::adam_step, DeviceType::cpu, dt.param)(
        args, h, scaled ? scalar_tensor(scale, {.dtype = DType::f32}) : Tensor(), Tensor(), Tensor());
  }
  for (size_t i = 0; i < args.size(); ++i) {
    INFO("tensor of " << args[i].param.numel() << " elements");
    CHECK(same_bits<C>(args[i].param, refs[i].p, dt.param));
    if (args[i].master.defined()) CHECK(same_bits<C>(args[i].master, refs[i].p, DType::f32));
    CHECK(same_bits<C>(args[i].exp_avg, refs[i].m, sd));
    CHECK(same_bits<C>(args[i].exp_avg_sq, refs[i].v, sd));
    if (h.amsgrad) CHECK(same_bits<C>(args[i].max_exp_avg_sq, refs[i].vmax, sd));
  }
}

/// Restores the thread count a test changed.
struct ThreadsGuard {
  int saved = get_num_threads();
  ~ThreadsGuard() { set_num_threads(saved); }
};

}  // namespace

TEST_CASE("sgd_step's vectorised variants equal the per-element formula bit for bit, every configuration",
          "[ops][optim_kernels]") {
  ThreadsGuard guard;
  // (momentum, dampening, nesterov): none; plain; dampened; Nesterov.
  const double kMomentum[][3] = {{0, 0, 0}, {0.9, 0, 0}, {0.9, 0.1, 0}, {0.9, 0, 1}};
  for (const DTypePair& dt : kPairs) {
    for (bool maximize : {false, true}) {
      for (double wd : {0.0, 0.01}) {
        for (const auto& mo : kMomentum) {
          for (bool scaled : {false, true}) {
            for (int threads : {1, 2}) {
              const SgdHyper h{.lr = 0.05, .momentum = mo[0], .dampening = mo[1], .weight_decay = wd,
                               .nesterov = mo[2] != 0, .maximize = maximize};
              INFO("param " << dtype_name(dt.param) << ", grad " << dtype_name(dt.grad) << ", maximize " << maximize
                            << ", weight_decay " << wd << ", momentum " << mo[0] << ", dampening " << mo[1]
                            << ", nesterov " << mo[2] << ", scaled " << scaled << ", threads " << threads);
              if (dt.param == DType::f64) check_sgd<double>(dt, h, scaled, threads);
              else check_sgd<float>(dt, h, scaled, threads);
            }
          }
        }
      }
    }
  }
}

TEST_CASE("adam_step's vectorised variants equal the per-element formula bit for bit, every configuration",
          "[ops][optim_kernels]") {
  ThreadsGuard guard;
  for (const DTypePair& dt : kPairs) {
    for (bool maximize : {false, true}) {
      for (double wd : {0.0, 0.05}) {
        for (bool decoupled : {false, true}) {
          for (bool amsgrad : {false, true}) {
            // beta1 0.3: lerp weight 0.7 takes the other of lerp's two forms.
            for (double beta1 : {0.9, 0.3}) {
              const bool scaled = amsgrad;  // both gradient paths, without doubling the matrix
              const int threads = decoupled ? 2 : 1;
              const AdamHyper h{.lr = 1e-2, .beta1 = beta1, .beta2 = 0.99, .eps = 1e-8, .weight_decay = wd,
                                .amsgrad = amsgrad, .decoupled_weight_decay = decoupled, .maximize = maximize};
              INFO("param " << dtype_name(dt.param) << ", grad " << dtype_name(dt.grad) << ", maximize " << maximize
                            << ", weight_decay " << wd << ", decoupled " << decoupled << ", amsgrad " << amsgrad
                            << ", beta1 " << beta1 << ", scaled " << scaled << ", threads " << threads);
              if (dt.param == DType::f64) check_adam<double>(dt, h, scaled, threads);
              else check_adam<float>(dt, h, scaled, threads);
            }
          }
        }
      }
    }
  }
}
