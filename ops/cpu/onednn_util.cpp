// oneDNN engine, streams and thread-count control shared by the GEMM and convolution back ends.
#ifdef PRECIS_HAS_ONEDNN

#include "ops/cpu/onednn_util.h"

#include <omp.h>

#include "core/thread_pool.h"

namespace precis::cpu {

const dnnl::engine& cpu_engine() {
  static const dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

dnnl::stream& thread_stream() {
  thread_local dnnl::stream stream(cpu_engine());
  return stream;
}

// Debian's libdnnl runs its parallel regions on GNU OpenMP (DNNL_CPU_RUNTIME == OMP), whose
// thread count is a per-thread setting: precis's set_num_threads must reach it on the calling
// thread. precis's own parallel_for runs on the same OpenMP team (core/thread_pool.cpp).
int sync_thread_count() {
  const int want = in_parallel_region() ? 1 : get_num_threads();
  if (omp_get_max_threads() != want) omp_set_num_threads(want);
  return want;
}

}  // namespace precis::cpu

#endif  // PRECIS_HAS_ONEDNN
