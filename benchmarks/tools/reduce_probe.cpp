// reduce_probe: CPU and wall time of the memory/exp-bound kernels of a BERT-mini step (issue 16):
// sum over leading dims (linear's bias gradient, (2048, 30522) and (2048, 1024)), other reduction
// shapes that must not get slower (full, last-dim, middle-dim), and cross_entropy's forward and
// backward kernels at (2048, 30522) with bf16 / f32 logits (the unfused path: the kernels called
// directly on preallocated outputs, so only the kernels are timed). Each figure is the best of
// `reps` of process CPU time (getrusage: user + sys, all threads) and of wall time.
// To compare two builds, link this file against each libprecis.a and alternate the binaries
// (A B B A ...); the kernels are in the library, so one source serves both.
// Build (against a CPU-only Release build dir B of a source tree S), as nongemm_probe.cpp:
//   g++ -O2 -std=c++20 -fopenmp -DPRECIS_HAS_ONEDNN=1 -IS -IB/precis-include reduce_probe.cpp \
//       B/libprecis.a -ldnnl -lOpenCL -ldl -lgomp -lpthread -lmpi_cxx -lmpi -lz -lprotobuf -lisal
// Run:   ./reduce_probe sums|ce|all [threads] [reps]

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>

#include "core/rng.h"
#include "core/thread_pool.h"
#include "ops/functional.h"
#include "ops/contracts/kernels.h"
#include "ops/contracts/kernels_loss.h"
#include "ops/op_table.h"
#include "tensor/factory.h"
#include <omp.h>
#include "benchmarks/tools/probe_time.h"
using namespace precis;

using probe::cpu_ms;
static long minor_faults() {
  rusage r;
  getrusage(RUSAGE_SELF, &r);
  return r.ru_minflt;
}
static int g_reps = 7;
static void timeit(const std::string& name, const std::function<void()>& f) {
  f();
  const long faults0 = minor_faults();
  double best = 1e30, best_wall = 1e30;
  for (int i = 0; i < g_reps; ++i) {
    const double t = cpu_ms();
    const auto w = std::chrono::steady_clock::now();
    f();
    best = std::min(best, cpu_ms() - t);
    const std::chrono::duration<double, std::milli> wall = std::chrono::steady_clock::now() - w;
    best_wall = std::min(best_wall, wall.count());
  }
  // Page faults per timed call: a kernel that allocates (and first touches) fresh memory each
  // call pays the kernel's page clearing too.
  const double faults = static_cast<double>(minor_faults() - faults0) / g_reps;
  std::printf("%-34s %8.3f ms cpu %8.3f ms wall %8.0f faults\n", name.c_str(), best, best_wall, faults);
}

int main(int argc, char** argv) {
  const std::string what = argc > 1 ? argv[1] : "all";
  const int threads = argc > 2 ? std::atoi(argv[2]) : 2;
  g_reps = argc > 3 ? std::atoi(argv[3]) : 7;
  set_num_threads(threads);
  omp_set_num_threads(threads);
  Generator gen(1);
  const int64_t R = 2048, V = 30522;
  if (what == "sums" || what == "all") {
    for (DType dt : {DType::bf16, DType::f32}) {
      const std::string d = dt == DType::f32 ? "f32 " : "bf16 ";
      const Tensor g = randn({R, V}, {}, &gen).to(dt);
      // Into a preallocated output through the kernel, as sum() does after its checks.
      const Tensor out = empty({1, V}, {.dtype = dt});
      auto ksum = kernel<kernels::ReduceKernel>(OpId::sum, DeviceType::cpu, dt);
      timeit(d + "sum{0} 2048x30522", [&] { ksum(out, g, {0}); });
      const Tensor g2 = randn({R, 1024}, {}, &gen).to(dt);
      const Tensor out2 = empty({1, 1024}, {.dtype = dt});
      timeit(d + "sum{0} 2048x1024", [&] { ksum(out2, g2, {0}); });
      const Tensor g3 = randn({R, 256}, {}, &gen).to(dt);
      const Tensor out3 = empty({1, 256}, {.dtype = dt});
      timeit(d + "sum{0} 2048x256", [&] { ksum(out3, g3, {0}); });
      const Tensor o4 = empty({1, 1}, {.dtype = dt});
      timeit(d + "sum{} 2048x30522", [&] { ksum(o4, g, {0, 1}); });
      const Tensor o5 = empty({R, 1}, {.dtype = dt});
      timeit(d + "sum{1} 2048x30522", [&] { ksum(o5, g, {1}); });
      const Tensor g6 = randn({16, 128, 1024}, {}, &gen).to(dt);
      const Tensor o6 = empty({16, 1, 1024}, {.dtype = dt});
      timeit(d + "sum{1} 16x128x1024", [&] { ksum(o6, g6, {1}); });
      const Tensor o7 = empty({1, 1, 1024}, {.dtype = dt});
      timeit(d + "sum{0,1} 16x128x1024", [&] { ksum(o7, g6, {0, 1}); });
      const Tensor g8 = randn({64, 512, 64}, {}, &gen).to(dt);
      const Tensor o8 = empty({64, 1, 64}, {.dtype = dt});
      timeit(d + "sum{1} 64x512x64", [&] { ksum(o8, g8, {1}); });
      const Tensor o9 = empty({1, 1024}, {.dtype = dt});
      timeit(d + "sum{0} 2048x1024 (.t() of 1024x2048)", [&] { ksum(o9, g2.t().contiguous().t(), {0}); });
    }
  }
  if (what == "ce" || what == "all") {
    for (DType dt : {DType::bf16, DType::f32}) {
      const std::string d = dt == DType::f32 ? "f32 " : "bf16 ";
      const Tensor x = mul(randn({R, V}, {}, &gen), 3.0).to(dt);
      const Tensor t = randint(0, V, {R}, {.dtype = DType::i64}, &gen);
      const Tensor loss_rows = empty({R}), weight_rows = empty({R}), stats = empty({R, 2});
      const Tensor gx = empty({R, V}, {.dtype = dt});
      const Tensor grad_rows = full({1}, 1.0 / R).expand({R});
      auto fwd = kernel<kernels::CrossEntropyKernel>(OpId::cross_entropy, DeviceType::cpu, dt);
      auto bwd = kernel<kernels::CrossEntropyBackwardKernel>(OpId::cross_entropy_backward, DeviceType::cpu, dt);
      timeit(d + "ce fwd 2048x30522", [&] { fwd(loss_rows, weight_rows, stats, x, t, Tensor(), -100, 0.0); });
      timeit(d + "ce bwd 2048x30522", [&] { bwd(gx, x, stats, t, Tensor(), grad_rows, -100, 0.0); });
      timeit(d + "ce fwd ls0.1 2048x30522", [&] { fwd(loss_rows, weight_rows, stats, x, t, Tensor(), -100, 0.1); });
    }
  }
  return 0;
}
