// The memory floor of benchmarks/results/membound-2026-12-02b.md (not built by CMake): STREAM-like
// copy, triad and an SGD-shaped pass (3 reads + 2 writes of f32, 20 B/element) over 11.2 M
// elements, 1 and 2 threads; g++ -O3 -mavx2 -mfma -pthread.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <thread>
#include <algorithm>
#include <time.h>
static double tcpu(){timespec t;clock_gettime(CLOCK_THREAD_CPUTIME_ID,&t);return t.tv_sec+t.tv_nsec*1e-9;}
using clk = std::chrono::steady_clock;
int main(int argc, char** argv) {
  const long n = 11200000;  // ~ model size
  float *a = (float*)aligned_alloc(64, n*4), *b = (float*)aligned_alloc(64, n*4), *c = (float*)aligned_alloc(64, n*4);
  for (long i = 0; i < n; ++i) { a[i] = 1; b[i] = 2; c[i] = 3; }
  for (int T : {1, 2}) {
    auto run = [&](auto body, double bytes, const char* name) {
      double best = 1e9;
      for (int r = 0; r < 15; ++r) {
        auto t0 = clk::now();
        std::vector<std::thread> th;
        for (int t = 0; t < T; ++t) th.emplace_back([&, t] { long lo = n * t / T, hi = n * (t + 1) / T; body(lo, hi); });
        for (auto& x : th) x.join();
        best = std::min(best, std::chrono::duration<double>(clk::now() - t0).count());
      }
      printf("threads %d %-6s best wall %.2f ms  %.1f GB/s", T, name, best * 1e3, bytes / best / 1e9);
      if (T == 1) { double bc = 1e9; for (int r = 0; r < 15; ++r) { double c0 = tcpu(); body(0, n); bc = std::min(bc, tcpu() - c0); } printf("  | cpu-time %.2f ms %.1f GB/s", bc*1e3, bytes/bc/1e9); }
      printf("\n");
    };
    run([&](long lo, long hi) { for (long i = lo; i < hi; ++i) a[i] = b[i]; }, 8.0 * n, "copy");
    run([&](long lo, long hi) { for (long i = lo; i < hi; ++i) a[i] = b[i] + 0.5f * c[i]; }, 12.0 * n, "triad");
    run([&](long lo, long hi) { for (long i = lo; i < hi; ++i) { float m = c[i] * 0.9f + b[i]; c[i] = m; a[i] -= 0.01f * m; } }, 20.0 * n, "sgd");
  }
  printf("%g\n", a[5] + c[7]);
}
