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
#include "ops/cpu/onednn_compat.h"
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
// A page-aligned buffer of small finite values in either type (bf16 is the upper half of an f32:
// 0x3f80 = 1.0), as precis's allocator gives large tensors: from a plain std::vector (16-byte
// aligned) oneDNN's bf16 matmul measured up to ~20 % slower at 1024³ and 2048³.
class Buffer {
 public:
  explicit Buffer(size_t bytes) : pages_((bytes + sizeof(Page) - 1) / sizeof(Page)) {
    uint8_t* p = data();
    for (size_t i = 0; i + 1 < bytes; i += 2) {
      const uint16_t v = static_cast<uint16_t>(0x3f00 + (i / 2) % 128);
      std::memcpy(p + i, &v, 2);
    }
  }
  uint8_t* data() { return reinterpret_cast<uint8_t*>(pages_.data()); }

 private:
  struct alignas(4096) Page {
    uint8_t bytes[4096];
  };
  std::vector<Page> pages_;
};

size_t element_bytes(dnnl::memory::data_type dt) { return dt == dnnl::memory::data_type::bf16 ? 2 : 4; }

// GFLOP/s of `flops` per run of `primitive` on `args`: one warm-up, then the best of `reps`.
double primitive_gflops(const dnnl::primitive& primitive, const std::unordered_map<int, dnnl::memory>& args,
                        double flops, int reps) {
  dnnl::stream stream(args.begin()->second.get_engine());
  const double s = best_seconds(
      [&] {
        primitive.execute(stream, args);
        stream.wait();
      },
      reps);
  return flops / s * 1e-9;
}

// GFLOP/s of an n×n×n matmul primitive on dense row-major buffers of `dt` (bf16: fp32 accumulation,
// bf16 output, as precis's bf16 GEMM), created under the current OpenMP thread count.
double onednn_matmul_gflops(int64_t n, dnnl::memory::data_type dt, int reps) {
  using dnnl::memory;
  const dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  const memory::desc md({n, n}, dt, memory::format_tag::ab);
  const auto pd = precis::cpu::onednn::matmul_pd(engine, md, md, nullptr, md);
  // oneDNN's reference kernels are no peak (and would take minutes at this size).
  if (std::string(pd.impl_info_str()).rfind("ref", 0) == 0) return 0;
  const size_t bytes = static_cast<size_t>(n * n) * element_bytes(dt);
  Buffer a(bytes), b(bytes), c(bytes);
  return primitive_gflops(dnnl::matmul(pd),
                          {{DNNL_ARG_SRC, memory(md, engine, a.data())},
                           {DNNL_ARG_WEIGHTS, memory(md, engine, b.data())},
                           {DNNL_ARG_DST, memory(md, engine, c.data())}},
                          2.0 * static_cast<double>(n) * n * n, reps);
}

// GFLOP/s of a 3×3 convolution forward primitive, 128 → 128 channels on a 64×16×16 batch in
// channels-last layout (ResNet-18's second stage), weights in the layout oneDNN picks: an implicit
// GEMM (M = 16384, K = 1152, N = 128) whose bf16 kernel on AMX outruns the matmul primitive's best
// (measured ~3.2-4.0 against ~2.45 TFLOP/s on the 2-vCPU development VM).
double onednn_conv_gflops(dnnl::memory::data_type dt, int reps) {
  using dnnl::memory;
  const dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  const int64_t n = 64, c = 128, hw = 16;
  const memory::desc src({n, c, hw, hw}, dt, memory::format_tag::nhwc), dst = src;
  const memory::desc weights({c, c, 3, 3}, dt, memory::format_tag::any);
  const auto pd = precis::cpu::onednn::conv_forward_pd(engine, dnnl::prop_kind::forward_inference, src, weights,
                                                       nullptr, dst, {{1, 1}, {0, 0}, {1, 1}, {1, 1}});
  if (std::string(pd.impl_info_str()).rfind("ref", 0) == 0) return 0;
  Buffer x(static_cast<size_t>(n * c * hw * hw) * element_bytes(dt)), y(static_cast<size_t>(n * c * hw * hw) * element_bytes(dt));
  Buffer w(pd.weights_desc().get_size());
  return primitive_gflops(dnnl::convolution_forward(pd),
                          {{DNNL_ARG_SRC, memory(src, engine, x.data())},
                           {DNNL_ARG_WEIGHTS, memory(pd.weights_desc(), engine, w.data())},
                           {DNNL_ARG_DST, memory(dst, engine, y.data())}},
                          2.0 * static_cast<double>(n * hw * hw) * c * c * 9, reps);
}
#endif

// The matmul sizes the peak is the best of, with the repetitions each gets, and the convolution's
// repetitions. oneDNN's bf16 kernels on AMX run much faster with their operands in L2 (512³:
// ~2.45 TFLOP/s on the 2-vCPU development VM) than at 2048³ (~1.25), and its convolution kernel
// faster still; the peak is the best the machine's dense math reaches, so all count.
constexpr int kPeakSizes[][2] = {{512, 50}, {1024, 20}, {2048, 5}};
constexpr int kConvReps = 20;

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
      for (const auto dt : {dnnl::memory::data_type::f32, dnnl::memory::data_type::bf16}) {
        double& peak = (dt == dnnl::memory::data_type::f32 ? r.f32 : r.bf16)[r.count];
        try {
          for (const auto& [n, reps] : kPeakSizes) peak = std::max(peak, onednn_matmul_gflops(n, dt, reps));
          peak = std::max(peak, onednn_conv_gflops(dt, kConvReps));
        } catch (const dnnl::error&) {
          if (dt == dnnl::memory::data_type::f32) throw;  // no bf16 kernels on this CPU: no bf16 peak
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
  out.method = "oneDNN, the best of matmul 512³ (50 runs), 1024³ (20), 2048³ (5) and a 3x3 convolution "
               "128 → 128 channels on 64x16x16 (20)";
#else
  out.method = "precis::matmul (precis-bench built without oneDNN), the best of 512³ (50 runs), 1024³ (20), 2048³ (5)";
#endif
  return out;
}

}  // namespace precis::bench
