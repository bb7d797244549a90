#include "benchmarks/peak.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <stdexcept>
#include <span>
#include <unordered_map>

#include "benchmarks/bench.h"
#include "core/thread_pool.h"
#include "ops/functional.h"
#include "tensor/factory.h"

#ifdef PRECIS_HAS_ONEDNN
#include <oneapi/dnnl/dnnl.hpp>
#endif
#ifdef PRECIS_BENCH_HAS_OPENMP
#include <omp.h>
#endif

namespace precis::bench {
namespace {

constexpr int kMaxThreadCounts = 16;

// What the measuring process sends back (plain data: it crosses a pipe from the child).
struct PeakResult {
  int count = 0;
  int threads[kMaxThreadCounts] = {};
  double f32[kMaxThreadCounts] = {}, bf16[kMaxThreadCounts] = {};
  char error[256] = {};
};

// Best time over `reps` runs of fn after one warm-up, in seconds.
double best_seconds(const std::function<void()>& fn, int reps) {
  fn();
  double best = 0;
  for (int i = 0; i < reps; ++i) {
    const auto start = std::chrono::steady_clock::now();
    fn();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    best = i == 0 ? s : std::min(best, s);
  }
  return best;
}

#ifdef PRECIS_HAS_ONEDNN
struct alignas(4096) Page {
  uint8_t bytes[4096];
};
size_t pages_for(size_t bytes) { return (bytes + sizeof(Page) - 1) / sizeof(Page); }
std::span<uint8_t> as_bytes(std::vector<Page>& pages, size_t bytes) {
  return {reinterpret_cast<uint8_t*>(pages.data()), bytes};
}

// GFLOP/s of an n×n×n matmul primitive on dense row-major buffers of `dt` (bf16: fp32 accumulation,
// bf16 output, as precis's bf16 GEMM), created under the current OpenMP thread count.
double onednn_gflops(int64_t n, dnnl::memory::data_type dt, int reps) {
  using dnnl::memory;
  const dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  dnnl::stream stream(engine);
  const memory::desc md({n, n}, dt, memory::format_tag::ab);
  const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(md, md, md), engine);
  // oneDNN's reference kernels are no peak (and would take minutes at this size).
  if (std::string(pd.impl_info_str()).rfind("ref", 0) == 0) return 0;
  const dnnl::matmul primitive(pd);
  const size_t bytes = static_cast<size_t>(n * n) * (dt == memory::data_type::bf16 ? 2 : 4);
  // Page-aligned, as precis's allocator gives large tensors: from a plain std::vector (16-byte
  // aligned) oneDNN's bf16 kernels measured up to ~20 % slower at 1024³ and 2048³.
  std::vector<Page> a_pages(pages_for(bytes)), b_pages(pages_for(bytes)), c_pages(pages_for(bytes));
  std::span<uint8_t> a = as_bytes(a_pages, bytes), b = as_bytes(b_pages, bytes), c = as_bytes(c_pages, bytes);
  // Small finite values in either type: bf16 is the upper half of an f32 (0x3f80 = 1.0).
  for (size_t i = 0; i + 1 < bytes; i += 2) {
    const uint16_t v = static_cast<uint16_t>(0x3f00 + (i / 2) % 128);
    std::memcpy(&a[i], &v, 2);
    std::memcpy(&b[i], &v, 2);
  }
  std::unordered_map<int, memory> args{{DNNL_ARG_SRC, memory(md, engine, a.data())},
                                       {DNNL_ARG_WEIGHTS, memory(md, engine, b.data())},
                                       {DNNL_ARG_DST, memory(md, engine, c.data())}};
  const double s = best_seconds(
      [&] {
        primitive.execute(stream, args);
        stream.wait();
      },
      reps);
  return 2.0 * static_cast<double>(n) * n * n / s * 1e-9;
}
#endif

// The sizes the peak is the best of, with the repetitions each gets. oneDNN's bf16 kernels on AMX
// run much faster with their operands in L2 (512³: ~2.4 TFLOP/s on the 2-vCPU development VM)
// than at 2048³ (~1.2); the peak is the best the machine's GEMM reaches, so both count.
constexpr int kPeakSizes[][2] = {{512, 50}, {1024, 20}, {2048, 5}};

PeakResult measure(const std::vector<int>& threads) {
  PeakResult r;
  const int initial_threads = get_num_threads();
  try {
    for (int t : threads) {
      if (r.count == kMaxThreadCounts) break;
      set_num_threads(t);
#ifdef PRECIS_BENCH_HAS_OPENMP
      omp_set_num_threads(t);
#endif
      r.threads[r.count] = t;
#ifdef PRECIS_HAS_ONEDNN
      for (const auto& [n, reps] : kPeakSizes) {
        r.f32[r.count] = std::max(r.f32[r.count], onednn_gflops(n, dnnl::memory::data_type::f32, reps));
        try {
          r.bf16[r.count] = std::max(r.bf16[r.count], onednn_gflops(n, dnnl::memory::data_type::bf16, reps));
        } catch (const dnnl::error&) {
          // no bf16 GEMM on this CPU: no bf16 peak
        }
      }
#else
      for (const auto& [n, reps] : kPeakSizes) {
        for (DType dt : {DType::f32, DType::bf16}) {
          const Tensor a = randn({n, n}).to(dt), b = randn({n, n}).to(dt);
          const double s = best_seconds([&] { (void)matmul(a, b); }, reps);
          double& peak = (dt == DType::f32 ? r.f32 : r.bf16)[r.count];
          peak = std::max(peak, 2.0 * static_cast<double>(n) * n * n / s * 1e-9);
        }
      }
#endif
      ++r.count;
    }
  } catch (const std::exception& e) {
    std::snprintf(r.error, sizeof r.error, "%s", e.what());
  }
  set_num_threads(initial_threads);
  return r;
}

PeakResult measure_isolated(const std::vector<int>& threads) {
  if (process_threads() != 1) return measure(threads);
  return run_forked<PeakResult>("GEMM peak", [&] { return measure(threads); });
}

}  // namespace

double GemmPeaks::of(const std::string& dtype, int threads) const {
  const auto it = by_threads.find(threads);
  if (it == by_threads.end()) return 0;
  return dtype == "f32" ? it->second.f32 : dtype == "bf16" ? it->second.bf16 : 0;
}

GemmPeaks measure_gemm_peaks(const std::vector<int>& threads) {
  const PeakResult r = measure_isolated(threads);
  if (r.error[0] != '\0') throw std::runtime_error(std::string("GEMM peak: ") + r.error);
  GemmPeaks out;
  for (int i = 0; i < r.count; ++i) out.by_threads[r.threads[i]] = GemmPeak{r.f32[i], r.bf16[i]};
#ifdef PRECIS_HAS_ONEDNN
  out.method = "oneDNN matmul";
#else
  out.method = "precis::matmul (precis-bench built without oneDNN)";
#endif
  out.method += ", the best of 512³ (50 runs), 1024³ (20) and 2048³ (5)";
  return out;
}

}  // namespace precis::bench
