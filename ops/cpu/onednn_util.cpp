// oneDNN engine, streams and thread-count control shared by the GEMM and convolution back ends.
#ifdef PRECIS_HAS_ONEDNN

#include "ops/cpu/onednn_util.h"

#include <dlfcn.h>

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

namespace {

// Debian's libdnnl runs its parallel regions on GNU OpenMP (DNNL_CPU_RUNTIME == OMP), whose
// thread count is a per-thread setting (omp_set_num_threads). precis's set_num_threads must govern
// it, but precis is not compiled with OpenMP (its users must not need -fopenmp and its own pool
// runs the element-wise work), so the two OpenMP entry points are looked up in the runtime that
// libdnnl already loaded into the process.
struct OmpControl {
  void (*set_num_threads)(int) = nullptr;
  int (*get_max_threads)() = nullptr;
};

const OmpControl& omp_control() {
  static const OmpControl control = [] {
    OmpControl c;
    if (dnnl_version()->cpu_runtime != DNNL_RUNTIME_OMP) return c;
    c.set_num_threads = reinterpret_cast<void (*)(int)>(dlsym(RTLD_DEFAULT, "omp_set_num_threads"));
    c.get_max_threads = reinterpret_cast<int (*)()>(dlsym(RTLD_DEFAULT, "omp_get_max_threads"));
    if (c.set_num_threads == nullptr || c.get_max_threads == nullptr) c = {};
    return c;
  }();
  return control;
}

}  // namespace

int sync_thread_count() {
  const int want = in_parallel_region() ? 1 : get_num_threads();
  const OmpControl& omp = omp_control();
  if (omp.set_num_threads != nullptr && omp.get_max_threads() != want) omp.set_num_threads(want);
  return want;
}

}  // namespace precis::cpu

#endif  // PRECIS_HAS_ONEDNN
