// attention_gemm_probe: oneDNN's matmul primitive on BERT-mini's attention products (heads 4, head
// dim 64, f32; B 16 × L 128 unless given) in the layouts precis hands it (q, k, v and the context
// gradient in the (B, L, heads, D) order the projections write, read through strides) against the
// same products with every operand dense in (B, heads, rows, cols) order, and as one 3-D batch; the
// backward's two products with the context gradient also in the transposed form (vᵀ-gradient
// dctxᵀ·P beside the v-gradient Pᵀ·dctx that matmul's backward runs). Operands stay in cache
// between calls, so against the same products inside a step (ONEDNN_VERBOSE=1 on a training step)
// it tells the kernel's speed from the cost of operands that come from memory.
// Prints the least process CPU time (or with `wall`, wall time: several threads) per call of
// `reps` and the GFLOP/s it means. benchmarks/results/attention-gemm-2026-12-07-zen4.md.
// Build: g++ -O2 -std=c++20 -fopenmp -I. benchmarks/tools/attention_gemm_probe.cpp -ldnnl -o agp
// Run:   OMP_NUM_THREADS=1 ./agp [reps [cpu|wall [B L]]]
#include <oneapi/dnnl/dnnl.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <unordered_map>
#include <vector>

#include "benchmarks/tools/probe_time.h"

using namespace dnnl;
using dt = memory::data_type;

namespace {

bool wall_clock = false;  // least wall time instead of CPU time (several threads)
int64_t B = 16, L = 128;  // batch and sequence length: BERT-mini b16x128 unless given
constexpr int64_t H = 4, D = 64;

// A logical (B, H, rows, cols) operand. `heads_inner`: stored as (B, rows, H, cols) (the
// projections' order); `transposed`: the matrix is the transpose of such a stored one.
struct Operand {
  int64_t rows, cols;
  bool heads_inner, transposed;
};

memory::desc desc_of(const Operand& o) {
  if (!o.heads_inner) {
    if (!o.transposed) return memory::desc({B, H, o.rows, o.cols}, dt::f32, memory::format_tag::abcd);
    return memory::desc({B, H, o.rows, o.cols}, dt::f32, {H * o.rows * o.cols, o.rows * o.cols, 1, o.rows});
  }
  // Stored (B, S, H, C) with S, C the stored matrix's rows and columns.
  const int64_t s = o.transposed ? o.cols : o.rows, c = o.transposed ? o.rows : o.cols;
  if (!o.transposed) return memory::desc({B, H, o.rows, o.cols}, dt::f32, {s * H * c, c, H * c, 1});
  return memory::desc({B, H, o.rows, o.cols}, dt::f32, {s * H * c, c, 1, H * c});
}

struct Case {
  const char* label;
  Operand a, b;
};

double time_case(engine& eng, stream& str, const memory::desc& a, const memory::desc& b, const memory::desc& c,
                 int reps, const char** impl) {
  matmul::primitive_desc pd(matmul::desc(a, b, c), eng);
  *impl = pd.impl_info_str();
  matmul prim(pd);
  memory ma(a, eng), mb(b, eng), mc(c, eng);
  for (memory* m : {&ma, &mb}) {
    float* p = static_cast<float*>(m->get_data_handle());
    for (size_t i = 0; i < m->get_desc().get_size() / sizeof(float); ++i) p[i] = 0.001f * static_cast<float>(i % 997);
  }
  std::unordered_map<int, memory> args{{DNNL_ARG_SRC, ma}, {DNNL_ARG_WEIGHTS, mb}, {DNNL_ARG_DST, mc}};
  prim.execute(str, args);
  str.wait();
  const auto run = [&] {
    prim.execute(str, args);
    str.wait();
  };
  if (!wall_clock) return precis::probe::best_cpu_ms(reps, run);
  double best = 1e30;
  for (int i = 0; i < reps; ++i) {
    const auto t = std::chrono::steady_clock::now();
    run();
    best = std::min(best, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count());
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::atoi(argv[1]) : 20;
  wall_clock = argc > 2 && std::string(argv[2]) == "wall";
  if (argc > 4) {
    B = std::atoll(argv[3]);
    L = std::atoll(argv[4]);
  }
  engine eng(engine::kind::cpu, 0);
  stream str(eng);
  const Case cases[] = {
      {"scores q.kT      ", {L, D, true, false}, {D, L, true, true}},
      {"context P.v      ", {L, L, false, false}, {L, D, true, false}},
      {"grad v PT.dctx   ", {L, L, false, true}, {L, D, true, false}},
      {"grad kT qT.dS    ", {D, L, true, true}, {L, L, false, false}},
      {"grad vT dctxT.P  ", {D, L, true, true}, {L, L, false, false}},
      {"grad q dS.k      ", {L, L, false, false}, {L, D, true, false}},
      {"grad P dctx.vT   ", {L, D, true, false}, {D, L, true, true}},
  };
  std::printf("%-18s %-34s %9s %8s | %9s %8s | %9s %8s\n", "product", "impl (strided)", "strided", "GFLOP/s",
              "dense", "GFLOP/s", "3-D b64", "GFLOP/s");
  for (const Case& k : cases) {
    const double flop = 2.0 * B * H * k.a.rows * k.a.cols * k.b.cols;
    const memory::desc c({B, H, k.a.rows, k.b.cols}, dt::f32, memory::format_tag::abcd);
    const char* impl = "";
    const char* impl_dense = "";
    const double strided = time_case(eng, str, desc_of(k.a), desc_of(k.b), c, reps, &impl);
    Operand da = k.a, db = k.b;
    da.heads_inner = db.heads_inner = false;
    const double dense = time_case(eng, str, desc_of(da), desc_of(db), c, reps, &impl_dense);
    const auto flat = [](const Operand& o) {
      return o.transposed ? memory::desc({B * H, o.rows, o.cols}, dt::f32, {o.rows * o.cols, 1, o.rows})
                          : memory::desc({B * H, o.rows, o.cols}, dt::f32, memory::format_tag::abc);
    };
    const memory::desc c3({B * H, k.a.rows, k.b.cols}, dt::f32, memory::format_tag::abc);
    const double flat_ms = time_case(eng, str, flat(da), flat(db), c3, reps, &impl_dense);
    std::printf("%-18s %-34s %9.3f %8.1f | %9.3f %8.1f | %9.3f %8.1f\n", k.label, impl, strided,
                flop / strided * 1e-6, dense, flop / dense * 1e-6, flat_ms, flop / flat_ms * 1e-6);
  }
  return 0;
}
