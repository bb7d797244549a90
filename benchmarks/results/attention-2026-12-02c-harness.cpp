// Harness of benchmarks/results/attention-2026-12-02c.md (not built by CMake): forward + backward
// of scaled_dot_product_attention at BERT-mini's shape, q, k, v (16, 4, 128, 64) bf16 leaves under
// a bf16 autocast region, dropout 0.1, with the fused score pass (ops/attention_softmax.h) on or
// off, or (mode "matmuls") only its two batched matmuls, forward and backward, with the scores
// themselves as the weights: what the fused and composed runs spend outside the score pass; or
// (mode "pass") the fused score pass alone on (16, 4, 128, 128) bf16 scores.
// Prints the process CPU time and wall time of the timed iterations' min and median (ms).
// Built against a build dir's libprecis.a with the link line of precis-bench (build.ninja).
// usage: harness fused|composed|matmuls|pass bool|additive|none THREADS REPS
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <time.h>
#include <vector>

#include "amp/autocast.h"
#include "core/rng.h"
#include "core/thread_pool.h"
#include "ops/attention_softmax.h"
#include "ops/functional.h"
#include "tensor/factory.h"

using namespace precis;
static double cpu() { timespec t; clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
static double wall() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

int main(int argc, char** argv) {
  if (argc < 5) { std::fprintf(stderr, "usage: %s fused|composed|matmuls|pass bool|additive|none THREADS REPS\n", argv[0]); return 2; }
  const std::string mode = argv[1];
  const bool fused = mode == "fused";
  const std::string mask_kind = argv[2];
  const int threads = atoi(argv[3]), reps = atoi(argv[4]);
  set_num_threads(threads);
  detail::set_fused_kernels(fused);
  const int64_t B = 16, H = 4, L = 128, E = 64;
  Generator gen(6);
  auto leaf = [&] { Tensor t = randn({B, H, L, E}, {}, &gen).to(DType::bf16); t.requires_grad_(true); return t; };
  Tensor q = leaf(), k = leaf(), v = leaf();
  const Tensor gy = randn({B, H, L, E}, {}, &gen).to(DType::bf16);
  // BERT's key-padding mask (B, 1, 1, L): sample b has its last 4·(b % 8) positions padded.
  std::vector<int64_t> keep(B * L);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t l = 0; l < L; ++l) keep[b * L + l] = l < L - 4 * (b % 8);
  const Tensor keep_t = ne(from_vector<int64_t>(keep, {B, 1, 1, L}), Scalar(0));
  Tensor mask;
  if (mask_kind == "bool") mask = keep_t;
  if (mask_kind == "additive") mask = mul(sub(keep_t.to(DType::f32), 1.0), 10000.0);  // 0 or −10000
  // Mode "pass": the fused score pass alone on (16, 4, 128, 128) bf16 scores.
  Tensor scores = randn({B, H, L, L}, {}, &gen).to(DType::bf16);
  scores.requires_grad_(true);
  const Tensor gp = randn({B, H, L, L}, {}, &gen).to(DType::bf16);
  std::vector<double> cpus, walls;
  for (int r = 0; r < reps + 3; ++r) {
    for (Tensor* t : {&q, &k, &v, &scores}) t->set_grad(Tensor());
    const double c0 = cpu(), w0 = wall();
    {
      Tensor y;
      {
        amp::Autocast ac(DType::bf16);
        if (mode == "matmuls") y = matmul(matmul(q, k.transpose(-2, -1)), v);
        else if (mode == "pass") y = attention_softmax(scores, mask, false, 0.125, 0.1);
        else y = scaled_dot_product_attention(q, k, v, mask, 0.1);
      }
      y.backward(mode == "pass" ? gp : gy);
    }
    const double c1 = cpu(), w1 = wall();
    if (r >= 3) { cpus.push_back((c1 - c0) * 1e3); walls.push_back((w1 - w0) * 1e3); }
  }
  std::sort(cpus.begin(), cpus.end());
  std::sort(walls.begin(), walls.end());
  std::printf("%s %s threads=%d cpu_min_ms=%.3f cpu_med_ms=%.3f wall_min_ms=%.3f wall_med_ms=%.3f checksum=%.6f\n",
              argv[1], argv[2], threads, cpus.front(), cpus[cpus.size() / 2], walls.front(), walls[walls.size() / 2],
              sum(abs((mode == "pass" ? scores : q).grad().to(DType::f64))).item<double>());
  return 0;
}
