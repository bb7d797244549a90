// GEMM through oneDNN's matmul primitive (f32, and bf16 with fp32 accumulation).
//
// Building a primitive (choosing an implementation, JIT-compiling its kernels) costs from tens of
// microseconds to milliseconds, far more than a small GEMM, so primitives are cached per problem
// (shapes, strides, dtype, bias, thread count) in a small LRU map shared by all threads; each
// execution brings its own scratchpad (execute_primitive), so any thread may run any of them.
// Transposed operands are described to oneDNN through strides, never copied.
#ifdef PRECIS_HAS_ONEDNN

#include <array>
#include <memory>
#include <string_view>
#include <unordered_map>

#include <oneapi/dnnl/dnnl.hpp>

#include "core/error.h"
#include "ops/cpu/gemm.h"
#include "ops/cpu/onednn_util.h"

namespace precis::cpu {

namespace {

// ---- primitive cache ---------------------------------------------------------------------------
// dtype (| c_f32 << 8), bias?, threads, batch, batch2, batch_a, batch_b, batch2_a, batch2_b, m, k, n,
// a strides (4), b strides (4).
using Key = std::array<int64_t, 20>;

// A ready primitive and the memory descriptors its arguments are wrapped in. An empty primitive
// records that oneDNN has no fast implementation for the key, so that is not asked again.
struct CachedMatmul {
  dnnl::matmul primitive;
  dnnl::memory::desc a, b, bias, c, scratchpad;
  bool supported() const { return static_cast<bool>(primitive); }
};

using MatmulCache = PrimitiveCache<Key, CachedMatmul>;

MatmulCache& primitive_cache() {
  static auto* cache = new MatmulCache();  // never destroyed: used until exit
  return *cache;
}

// Batch stride as oneDNN should see it: a matrix used by every batch entry is a batch of 1, and
// the stride of a batch of 1 is set to the dense value so that oneDNN recognises a plain layout.
int64_t batch_dim(const GemmMatrix& x, int64_t batch) { return x.batch_stride == 0 ? 1 : batch; }
int64_t batch_stride(const GemmMatrix& x, int64_t batch, int64_t rows, int64_t cols) {
  return batch_dim(x, batch) == 1 ? rows * cols : x.batch_stride;
}
// The same for the inner batch dim (GemmArgs::batch2).
int64_t batch2_dim(const GemmMatrix& x, int64_t batch2) { return x.batch_stride2 == 0 ? 1 : batch2; }

// x as oneDNN sees it: (batch, m, k)-style 3-D, or 4-D with the inner batch dim when batch2 > 1.
// A broadcast (size-1) batch dim gets the stride a dense layout would give it.
dnnl::memory::desc operand_desc(const GemmMatrix& x, const GemmArgs& g, int64_t rows, int64_t cols,
                                dnnl::memory::data_type dt) {
  using dnnl::memory;
  if (g.batch2 == 1)
    return memory::desc({batch_dim(x, g.batch), rows, cols}, dt,
                        {batch_stride(x, g.batch, rows, cols), x.row_stride, x.col_stride});
  const int64_t inner = batch2_dim(x, g.batch2);
  const int64_t inner_stride = inner == 1 ? rows * cols : x.batch_stride2;
  const int64_t outer = batch_dim(x, g.batch);
  const int64_t outer_stride = outer == 1 ? inner * rows * cols : x.batch_stride;
  return memory::desc({outer, inner, rows, cols}, dt, {outer_stride, inner_stride, x.row_stride, x.col_stride});
}

std::shared_ptr<const CachedMatmul> build(const GemmArgs& g) {
  using dnnl::memory;
  auto p = std::make_shared<CachedMatmul>();
  const memory::data_type dt = g.dtype == DType::bf16 ? memory::data_type::bf16 : memory::data_type::f32;
  p->a = operand_desc(g.a, g, g.m, g.k, dt);
  p->b = operand_desc(g.b, g, g.k, g.n, dt);
  const memory::data_type c_dt = g.c_f32 ? memory::data_type::f32 : dt;
  p->c = g.batch2 == 1 ? memory::desc({g.batch, g.m, g.n}, c_dt, {g.m * g.n, g.n, 1})
                       : memory::desc({g.batch, g.batch2, g.m, g.n}, c_dt, {g.batch2 * g.m * g.n, g.m * g.n, g.n, 1});
  try {
    dnnl::matmul::primitive_desc pd;
    if (g.bias != nullptr) {
      p->bias = g.batch2 == 1 ? memory::desc({1, 1, g.n}, dt, {g.n, g.n, 1})
                              : memory::desc({1, 1, 1, g.n}, dt, {g.n, g.n, g.n, 1});
      pd = dnnl::matmul::primitive_desc(dnnl::matmul::desc(p->a, p->b, p->bias, p->c), scratchpad_attr(), cpu_engine());
    } else {
      pd = dnnl::matmul::primitive_desc(dnnl::matmul::desc(p->a, p->b, p->c), scratchpad_attr(), cpu_engine());
    }
    // The reference implementations are slower than our own fallbacks.
    if (std::string_view(pd.impl_info_str()).starts_with("ref")) return std::make_shared<CachedMatmul>();
    p->primitive = dnnl::matmul(pd);
    p->scratchpad = pd.scratchpad_desc();
  } catch (const dnnl::error&) {
    return std::make_shared<CachedMatmul>();  // unimplemented here (e.g. bf16 without AVX-512)
  }
  return p;
}

}  // namespace

bool onednn_gemm(const GemmArgs& g) {
  if (g.dtype != DType::f32 && g.dtype != DType::bf16) return false;
  if (g.c_f32 && (g.dtype != DType::bf16 || g.bias != nullptr)) return false;
  const int threads = sync_thread_count();
  const Key key{static_cast<int64_t>(g.dtype) | (int64_t{g.c_f32} << 8), g.bias != nullptr, threads, g.batch, g.batch2,
                batch_dim(g.a, g.batch), batch_dim(g.b, g.batch), batch2_dim(g.a, g.batch2),
                batch2_dim(g.b, g.batch2), g.m, g.k, g.n,
                g.a.batch_stride, g.a.batch_stride2, g.a.row_stride, g.a.col_stride,
                g.b.batch_stride, g.b.batch_stride2, g.b.row_stride, g.b.col_stride};
  MatmulCache& cache = primitive_cache();
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
    execute_primitive(p->primitive, p->scratchpad, std::move(args));
  } catch (const dnnl::error& e) {
    PRECIS_INTERNAL_ASSERT(false, "oneDNN matmul failed: ", e.what());
  }
  return true;
}

}  // namespace precis::cpu

#endif  // PRECIS_HAS_ONEDNN
