// cefused_probe: CPU time of linear_cross_entropy forward + backward at BERT-mini's decoder shapes
// (M = 2048 rows, K = 256, V = 30522, bf16 or f32), and of its cross-entropy part alone (128-row
// chunks of logits, as the op makes them), with the fused cross_entropy_with_grad kernel ("fused")
// and with the two-kernel pair ("pair": the fused row's kernel unregistered, so linear_cross_entropy
// takes its fallback path, the one main at 256e379 always takes). Both in one process, alternated
// pair, fused, fused, pair, ... so a loaded machine disturbs both alike. Each figure is the best of
// `reps` of process CPU time (getrusage: user + sys, all threads).
// Build (against a CPU-only Release build dir B of a source tree S), as nongemm_probe.cpp:
//   g++ -O2 -std=c++20 -fopenmp -DPRECIS_HAS_ONEDNN=1 -IS -IB/precis-include cefused_probe.cpp \
//       B/libprecis.a -ldnnl -lOpenCL -ldl -lgomp -lpthread -lmpi_cxx -lmpi -lz -lprotobuf -lisal
// Run:   ./cefused_probe lce|ce bf16|f32 [threads] [rounds] [reps]

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <typeinfo>

#include "autograd/engine.h"
#include "core/rng.h"
#include "core/thread_pool.h"
#include "ops/functional.h"
#include "ops/contracts/kernels_loss.h"
#include "ops/op_table.h"
#include "tensor/factory.h"
#include <omp.h>
#include "benchmarks/tools/probe_time.h"
using namespace precis;


int main(int argc, char** argv) {
  const std::string what = argc > 1 ? argv[1] : "lce";
  const DType dt = argc > 2 && std::string(argv[2]) == "f32" ? DType::f32 : DType::bf16;
  const int threads = argc > 3 ? std::atoi(argv[3]) : 1;
  const int rounds = argc > 4 ? std::atoi(argv[4]) : 3;
  const int reps = argc > 5 ? std::atoi(argv[5]) : 3;
  set_num_threads(threads);
  omp_set_num_threads(threads);
  const int64_t M = 2048, K = 256, V = 30522, chunk = 128;
  Generator gen(1);
  const Tensor x = randn({M, K}, {}, &gen).to(dt).requires_grad_();
  const Tensor w = mul(randn({V, K}, {}, &gen), 0.05).to(dt).requires_grad_();
  const Tensor b = mul(randn({V}, {}, &gen), 0.05).to(dt).requires_grad_();
  const Tensor t = randint(0, V, {M}, {.dtype = DType::i64}, &gen);
  const Tensor logits = mul(randn({chunk, V}, {}, &gen), 3.0).to(dt);
  const DType acc = DType::f32;

  void* fused_fn = find_kernel(OpId::cross_entropy_with_grad, DeviceType::cpu, dt);
  if (fused_fn == nullptr) {
    std::fprintf(stderr, "no cross_entropy_with_grad kernel for this dtype\n");
    return 1;
  }
  auto use_fused = [&](bool on) {
    register_kernel(OpId::cross_entropy_with_grad, DeviceType::cpu, dt, on ? fused_fn : nullptr,
                    typeid(kernels::CrossEntropyWithGradKernel));
  };

  std::function<void(bool)> step;
  if (what == "lce") {
    // The op's generic path, where the choice between the two applies: without the backend's own
    // linear_cross_entropy kernel (f32 and bf16 since 2026-12-07; lce_probe.cpp times that one).
    register_kernel(OpId::linear_cross_entropy, DeviceType::cpu, dt, nullptr,
                    typeid(kernels::LinearCrossEntropyKernel));
    step = [&](bool) {
      const Tensor loss = linear_cross_entropy(x, w, b, t);
      (void)autograd::grad({loss}, {x, w, b});
    };
  } else {
    // The cross-entropy part of linear_cross_entropy over all M rows, chunk by chunk on one
    // chunk's logits (kept in cache, as the op's own loop keeps them).
    const Tensor loss_rows = empty({M}, {.dtype = acc}), weight_rows = empty({M}, {.dtype = acc}),
                 stats = empty({M, 2}, {.dtype = acc}), dlogits = empty({M, V}, {.dtype = dt});
    const Tensor grad_rows = full({1}, 1.0 / M, {.dtype = acc}).expand({chunk});
    step = [=](bool fused) {
      for (int64_t r0 = 0; r0 < M; r0 += chunk) {
        const Tensor tc = t.narrow(0, r0, chunk), st = stats.narrow(0, r0, chunk), dl = dlogits.narrow(0, r0, chunk);
        if (fused) {
          kernel<kernels::CrossEntropyWithGradKernel>(OpId::cross_entropy_with_grad, DeviceType::cpu, dt)(
              loss_rows.narrow(0, r0, chunk), weight_rows.narrow(0, r0, chunk), st, dl, logits, tc, Tensor(),
              grad_rows, -100, 0.0);
        } else {
          kernel<kernels::CrossEntropyKernel>(OpId::cross_entropy, DeviceType::cpu, dt)(
              loss_rows.narrow(0, r0, chunk), weight_rows.narrow(0, r0, chunk), st, logits, tc, Tensor(), -100, 0.0);
          kernel<kernels::CrossEntropyBackwardKernel>(OpId::cross_entropy_backward, DeviceType::cpu, dt)(
              dl, logits, st, tc, Tensor(), grad_rows, -100, 0.0);
        }
      }
    };
  }
  step(true);  // warm-up: allocations, oneDNN primitives
  step(false);
  std::printf("%s %s threads %d: best of %d CPU ms per round (pair, fused, fused, pair order)\n", what.c_str(),
              std::string(dtype_name(dt)).c_str(), threads, reps);
  for (int r = 0; r < rounds; ++r) {
    double pair = 1e30, fused = 1e30;
    for (bool f : {false, true, true, false}) {
      use_fused(f);
      const double ms = probe::best_cpu_ms(reps, [&] { step(f); });
      (f ? fused : pair) = std::min(f ? fused : pair, ms);
    }
    std::printf("round %d: pair %.2f fused %.2f ratio %.3f\n", r, pair, fused, fused / pair);
  }
  use_fused(true);
  return 0;
}
