// The Eigen GEMM: the fallback when oneDNN is absent, and the f64 path always (oneDNN has no
// f64). precis is not compiled with OpenMP, so Eigen's product is single-threaded; the work is
// split here over the intra-op pool instead, in blocks of rows of c (each block packs b again,
// which costs k·n per block against 2·rows·k·n flops).
#include <algorithm>

#include <Eigen/Core>

#include "core/error.h"
#include "core/thread_pool.h"
#include "ops/cpu/gemm.h"

namespace precis::cpu {

namespace {

// Minimum flops per parallel chunk: below this, waking a worker costs more than it saves.
constexpr int64_t kMinFlopsPerChunk = 1 << 20;

// c[batch][r0:r1] = (c[batch][r0:r1] +) a[batch][r0:r1]·b[batch] (+ bias). Accumulates in T.
template <typename T, int OrderA, int OrderB>
void gemm_rows(const GemmArgs& g, int64_t batch, int64_t r0, int64_t r1) {
  using Eigen::Dynamic;
  using Eigen::OuterStride;
  using MatA = Eigen::Matrix<T, Dynamic, Dynamic, OrderA>;
  using MatB = Eigen::Matrix<T, Dynamic, Dynamic, OrderB>;
  using MatC = Eigen::Matrix<T, Dynamic, Dynamic, Eigen::RowMajor>;
  const int64_t rows = r1 - r0;
  const T* a = static_cast<const T*>(g.a.data) + batch * g.a.batch_stride + r0 * g.a.row_stride;
  const T* b = static_cast<const T*>(g.b.data) + batch * g.b.batch_stride;
  T* c = static_cast<T*>(g.c) + (batch * g.m + r0) * g.n;
  const int64_t lda = OrderA == Eigen::RowMajor ? g.a.row_stride : g.a.col_stride;
  const int64_t ldb = OrderB == Eigen::RowMajor ? g.b.row_stride : g.b.col_stride;
  Eigen::Map<const MatA, Eigen::Unaligned, OuterStride<>> am(a, rows, g.k, OuterStride<>(lda));
  Eigen::Map<const MatB, Eigen::Unaligned, OuterStride<>> bm(b, g.k, g.n, OuterStride<>(ldb));
  Eigen::Map<MatC> cm(c, rows, g.n);
  if (g.accumulate) {
    cm.noalias() += am * bm;
  } else {
    cm.noalias() = am * bm;
  }
  if (g.bias != nullptr)
    cm.rowwise() += Eigen::Map<const Eigen::Matrix<T, 1, Dynamic>>(static_cast<const T*>(g.bias), g.n);
}

template <typename T>
void eigen_gemm_typed(const GemmArgs& g) {
  using RowFn = void (*)(const GemmArgs&, int64_t, int64_t, int64_t);
  RowFn fn;
  if (g.a.row_major())
    fn = g.b.row_major() ? &gemm_rows<T, Eigen::RowMajor, Eigen::RowMajor> : &gemm_rows<T, Eigen::RowMajor, Eigen::ColMajor>;
  else
    fn = g.b.row_major() ? &gemm_rows<T, Eigen::ColMajor, Eigen::RowMajor> : &gemm_rows<T, Eigen::ColMajor, Eigen::ColMajor>;
  // The rows of all batches form one index space [0, batch·m); a chunk may span batches.
  const int64_t flops_per_row = std::max<int64_t>(2 * g.k * g.n, 1);
  const int64_t grain = std::max<int64_t>(1, kMinFlopsPerChunk / flops_per_row);
  parallel_for(0, g.batch * g.m, grain, [&](int64_t begin, int64_t end) {
    while (begin < end) {
      const int64_t batch = begin / g.m, r0 = begin % g.m;
      const int64_t r1 = std::min(g.m, r0 + (end - begin));
      fn(g, batch, r0, r1);
      begin += r1 - r0;
    }
  });
}

}  // namespace

void eigen_gemm(const GemmArgs& args) {
  switch (args.dtype) {
    case DType::f32: return eigen_gemm_typed<float>(args);
    case DType::f64: return eigen_gemm_typed<double>(args);
    default: PRECIS_INTERNAL_ASSERT(false, "eigen_gemm: unsupported dtype ", dtype_name(args.dtype));
  }
}

}  // namespace precis::cpu
