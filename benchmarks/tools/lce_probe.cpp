// lce_probe: linear_cross_entropy forward + backward at BERT-mini's decoder shapes (M = 2048 rows,
// K = 256, V = 30522; bf16 or f32), through the backend's kernel ("kernel": ops/cpu/
// linear_cross_entropy.cpp, the op's automatic chunking) and through the op's generic path
// ("generic": the same kernel unregistered in this process — row chunks that keep the (M, V)
// logit gradient for backward's GEMMs). Alternated generic, kernel, kernel, generic per round;
// each figure is the best of `reps` calls, process CPU time (all threads) and wall time. To time
// another build's kernel, run the same binary with LD_LIBRARY_PATH at that build's libprecis.so.
// Build (against a CPU-only Release build dir B of a source tree S):
//   g++ -O2 -std=c++20 -fopenmp -DPRECIS_HAS_ONEDNN=1 -IS -IB/precis-include lce_probe.cpp \
//       B/libprecis.so -ldnnl -lgomp -o lce_probe
// Run:   OMP_WAIT_POLICY=passive LD_LIBRARY_PATH=B ./lce_probe bf16|f32 [threads] [rounds] [reps]

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <typeinfo>

#include "autograd/engine.h"
#include "benchmarks/tools/probe_time.h"
#include "core/rng.h"
#include "core/thread_pool.h"
#include "ops/contracts/kernels_loss.h"
#include "ops/functional.h"
#include "ops/op_table.h"
#include "tensor/factory.h"
using namespace precis;

int main(int argc, char** argv) {
  const DType dt = argc > 1 && std::string(argv[1]) == "f32" ? DType::f32 : DType::bf16;
  const int threads = argc > 2 ? std::atoi(argv[2]) : 1;
  const int rounds = argc > 3 ? std::atoi(argv[3]) : 3;
  const int reps = argc > 4 ? std::atoi(argv[4]) : 2;
  set_num_threads(threads);
  omp_set_num_threads(threads);
  const int64_t M = 2048, K = 256, V = 30522;
  Generator gen(1);
  const Tensor x = randn({M, K}, {}, &gen).to(dt).requires_grad_();
  const Tensor w = mul(randn({V, K}, {}, &gen), 0.05).to(dt).requires_grad_();
  const Tensor b = mul(randn({V}, {}, &gen), 0.05).to(dt).requires_grad_();
  const Tensor t = randint(0, V, {M}, {.dtype = DType::i64}, &gen);

  void* kernel_fn = find_kernel(OpId::linear_cross_entropy, DeviceType::cpu, dt);
  auto use_kernel = [&](bool on) {
    register_kernel(OpId::linear_cross_entropy, DeviceType::cpu, dt, on ? kernel_fn : nullptr,
                    typeid(kernels::LinearCrossEntropyKernel));
  };
  auto step = [&] {
    const Tensor loss = linear_cross_entropy(x, w, b, t);
    (void)autograd::grad({loss}, {x, w, b});
  };
  // Best CPU and wall ms of `reps` steps.
  auto measure = [&](double& cpu, double& wall) {
    for (int i = 0; i < reps; ++i) {
      const auto w0 = std::chrono::steady_clock::now();
      cpu = std::min(cpu, probe::best_cpu_ms(1, step));
      wall = std::min(wall, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - w0).count());
    }
  };
  for (bool k : {true, false}) {  // warm-up: allocations, oneDNN primitives
    use_kernel(k);
    step();
  }
  std::printf("lce %s threads %d (kernel %s): best of %d, CPU ms / wall ms (generic, kernel, kernel, generic)\n",
              std::string(dtype_name(dt)).c_str(), threads, kernel_fn != nullptr ? "registered" : "absent", reps);
  for (int r = 0; r < rounds; ++r) {
    double gc = 1e30, gw = 1e30, kc = 1e30, kw = 1e30;
    for (bool k : {false, true, true, false}) {
      if (k && kernel_fn == nullptr) continue;
      use_kernel(k);
      measure(k ? kc : gc, k ? kw : gw);
    }
    std::printf("round %d: generic %.1f / %.1f  kernel %.1f / %.1f\n", r, gc, gw, kc, kw);
  }
  use_kernel(true);
  return 0;
}
