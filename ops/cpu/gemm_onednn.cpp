// GEMM through oneDNN's matmul primitive (f32, and bf16 with fp32 accumulation).
//
// Building a primitive (choosing an implementation, JIT-compiling its kernels) costs from tens of
// microseconds to milliseconds, far more than a small GEMM, so primitives are cached per problem
// (shapes, strides, dtype, bias, thread count) in a small LRU map shared by all threads; each
// execution brings its own scratchpad (execute_primitive), so any thread may run any of them.
// Transposed operands are described to oneDNN through strides, never copied. GEMMs with a very
// long K run in K blocks (see "blocking" below).
#ifdef PRECIS_HAS_ONEDNN

#include <array>
#include <memory>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <oneapi/dnnl/dnnl.hpp>

#include "core/error.h"
#include "core/half.h"
#include "ops/cpu/gemm.h"
#include "ops/cpu/onednn_compat.h"
#include "ops/cpu/onednn_util.h"
#include "tensor/factory.h"

namespace precis::cpu {

namespace {

// ---- primitive cache ---------------------------------------------------------------------------
// dtype (| c_f32 << 8 | accumulate << 9), bias?, threads, batch, batch2, batch_a, batch_b, batch2_a,
// batch2_b, m, k, n, a strides (4), b strides (4).
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

// One primitive's problem: the GEMM, and whether its product is added to what c holds (oneDNN's
// sum post-op) instead of replacing it.
struct Problem {
  GemmArgs g;
  bool accumulate = false;
};

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

std::shared_ptr<const CachedMatmul> build(const Problem& problem) {
  using dnnl::memory;
  const GemmArgs& g = problem.g;
  auto p = std::make_shared<CachedMatmul>();
  const memory::data_type dt = g.dtype == DType::bf16 ? memory::data_type::bf16 : memory::data_type::f32;
  p->a = operand_desc(g.a, g, g.m, g.k, dt);
  p->b = operand_desc(g.b, g, g.k, g.n, dt);
  const memory::data_type c_dt = g.c_f32 ? memory::data_type::f32 : dt;
  p->c = g.batch2 == 1 ? memory::desc({g.batch, g.m, g.n}, c_dt, {g.m * g.n, g.n, 1})
                       : memory::desc({g.batch, g.batch2, g.m, g.n}, c_dt, {g.batch2 * g.m * g.n, g.m * g.n, g.n, 1});
  try {
    dnnl::primitive_attr attr = scratchpad_attr();
    if (problem.accumulate) {
      dnnl::post_ops ops;
      ops.append_sum(1.0f);
      attr.set_post_ops(ops);
    }
    if (g.bias != nullptr)
      p->bias = g.batch2 == 1 ? memory::desc({1, 1, g.n}, dt, {g.n, g.n, 1})
                              : memory::desc({1, 1, 1, g.n}, dt, {g.n, g.n, g.n, 1});
    const dnnl::matmul::primitive_desc pd =
        onednn::matmul_pd(cpu_engine(), p->a, p->b, g.bias != nullptr ? &p->bias : nullptr, p->c, attr);
    // The reference implementations are slower than our own fallbacks.
    if (std::string_view(pd.impl_info_str()).starts_with("ref")) return std::make_shared<CachedMatmul>();
    p->primitive = dnnl::matmul(pd);
    p->scratchpad = pd.scratchpad_desc();
  } catch (const dnnl::error&) {
    return std::make_shared<CachedMatmul>();  // unimplemented here (e.g. bf16 without AVX-512)
  }
  return p;
}

// The cached primitive for `problem`, built on first use (possibly an unsupported marker).
std::shared_ptr<const CachedMatmul> find_or_build(const Problem& problem) {
  const GemmArgs& g = problem.g;
  const int threads = sync_thread_count();
  const Key key{static_cast<int64_t>(g.dtype) | (int64_t{g.c_f32} << 8) | (int64_t{problem.accumulate} << 9),
                g.bias != nullptr, threads, g.batch, g.batch2,
                batch_dim(g.a, g.batch), batch_dim(g.b, g.batch), batch2_dim(g.a, g.batch2),
                batch2_dim(g.b, g.batch2), g.m, g.k, g.n,
                g.a.batch_stride, g.a.batch_stride2, g.a.row_stride, g.a.col_stride,
                g.b.batch_stride, g.b.batch_stride2, g.b.row_stride, g.b.col_stride};
  MatmulCache& cache = primitive_cache();
  std::shared_ptr<const CachedMatmul> p = cache.find(key);
  if (p == nullptr) p = cache.insert(key, build(problem));
  return p;
}

void execute(const CachedMatmul& p, const GemmArgs& g) {
  const dnnl::engine& engine = cpu_engine();
  std::unordered_map<int, dnnl::memory> args{
      {DNNL_ARG_SRC, dnnl::memory(p.a, engine, const_cast<void*>(g.a.data))},
      {DNNL_ARG_WEIGHTS, dnnl::memory(p.b, engine, const_cast<void*>(g.b.data))},
      {DNNL_ARG_DST, dnnl::memory(p.c, engine, g.c)}};
  if (g.bias != nullptr) args.emplace(DNNL_ARG_BIAS, dnnl::memory(p.bias, engine, const_cast<void*>(g.bias)));
  try {
    execute_primitive(p.primitive, p.scratchpad, std::move(args));
  } catch (const dnnl::error& e) {
    PRECIS_INTERNAL_ASSERT(false, "oneDNN matmul failed: ", e.what());
  }
}

// ---- blocking ------------------------------------------------------------------------------------
// oneDNN 2.6's matmul runs well below its best on BERT-mini's vocabulary input gradient,
// 2048x30522 · 30522x256: measured on the 2-vCPU AMX machine at 2 threads, K blocks of ~4096 take
// 0.56-0.70x the whole GEMM's time in bf16 (38-51 → 23-32 ms), and blocks of ~8192 0.86-0.92x in
// f32 (benchmarks/tools/gemm_blocking_probe.cpp; benchmarks/results/gemm-blocking-2026-12-02c.md).
// Each block's slices of a and b stay in cache while its kernel runs; the blocks add into c.
// The rule is kept to where blocks paid in every run: K of 16384 or less, few rows, or more than
// 1024 columns gained nothing or lost (up to 1.2x). Blocks of N would help the vocabulary
// forward 2048x256 · 256x30522 most (37 → 20 ms), but oneDNN's fast kernels need a dense result
// and copying the blocks into place costs more than they save; blocks of M (its weight gradient
// 30522x2048 · 2048x256) gave mixed results.

// `extent` cut into near-equal blocks of at most about `target`, rounded up to a multiple of 64.
int64_t even_block(int64_t extent, int64_t target) {
  const int64_t count = (extent + target - 1) / target;
  const int64_t block = (extent + count - 1) / count;
  return (block + 63) / 64 * 64;
}

// The depth of g's K blocks, or 0 when g runs whole.
int64_t k_block_depth(const GemmArgs& g) {
  if (g.batch != 1 || g.batch2 != 1) return 0;
  // The bias must be added once, so a GEMM with one stays whole; so does one adding into a bf16 c.
  if (g.k < 24576 || g.m < 1024 || g.n > 1024 || g.bias != nullptr) return 0;
  if (g.accumulate && g.dtype == DType::bf16 && !g.c_f32) return 0;
  return even_block(g.k, g.dtype == DType::bf16 ? 4096 : 8192);
}

size_t element_bytes(DType dtype) { return dtype == DType::bf16 ? 2 : 4; }

const void* offset(const void* p, int64_t elements, size_t bytes) {
  return static_cast<const char*>(p) + elements * static_cast<int64_t>(bytes);
}

// The K block [begin, begin + extent) of g: a's columns and b's rows; all of c.
GemmArgs k_block_of(const GemmArgs& g, int64_t begin, int64_t extent) {
  const size_t bytes = element_bytes(g.dtype);
  GemmArgs b = g;
  b.k = extent;
  b.a.data = offset(g.a.data, begin * g.a.col_stride, bytes);
  b.b.data = offset(g.b.data, begin * g.b.row_stride, bytes);
  return b;
}

// Runs g in K blocks of `depth`; false (computing nothing) when oneDNN takes one of the block
// shapes only with a reference kernel.
bool run_k_blocks(const GemmArgs& g, int64_t depth) {
  // The K blocks of a bf16 result accumulate in an fp32 buffer, rounded once at the end.
  Tensor acc;
  GemmArgs target = g;
  if (!g.c_f32 && g.dtype == DType::bf16) {
    acc = empty({g.m, g.n}, {.dtype = DType::f32});
    target.c = acc.data_ptr();
    target.c_f32 = true;
  }
  std::vector<Problem> problems;
  std::vector<std::shared_ptr<const CachedMatmul>> primitives;
  for (int64_t begin = 0; begin < g.k; begin += depth) {
    // The first block writes c (or adds into it, as g asks), the others add into it.
    Problem p{k_block_of(target, begin, std::min(depth, g.k - begin)), begin > 0 || g.accumulate};
    primitives.push_back(find_or_build(p));
    if (!primitives.back()->supported()) return false;
    problems.push_back(p);
  }
  for (size_t i = 0; i < problems.size(); ++i) execute(*primitives[i], problems[i].g);
  if (acc.defined())
    float_to_bfloat16(static_cast<const float*>(acc.data_ptr()), static_cast<BFloat16*>(g.c), g.m * g.n);
  return true;
}

}  // namespace

bool onednn_gemm(const GemmArgs& g) {
  if (g.dtype != DType::f32 && g.dtype != DType::bf16) return false;
  if (g.c_f32 && (g.dtype != DType::bf16 || g.bias != nullptr)) return false;
  if (const int64_t depth = k_block_depth(g); depth > 0 && run_k_blocks(g, depth)) return true;
  const std::shared_ptr<const CachedMatmul> p = find_or_build(Problem{g, g.accumulate});
  if (!p->supported()) return false;
  execute(*p, g);
  return true;
}

}  // namespace precis::cpu

#endif  // PRECIS_HAS_ONEDNN
