// nongemm_probe: CPU time of the non-GEMM parts of a BERT-mini training step, at its shapes, one
// piece at a time (issue 16): the bias-gradient column sum of the decoder (2048 x 30522), the
// decoder's linear forward/backward and its two gradient GEMMs, cross_entropy (bf16 and f32
// logits), embedding forward+backward (30522 x 256 f32 table, 16 x 128 tokens) and gelu
// (2048 x 1024). Reports the best of N of process CPU time (getrusage: user + sys, all threads),
// which a loaded machine disturbs far less than wall time (with 2 threads it includes the pool's
// waits), and of wall time.
// Build (against a CPU-only Release build dir B of a source tree S):
//   g++ -O2 -std=c++20 -fopenmp -DPRECIS_HAS_ONEDNN=1 -IS -IB/precis-include nongemm_probe.cpp \
//       B/libprecis.a -ldnnl -lOpenCL -ldl -lgomp -lpthread -lmpi_cxx -lmpi -lz -lprotobuf -lisal \
//       -o nongemm_probe          (the libraries build/benchmarks/precis-bench links; see build.ninja)
// Run:   ./nongemm_probe sums|lin|ce|emb|gelu|all [threads]

#include <algorithm>
#include <chrono>
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

// Process CPU time in ms.
using probe::cpu_ms;
// Runs f once to warm up, then reps times; prints the best CPU time and the best wall time.
static void timeit(const char* name, int reps, const std::function<void()>& f) {
  f();
  double best = 1e30, best_wall = 1e30;
  for (int i = 0; i < reps; ++i) {
    const double t = cpu_ms();
    const auto w = std::chrono::steady_clock::now();
    f();
    best = std::min(best, cpu_ms() - t);
    const std::chrono::duration<double, std::milli> wall = std::chrono::steady_clock::now() - w;
    best_wall = std::min(best_wall, wall.count());
  }
  std::printf("%-40s %9.2f ms cpu %9.2f ms wall (best of %d)\n", name, best, best_wall, reps);
}
int main(int argc, char** argv) {
  std::string what = argc > 1 ? argv[1] : "all";
  int threads = argc > 2 ? std::atoi(argv[2]) : 1;
  set_num_threads(threads);
  omp_set_num_threads(threads);
  Generator gen(1);
  const int64_t R = 2048, V = 30522, D = 256;
  auto want = [&](const char* s) { return what == "all" || what == s; };
  if (what == "sums") {
    Tensor g = randn({R, V}, {}, &gen).to(DType::bf16);
    timeit("sum bf16 cols 2048x30522", 5, [&] { (void)sum(g, {0}); });
    Tensor gf = g.to(DType::f32);
    timeit("sum f32 cols 2048x30522", 5, [&] { (void)sum(gf, {0}); });
  }
  if (want("lin")) {
    Tensor g = randn({R, V}, {}, &gen).to(DType::bf16);
    Tensor w = randn({V, D}, {}, &gen).to(DType::bf16);
    Tensor x = randn({R, D}, {}, &gen).to(DType::bf16);
    timeit("sum bf16 cols 2048x30522", 3, [&] { (void)sum(g, {0}); });
    Tensor gf = g.to(DType::f32);
    timeit("sum f32 cols 2048x30522", 3, [&] { (void)sum(gf, {0}); });
    timeit("matmul g w (gx)", 2, [&] { (void)matmul(g, w); });
    timeit("matmul g^T x (gw)", 2, [&] { (void)matmul(g.t(), x); });
    Tensor xl = x.detach().requires_grad_(true), wl = w.detach().requires_grad_(true);
    Tensor bl = randn({V}, {}, &gen).to(DType::bf16).requires_grad_(true);
    timeit("linear backward whole (grad)", 2, [&] { (void)autograd::grad({linear(xl, wl, bl)}, {xl, wl, bl}, {g}); });
    timeit("linear forward", 2, [&] { (void)linear(x, w, bl.detach()); });
  }
  if (want("ce")) {
    for (DType dt : {DType::bf16, DType::f32}) {
      Tensor logits = randn({R, V}, {}, &gen).to(dt).requires_grad_(true);
      Tensor t = randint(0, V, {R}, {.dtype = DType::i64}, &gen);
      timeit(dt == DType::f32 ? "ce fwd f32" : "ce fwd bf16", 3, [&] { (void)cross_entropy(logits, t); });
      timeit(dt == DType::f32 ? "ce fwd+bwd f32" : "ce fwd+bwd bf16", 3,
             [&] { (void)autograd::grad({cross_entropy(logits, t)}, {logits}, {}); });
    }
  }
  if (want("emb")) {
    Tensor w = randn({V, D}, {}, &gen).requires_grad_(true);
    Tensor ids = randint(0, V, {16, 128}, {.dtype = DType::i64}, &gen);
    Tensor gy = randn({16, 128, D}, {}, &gen);
    timeit("embedding fwd", 3, [&] { (void)embedding(ids, w); });
    timeit("embedding fwd+bwd", 5, [&] { (void)autograd::grad({embedding(ids, w)}, {w}, {gy}); });
  }
  if (want("gelu")) {
    for (DType dt : {DType::bf16, DType::f32}) {
      Tensor x = randn({R, 1024}, {}, &gen).to(dt).requires_grad_(true);
      Tensor gy = randn({R, 1024}, {}, &gen).to(dt);
      timeit(dt == DType::f32 ? "gelu fwd f32" : "gelu fwd bf16", 5, [&] { (void)gelu(x); });
      timeit(dt == DType::f32 ? "gelu fwd+bwd f32" : "gelu fwd+bwd bf16", 5,
             [&] { (void)autograd::grad({gelu(x)}, {x}, {gy}); });
    }
  }
}
