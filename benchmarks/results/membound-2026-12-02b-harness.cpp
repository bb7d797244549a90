// Harness of benchmarks/results/membound-2026-12-02b.md (not built by CMake): one op over the
// BERT-mini parameter shapes (11.1 M f32 elements, 69 tensors), CPU time and wall, min over reps.
// Built against a build dir's libprecis.a with the link line of precis-bench (build.ninja).
// usage: harness MODE THREADS REPS [SCALE]; MODE: sgd | sgd_wd | adam | tobf16 | tof32 | add (SCALE shrinks
// the 30522-row embedding, e.g. 0.1 under callgrind).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <time.h>
#include <vector>
#include "core/rng.h"
#include "core/thread_pool.h"
#include "ops/functional.h"
#include "optim/sgd.h"
#include "optim/adam.h"
#include "tensor/factory.h"
using namespace precis;
static double cpu() { timespec t; clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
static double wall() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }
int main(int argc, char** argv) {
  std::string mode = argv[1];
  int threads = atoi(argv[2]), reps = atoi(argv[3]);
  double scale = argc > 4 ? atof(argv[4]) : 1.0;
  set_num_threads(threads);
  constexpr int64_t H = 256, I = 1024;
  std::vector<Shape> s = {{(int64_t)(30522 * scale), H}, {512, H}, {2, H}, {H}, {H}};
  for (int l = 0; l < 4; ++l) {
    for (int p = 0; p < 4; ++p) { s.push_back({H, H}); s.push_back({H}); }
    s.push_back({H}); s.push_back({H}); s.push_back({I, H}); s.push_back({I}); s.push_back({H, I});
    s.push_back({H}); s.push_back({H}); s.push_back({H});
  }
  Generator gen(3);
  std::vector<Tensor> params, lows;
  int64_t n = 0;
  for (auto& sh : s) {
    Tensor p = (randn(sh, {}, &gen) * 0.02).requires_grad_();
    p.set_grad(randn(sh, {}, &gen) * 1e-3);
    params.push_back(p); n += p.numel();
    lows.push_back(p.detach().to(DType::bf16));
  }
  optim::SGD opt(params, optim::SGDOptions{.lr = 1e-6, .momentum = 0.9, .weight_decay = mode == "sgd_wd" ? 1e-4 : 0.0});
  optim::Adam adam(params, optim::AdamOptions{.lr = 1e-6});
  double bc = 1e9, bw = 1e9;
  for (int r = 0; r < reps + 1; ++r) {
    double c0 = cpu(), w0 = wall();
    if (mode == "sgd" || mode == "sgd_wd") opt.step();
    else if (mode == "adam") adam.step();
    else if (mode == "tobf16") for (auto& p : params) { Tensor y = p.detach().to(DType::bf16); }
    else if (mode == "tof32") for (auto& p : lows) { Tensor y = p.to(DType::f32); }
    else if (mode == "add") for (auto& p : params) { Tensor g = p.grad(); Tensor y = add(g, g); }
    double c = cpu() - c0, w = wall() - w0;
    if (r > 0) { bc = std::min(bc, c); bw = std::min(bw, w); }
  }
  printf("%s threads=%d numel=%lld tensors=%zu  min cpu %.2f ms  min wall %.2f ms\n", mode.c_str(), threads,
         (long long)n, s.size(), bc * 1e3, bw * 1e3);
}
