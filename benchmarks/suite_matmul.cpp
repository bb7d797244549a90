// The matmul suite: f32 GEMM through precis::matmul, side by side with oneDNN's matmul primitive
// called directly (the library precis uses underneath, so the gap is precis's own overhead:
// checks, dispatch, the primitive cache, output allocation).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <unordered_map>

#include "benchmarks/bench.h"
#include "core/rng.h"
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

struct GemmCase {
  int64_t m, k, n;  // A: (m, k), B: (k, n), C: (m, n)
};

const GemmCase kCases[] = {
    {256, 256, 256}, {512, 512, 512}, {1024, 1024, 1024}, {2048, 2048, 2048}, {4096, 1024, 256}, {8192, 256, 1024},
};

std::string case_name(const GemmCase& c) {
  return std::to_string(c.m) + "x" + std::to_string(c.k) + "x" + std::to_string(c.n);
}

#ifdef PRECIS_HAS_ONEDNN
// A dnnl::matmul primitive for C = A·B on dense row-major f32 buffers, created once (under the
// current OpenMP thread count) and executed directly.
class OnednnGemm {
 public:
  OnednnGemm(const GemmCase& c, void* a, void* b, void* out)
      : engine_(dnnl::engine::kind::cpu, 0), stream_(engine_) {
    using dnnl::memory;
    const memory::desc a_md({c.m, c.k}, memory::data_type::f32, memory::format_tag::ab);
    const memory::desc b_md({c.k, c.n}, memory::data_type::f32, memory::format_tag::ab);
    const memory::desc c_md({c.m, c.n}, memory::data_type::f32, memory::format_tag::ab);
    const auto pd = precis::cpu::onednn::matmul_pd(engine_, a_md, b_md, nullptr, c_md);
    impl_ = pd.impl_info_str();
    primitive_ = dnnl::matmul(pd);
    args_ = {{DNNL_ARG_SRC, memory(a_md, engine_, a)},
             {DNNL_ARG_WEIGHTS, memory(b_md, engine_, b)},
             {DNNL_ARG_DST, memory(c_md, engine_, out)}};
  }
  void run() {
    primitive_.execute(stream_, args_);
    stream_.wait();
  }
  const std::string& impl() const { return impl_; }

 private:
  dnnl::engine engine_;
  dnnl::stream stream_;
  dnnl::matmul primitive_;
  std::unordered_map<int, dnnl::memory> args_;
  std::string impl_;
};
#endif

void set_threads(int n) {
  set_num_threads(n);  // precis's pool, and through it the OpenMP count precis gives oneDNN
#ifdef PRECIS_BENCH_HAS_OPENMP
  omp_set_num_threads(n);  // for the direct oneDNN impl
#endif
}

SuiteReport run_matmul(const Options& options) {
  SuiteReport report;
  report.note =
      "Case = MxKxN: A is MxK, B is KxN, C = A·B is MxN, all f32 row-major. GFLOP/s = 2·M·N·K / time. "
      "precis: precis::matmul(a, b) on preallocated inputs, timing the whole call including the "
      "allocation of its output; onednn: one dnnl::matmul primitive per case, created before timing "
      "and executed on preallocated buffers. The impls alternate repetition by repetition.";
#ifdef PRECIS_HAS_ONEDNN
  report.baseline_impl = "onednn";
#endif
  const int initial_threads = get_num_threads();
  std::string onednn_impls;
  for (const GemmCase& c : kCases) {
    Generator gen(42);
    const Tensor a = randn({c.m, c.k}, {}, &gen), b = randn({c.k, c.n}, {}, &gen);
    const double flops = 2.0 * static_cast<double>(c.m) * static_cast<double>(c.n) * static_cast<double>(c.k);
    for (int threads : options.threads) {
      set_threads(threads);
      std::vector<std::string> names{"precis"};
      std::vector<std::function<void()>> impls{[&] { Tensor out = matmul(a, b); }};
#ifdef PRECIS_HAS_ONEDNN
      const Tensor direct_out = empty({c.m, c.n});
      OnednnGemm direct(c, a.data_ptr(), b.data_ptr(), direct_out.data_ptr());
      if (onednn_impls.find(direct.impl()) == std::string::npos)
        onednn_impls += (onednn_impls.empty() ? "" : ", ") + direct.impl();
      names.push_back("onednn");
      impls.push_back([&] { direct.run(); });
#endif
      const std::vector<Timing> timings = time_interleaved(impls, options);
#ifdef PRECIS_HAS_ONEDNN
      // Both must compute the same product; a mismatch means the measurement is meaningless.
      const std::vector<float> p = matmul(a, b).to_vector<float>(), d = direct_out.to_vector<float>();
      double worst = 0;
      for (size_t i = 0; i < p.size(); ++i) worst = std::max(worst, std::fabs(static_cast<double>(p[i]) - d[i]));
      if (worst > 1e-2) std::fprintf(stderr, "warning: %s: precis and oneDNN differ by %g\n", case_name(c).c_str(), worst);
#endif
      for (size_t i = 0; i < impls.size(); ++i) {
        Record r;
        r.suite = "matmul";
        r.case_name = case_name(c);
        r.impl = names[i];
        r.dtype = "f32";
        r.threads = threads;
        r.median_ms = timings[i].median_ms;
        r.min_ms = timings[i].min_ms;
        r.gflops = timings[i].median_ms > 0 ? flops / (timings[i].median_ms * 1e6) : 0;
        r.flops = flops;
        r.reps = timings[i].reps;
        report.records.push_back(r);
      }
    }
  }
  set_threads(initial_threads);
  if (!onednn_impls.empty()) report.note += " oneDNN chose: " + onednn_impls + ".";
  return report;
}

const bool kRegistered =
    register_suite({"matmul", "f32 GEMM, precis::matmul against the oneDNN matmul primitive", &run_matmul});

}  // namespace
}  // namespace precis::bench
