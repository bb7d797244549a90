// oneDNN engine, streams and thread-count control shared by the GEMM and convolution back ends.
#ifdef PRECIS_HAS_ONEDNN

#include "ops/cpu/onednn_util.h"

#include <omp.h>

#include "core/thread_pool.h"
#include "tensor/factory.h"

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

dnnl::primitive_attr scratchpad_attr() {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}

void execute_primitive(const dnnl::primitive& primitive, const dnnl::memory::desc& scratchpad,
                       std::unordered_map<int, dnnl::memory> args) {
  Tensor holder;  // keeps the scratchpad's block until the primitive has finished
  if (const size_t bytes = scratchpad.get_size(); bytes > 0) {
    holder = empty({static_cast<int64_t>(bytes)}, {.dtype = DType::boolean});  // bytes
    args.insert_or_assign(DNNL_ARG_SCRATCHPAD, dnnl::memory(scratchpad, cpu_engine(), holder.data_ptr()));
  }
  dnnl::stream& stream = thread_stream();
  primitive.execute(stream, args);
  stream.wait();
}

}  // namespace precis::cpu

#endif  // PRECIS_HAS_ONEDNN
