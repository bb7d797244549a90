// dropout_add_probe: CPU time of BERT-mini's residual epilogue, dropout_add(x, residual) against
// the pair add(dropout(x), residual) it replaces, at (2048, 256) (batch 16 × 128 tokens, hidden
// 256), p = 0.1: x bf16 with an fp32 residual (bf16 autocast) or both f32. "step" times forward +
// backward (autograd::grad for both operands from one output gradient), "fwd" the forward alone.
// Both in one process, alternated pair, fused, fused, pair, ... so a loaded machine disturbs both
// alike; each figure is the best of `reps` process CPU times (getrusage: user + sys, all threads)
// of `iters` calls.
// Build (against a CPU-only Release build dir B of a source tree S), as cefused_probe.cpp:
//   g++ -O2 -std=c++20 -fopenmp -DPRECIS_HAS_ONEDNN=1 -IS -IB/precis-include dropout_add_probe.cpp \
//       B/libprecis.a -ldnnl -lOpenCL -ldl -lgomp -lpthread -lmpi_cxx -lmpi -lz -lprotobuf -lisal
// Run:   ./dropout_add_probe step|fwd bf16|f32 [threads] [rounds] [reps] [iters]

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>

#include "autograd/engine.h"
#include "core/rng.h"
#include "core/thread_pool.h"
#include "ops/functional.h"
#include "tensor/factory.h"
#include <omp.h>
#include "benchmarks/tools/probe_time.h"
using namespace precis;


int main(int argc, char** argv) {
  const std::string what = argc > 1 ? argv[1] : "step";
  const DType xdt = argc > 2 && std::string(argv[2]) == "f32" ? DType::f32 : DType::bf16;
  const int threads = argc > 3 ? std::atoi(argv[3]) : 2;
  const int rounds = argc > 4 ? std::atoi(argv[4]) : 5;
  const int reps = argc > 5 ? std::atoi(argv[5]) : 5;
  const int iters = argc > 6 ? std::atoi(argv[6]) : 20;
  set_num_threads(threads);
  omp_set_num_threads(threads);
  const int64_t M = 2048, H = 256;
  const double p = 0.1;
  Generator init(1), gen(2);
  const Tensor x = randn({M, H}, {}, &init).to(xdt).requires_grad_(what == "step");
  const Tensor r = randn({M, H}, {}, &init).requires_grad_(what == "step");
  const Tensor gy = randn({M, H}, {}, &init);  // the sum's dtype: f32 in both cases

  auto step = [&](bool fused) {
    for (int i = 0; i < iters; ++i) {
      const Tensor y = fused ? dropout_add(x, r, p, true, &gen) : add(dropout(x, p, true, &gen), r);
      if (what == "step") (void)autograd::grad({y}, {x, r}, {gy});
    }
  };
  step(true);  // warm-up: allocations
  step(false);
  std::printf("%s x %s + residual f32 (%lld, %lld), p %.1f, threads %d: best of %d CPU ms per %d calls\n",
              what.c_str(), std::string(dtype_name(xdt)).c_str(), static_cast<long long>(M),
              static_cast<long long>(H), p, threads, reps, iters);
  for (int k = 0; k < rounds; ++k) {
    double pair = 1e30, fused = 1e30;
    for (bool f : {false, true, true, false}) {
      const double ms = probe::best_cpu_ms(reps, [&] { step(f); });
      (f ? fused : pair) = std::min(f ? fused : pair, ms);
    }
    std::printf("round %d: pair %.2f fused %.2f ratio %.3f\n", k, pair, fused, fused / pair);
  }
  return 0;
}
