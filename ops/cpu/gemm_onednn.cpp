// GEMM through oneDNN's matmul primitive (f32, and bf16 with fp32 accumulation).
//
// Building a primitive (choosing an implementation, JIT-compiling its kernels) costs from tens of
// microseconds to milliseconds, far more than a small GEMM, so primitives are cached per problem
// (shapes, strides, dtype, bias, thread count) in a small LRU map shared by all threads.
// Transposed operands are described to oneDNN through strides, never copied.
#ifdef PRECIS_HAS_ONEDNN

#include <dlfcn.h>

#include <array>
#include <memory>
#include <mutex>
#include <string_view>
#include <unordered_map>

#include <oneapi/dnnl/dnnl.hpp>

#include "core/error.h"
#include "core/thread_pool.h"
#include "ops/cpu/gemm.h"

namespace precis::cpu {

namespace {

const dnnl::engine& cpu_engine() {
  static const dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

// oneDNN does not promise that one stream may be used from several threads at once; a CPU stream
// is only a handle, so each thread keeps its own.
dnnl::stream& thread_stream() {
  thread_local dnnl::stream stream(cpu_engine());
  return stream;
}

// ---- thread count ------------------------------------------------------------------------------
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

// Makes oneDNN on this thread use precis's thread count (one thread inside a parallel_for body,
// where the pool already occupies the cores) and returns it. A primitive plans its work split for
// the thread count it was created under, so the count is part of the cache key.
int sync_thread_count() {
  const int want = in_parallel_region() ? 1 : get_num_threads();
  const OmpControl& omp = omp_control();
  if (omp.set_num_threads != nullptr && omp.get_max_threads() != want) omp.set_num_threads(want);
  return want;
}

// ---- primitive cache ---------------------------------------------------------------------------
// dtype, bias?, threads, batch_a, batch_b, m, k, n, a strides (3), b strides (3).
using Key = std::array<int64_t, 14>;

struct KeyHash {
  size_t operator()(const Key& key) const {
    uint64_t h = 1469598103934665603ull;
    for (int64_t v : key) h = (h ^ static_cast<uint64_t>(v)) * 1099511628211ull;
    return static_cast<size_t>(h);
  }
};

// A ready primitive and the memory descriptors its arguments are wrapped in. An empty primitive
// records that oneDNN has no fast implementation for the key, so that is not asked again.
struct CachedMatmul {
  dnnl::matmul primitive;
  dnnl::memory::desc a, b, bias, c;
  bool supported() const { return static_cast<bool>(primitive); }
};

class PrimitiveCache {
 public:
  std::shared_ptr<const CachedMatmul> find(const Key& key) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = map_.find(key);
    if (it == map_.end()) return nullptr;
    it->second.last_use = ++tick_;
    return it->second.value;
  }

  // Keeps the first value inserted for a key (two threads may build the same primitive).
  std::shared_ptr<const CachedMatmul> insert(const Key& key, std::shared_ptr<const CachedMatmul> value) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = map_.find(key);
    if (it != map_.end()) return it->second.value;
    if (map_.size() >= kCapacity) evict_oldest();
    map_.emplace(key, Slot{value, ++tick_});
    return value;
  }

 private:
  // Enough for every distinct GEMM of a large model's forward and backward passes.
  static constexpr size_t kCapacity = 512;
  struct Slot {
    std::shared_ptr<const CachedMatmul> value;
    uint64_t last_use;
  };
  void evict_oldest() {
    auto oldest = map_.begin();
    for (auto it = map_.begin(); it != map_.end(); ++it)
      if (it->second.last_use < oldest->second.last_use) oldest = it;
    map_.erase(oldest);
  }
  std::mutex mutex_;
  std::unordered_map<Key, Slot, KeyHash> map_;
  uint64_t tick_ = 0;
};

PrimitiveCache& primitive_cache() {
  static auto* cache = new PrimitiveCache();  // never destroyed: used until exit
  return *cache;
}

// Batch stride as oneDNN should see it: a matrix used by every batch entry is a batch of 1, and
// the stride of a batch of 1 is set to the dense value so that oneDNN recognises a plain layout.
int64_t batch_dim(const GemmMatrix& x, int64_t batch) { return x.batch_stride == 0 ? 1 : batch; }
int64_t batch_stride(const GemmMatrix& x, int64_t batch, int64_t rows, int64_t cols) {
  return batch_dim(x, batch) == 1 ? rows * cols : x.batch_stride;
}

std::shared_ptr<const CachedMatmul> build(const GemmArgs& g) {
  using dnnl::memory;
  auto p = std::make_shared<CachedMatmul>();
  const memory::data_type dt = g.dtype == DType::bf16 ? memory::data_type::bf16 : memory::data_type::f32;
  p->a = memory::desc({batch_dim(g.a, g.batch), g.m, g.k}, dt,
                      {batch_stride(g.a, g.batch, g.m, g.k), g.a.row_stride, g.a.col_stride});
  p->b = memory::desc({batch_dim(g.b, g.batch), g.k, g.n}, dt,
                      {batch_stride(g.b, g.batch, g.k, g.n), g.b.row_stride, g.b.col_stride});
  p->c = memory::desc({g.batch, g.m, g.n}, dt, {g.m * g.n, g.n, 1});
  try {
    dnnl::matmul::primitive_desc pd;
    if (g.bias != nullptr) {
      p->bias = memory::desc({1, 1, g.n}, dt, {g.n, g.n, 1});
      pd = dnnl::matmul::primitive_desc(dnnl::matmul::desc(p->a, p->b, p->bias, p->c), cpu_engine());
    } else {
      pd = dnnl::matmul::primitive_desc(dnnl::matmul::desc(p->a, p->b, p->c), cpu_engine());
    }
    // The reference implementations are slower than our own fallbacks.
    if (std::string_view(pd.impl_info_str()).starts_with("ref")) return std::make_shared<CachedMatmul>();
    p->primitive = dnnl::matmul(pd);
  } catch (const dnnl::error&) {
    return std::make_shared<CachedMatmul>();  // unimplemented here (e.g. bf16 without AVX-512)
  }
  return p;
}

}  // namespace

bool onednn_gemm(const GemmArgs& g) {
  if (g.dtype != DType::f32 && g.dtype != DType::bf16) return false;
  const int threads = sync_thread_count();
  const Key key{static_cast<int64_t>(g.dtype), g.bias != nullptr, threads,
                batch_dim(g.a, g.batch), batch_dim(g.b, g.batch), g.m, g.k, g.n,
                g.a.batch_stride, g.a.row_stride, g.a.col_stride,
                g.b.batch_stride, g.b.row_stride, g.b.col_stride};
  PrimitiveCache& cache = primitive_cache();
  std::shared_ptr<const CachedMatmul> p = cache.find(key);
  if (p == nullptr) p = cache.insert(key, build(g));
  if (!p->supported()) return false;

  const dnnl::engine& engine = cpu_engine();
  std::unordered_map<int, dnnl::memory> args{
      {DNNL_ARG_SRC, dnnl::memory(p->a, engine, const_cast<void*>(g.a.data))},
      {DNNL_ARG_WEIGHTS, dnnl::memory(p->b, engine, const_cast<void*>(g.b.data))},
      {DNNL_ARG_DST, dnnl::memory(p->c, engine, g.c)}};
  if (g.bias != nullptr) args.emplace(DNNL_ARG_BIAS, dnnl::memory(p->bias, engine, const_cast<void*>(g.bias)));
  try {
    dnnl::stream& stream = thread_stream();
    p->primitive.execute(stream, args);
    stream.wait();
  } catch (const dnnl::error& e) {
    PRECIS_INTERNAL_ASSERT(false, "oneDNN matmul failed: ", e.what());
  }
  return true;
}

}  // namespace precis::cpu

#endif  // PRECIS_HAS_ONEDNN
