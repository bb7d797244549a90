// bn_probe: the batch_norm CPU kernels alone, channels-last or NCHW (no autograd, no allocation in
// the timed loop), at the ResNet-18 CIFAR b64 shapes, next to a STREAM-like copy/triad at the same
// thread count, so the kernels' times can be read against this machine's memory bandwidth.
// Build (from the repo root, after building libprecis.a in build/):
//   g++ -O2 -std=c++20 -I. benchmarks/tools/bn_probe.cpp build/libprecis.a -ldnnl -lz -fopenmp \
//       -lpthread -o build/bn_probe
// Run:   ./build/bn_probe [bf16|f32|f16|f64] [reps] [threads] [shape: all|64x32|128x16|256x8|512x4] [cl|nchw]
// With 1 thread, times are the thread's CPU time. Prints per shape: ms per forward (training) and per backward, and the GB/s each achieves
// counting the bytes the two passes must move (forward: x twice + out; backward: x, g twice + dx).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <string>
#include <thread>
#include <vector>

#include "core/thread_pool.h"
#include "ops/contracts/kernels_norm.h"
#include "ops/op_table.h"
#include "tensor/factory.h"

using namespace precis;

namespace {

// Wall-clock seconds; with one thread (argument 3 = 1) the calling thread's CPU time instead, which
// leaves out the time the scheduler gives other processes on a shared machine.
bool g_cpu_clock = false;
double now() {
  if (g_cpu_clock) {
    timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Best-of-reps GB/s of a copy (a -> b) and a triad (a = b + s·c) over n floats per array on
// `threads` threads (best-of, so that a shared machine's preemptions drop out).
void stream(int threads, int64_t n, int reps) {
  std::vector<float> a(n, 1.0f), b(n, 2.0f), c(n, 3.0f);
  auto run = [&](auto body) {
    double best = 1e30;
    for (int r = 0; r < reps; ++r) {
      const double t0 = now();
      std::vector<std::thread> pool;
      for (int t = 0; t < threads; ++t)
        pool.emplace_back([&, t] { body(t * n / threads, (t + 1) * n / threads); });
      for (auto& th : pool) th.join();
      best = std::min(best, now() - t0);
    }
    return best;
  };
  const double tc = run([&](int64_t lo, int64_t hi) { std::memcpy(b.data() + lo, a.data() + lo, (hi - lo) * 4); });
  const double tt = run([&](int64_t lo, int64_t hi) {
    float* pa = a.data();
    const float *pb = b.data(), *pc = c.data();
    for (int64_t i = lo; i < hi; ++i) pa[i] = pb[i] + 0.5f * pc[i];
  });
  // copy moves 2 arrays (3 with the write-allocate read), triad 3 (4).
  std::printf("stream %d threads, %lld MiB per array: copy %.1f GB/s (2 arrays counted), triad %.1f GB/s (3 arrays counted)\n", threads,
              static_cast<long long>(n * 4 >> 20),
              2.0 * n * 4 / tc / 1e9, 3.0 * n * 4 / tt / 1e9);
}

}  // namespace

int main(int argc, char** argv) {
  const std::string dt_name = argc > 1 ? argv[1] : "bf16";
  const int reps = argc > 2 ? std::atoi(argv[2]) : 20;
  const int threads = argc > 3 ? std::atoi(argv[3]) : 2;
  const std::string only = argc > 4 ? argv[4] : "all";
  const bool nchw = argc > 5 && std::string(argv[5]) == "nchw";
  set_num_threads(threads);
  g_cpu_clock = threads == 1;
  const DType dt = dt_name == "f32" ? DType::f32 : dt_name == "f16" ? DType::f16 : dt_name == "f64" ? DType::f64 : DType::bf16;
  const DType acc = dt == DType::f64 ? DType::f64 : DType::f32;
  const size_t esz = dt == DType::f64 ? 8 : dt == DType::f32 ? 4 : 2;
  if (only == "all" && reps > 1 && !g_cpu_clock) {
    stream(threads, int64_t(1) << 21, 4 * reps);  // 8 MiB: the largest ResNet activation, cache-resident
    stream(threads, int64_t(1) << 26, 5);         // 256 MiB: three arrays exceed the 480 MiB L3
  }
  const int64_t N = 64;
  const std::vector<std::pair<int64_t, int64_t>> shapes{{64, 32}, {128, 16}, {256, 8}, {512, 4}};
  auto fwd = kernel<kernels::BatchNormKernel>(OpId::batch_norm, DeviceType::cpu, dt);
  auto bwd = kernel<kernels::BatchNormBackwardKernel>(OpId::batch_norm_backward, DeviceType::cpu, dt);
  double tot_f = 0, tot_b = 0;
  for (const auto& [C, hw] : shapes) {
    const std::string name = std::to_string(C) + "x" + std::to_string(hw);
    if (only != "all" && only != name) continue;
    const int64_t S = hw * hw;
    Generator gen(1);
    // (N, S, C) contiguous seen as (N, C, S): the kernels' channels-last rows; or (N, C, S) itself.
    auto rows = [&](const Tensor& t) { return nchw ? t : t.permute({0, 2, 1}); };
    const Shape shape = nchw ? Shape{N, C, S} : Shape{N, S, C};
    const Tensor x = rows(randn(shape, {}, &gen).to(dt));
    const Tensor g = rows(randn(shape, {}, &gen).to(dt));
    const Tensor out = rows(empty(shape, {.dtype = dt}));
    const Tensor dx = rows(empty(shape, {.dtype = dt}));
    const Tensor w = ones({C}, {.dtype = acc}), b = zeros({C}, {.dtype = acc});
    const Tensor rm = zeros({C}, {.dtype = acc}), rv = ones({C}, {.dtype = acc});
    const Tensor sm = empty({C}, {.dtype = acc}), sr = empty({C}, {.dtype = acc});
    const Tensor dw = empty({C}, {.dtype = acc}), db = empty({C}, {.dtype = acc});
    double bf = 1e30, bb = 1e30;
    for (int r = 0; r < reps; ++r) {
      double t0 = now();
      fwd(out, sm, sr, x, w, b, rm, rv, true, 0.1, 1e-5);
      bf = std::min(bf, now() - t0);
      t0 = now();
      bwd(dx, dw, db, g, x, w, sm, sr, true);
      bb = std::min(bb, now() - t0);
    }
    const double elems = double(N) * C * S;
    std::printf("%s %s: fwd %.3f ms (%.1f GB/s at 3 passes), bwd %.3f ms (%.1f GB/s at 5 passes)\n", dt_name.c_str(),
                name.c_str(), bf * 1e3, 3 * elems * esz / bf / 1e9, bb * 1e3, 5 * elems * esz / bb / 1e9);
    tot_f += bf * 5;
    tot_b += bb * 5;
  }
  std::printf("%s ResNet-18 step (5 calls per shape): fwd %.2f ms, bwd %.2f ms\n", dt_name.c_str(), tot_f * 1e3,
              tot_b * 1e3);
}
