// conv_gemm_probe: oneDNN's convolution primitives against im2col + oneDNN matmul at the ResNet-18
// CIFAR (b64) shapes, channels-last (NHWC) activations, f32 or bf16. For every conv of the network
// it times the three passes of a training step both ways:
//   conv  forward / backward-data / backward-weights primitives created with nhwc activations and
//         weights from plain OIHW (reordered per call where the primitive wants another layout),
//         as ops/cpu/conv_onednn.cpp runs them; bw_pl: backward-weights with diff_weights forced
//         to plain OIHW (no reorder after; -1 where oneDNN has only its reference kernel for that,
//         which is 100-1000x slower)
//   gemm  forward      out (M, O) = cols (M, K) · Wᵀ      after im2col
//         backward-d   dcols (M, K) = dY (M, O) · W       (fp32) then col2im (gather, f32 sums)
//         backward-w   dW (O, K) = dYᵀ (O, M) · cols      after im2col
//         (M = N·Ho·Wo, K = C·kh·kw; ops/cpu/conv_gemm_cols.h, the loops the kernel runs; the
//         1x1 stride-2 projections go through im2col too, which is then a subsample copy)
// Prints ms per call (minimum of reps) and the step totals (x count).
// Build: g++ -O2 -march=native -fopenmp -std=c++20 -I. benchmarks/tools/conv_gemm_probe.cpp -ldnnl -o conv_gemm_probe
// Run:   OMP_NUM_THREADS=2 ./conv_gemm_probe [f32|bf16] [reps] [wall|cpu]
#include <oneapi/dnnl/dnnl.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <unordered_map>
#include <vector>

#include <omp.h>
#include <time.h>

#include "benchmarks/tools/onednn_conv_probe.h"
#include "core/half.h"
#include "ops/cpu/conv_gemm_cols.h"

// A matmul (batch 1) with strides given; returns primitive and args over fresh buffers.
struct Mm {
  matmul prim;
  memory a, b, c;
  std::string impl;
};
Mm make_mm(dt d, int64_t m, int64_t k, int64_t n, memory::dims sa, memory::dims sb, dt dc) {
  Mm r;
  const memory::desc a({1, m, k}, d, sa), b({1, k, n}, d, sb), c({1, m, n}, dc, {m * n, n, 1});
  matmul::primitive_desc pd({a, b, c}, eng);
  r.prim = matmul(pd);
  r.impl = pd.impl_info_str();
  r.a = memory(a, eng);
  r.b = memory(b, eng);
  r.c = memory(c, eng);
  zero_fill(r.a);
  zero_fill(r.b);
  return r;
}
void run_mm(Mm& mm, void* a, void* b, void* c) {
  mm.a.set_data_handle(a);
  mm.b.set_data_handle(b);
  mm.c.set_data_handle(c);
  mm.prim.execute(strm, {{DNNL_ARG_SRC, mm.a}, {DNNL_ARG_WEIGHTS, mm.b}, {DNNL_ARG_DST, mm.c}});
  strm.wait();
}

template <typename T>
void par_im2col(const precis::cpu::ColsShape& s, const T* x, T* cols) {
  const int64_t m = s.m();
#pragma omp parallel
  {
    const int nt = omp_get_num_threads(), t = omp_get_thread_num();
    precis::cpu::im2col_nhwc(s, x, cols, m * t / nt, m * (t + 1) / nt);
  }
}
template <typename T>
void par_col2im(const precis::cpu::ColsShape& s, const float* cols, T* dx) {
  const int64_t p = s.n * s.h * s.w;
#pragma omp parallel
  {
    const int nt = omp_get_num_threads(), t = omp_get_thread_num();
    std::vector<float> acc(s.c);
    precis::cpu::col2im_nhwc(s, cols, dx, acc.data(), p * t / nt, p * (t + 1) / nt);
  }
}

template <typename T>
void probe(dt d, int reps) {
  const int64_t n = 64;
  double tot[7] = {};
  std::printf("%-22s %8s %8s %8s %8s | %8s %8s %8s | mm only: %7s %7s %7s  impl bw / mm\n", "layer", "c.fwd", "c.bwd_d",
              "c.bwd_w", "c.bw_pl", "g.fwd", "g.bwd_d", "g.bwd_w", "fwd", "bwd_d", "bwd_w");
  for (const Layer& L : kLayers) {
    const int64_t pad = L.k / 2, ho = (L.hw + 2 * pad - L.k) / L.s + 1;
    const memory::dims src{n, L.c, L.hw, L.hw}, wts{L.o, L.c, L.k, L.k}, dst{n, L.o, ho, ho}, st{L.s, L.s},
        dil{0, 0}, pd{pad, pad};
    const memory::desc a_src(src, d, tag::nhwc), a_w(wts, d, tag::any), a_dst(dst, d, tag::nhwc),
        user_w(wts, d, tag::oihw);
    const convolution_forward::primitive_desc fpd(
        {prop_kind::forward_training, algorithm::convolution_direct, a_src, a_w, a_dst, st, dil, pd, pd}, eng);
    const convolution_backward_data::primitive_desc bdpd(
        {algorithm::convolution_direct, a_src, a_w, a_dst, st, dil, pd, pd}, eng, fpd);
    const convolution_backward_weights::primitive_desc bwpd(
        {algorithm::convolution_direct, a_src, a_w, a_dst, st, dil, pd, pd}, eng, fpd);
    Op f, bd, bw, bwp;
    f.prim = convolution_forward(fpd);
    bind(f, DNNL_ARG_SRC, a_src, fpd.src_desc(), false);
    bind(f, DNNL_ARG_WEIGHTS, user_w, fpd.weights_desc(), false);
    bind(f, DNNL_ARG_DST, a_dst, fpd.dst_desc(), true);
    bd.prim = convolution_backward_data(bdpd);
    bind(bd, DNNL_ARG_DIFF_DST, a_dst, bdpd.diff_dst_desc(), false);
    bind(bd, DNNL_ARG_WEIGHTS, user_w, bdpd.weights_desc(), false);
    bind(bd, DNNL_ARG_DIFF_SRC, a_src, bdpd.diff_src_desc(), true);
    bw.prim = convolution_backward_weights(bwpd);
    bind(bw, DNNL_ARG_DIFF_DST, a_dst, bwpd.diff_dst_desc(), false);
    bind(bw, DNNL_ARG_SRC, a_src, bwpd.src_desc(), false);
    bind(bw, DNNL_ARG_DIFF_WEIGHTS, user_w, bwpd.diff_weights_desc(), true);
    double t_bwp = -1;
    std::string bwp_impl = "-";
    try {
      const convolution_backward_weights::primitive_desc bwppd(
          {algorithm::convolution_direct, a_src, user_w, a_dst, st, dil, pd, pd}, eng, fpd);
      bwp_impl = bwppd.impl_info_str();
      if (bwp_impl.starts_with("ref")) throw dnnl::error(dnnl_unimplemented, "reference only: not timed");
      bwp.prim = convolution_backward_weights(bwppd);
      bind(bwp, DNNL_ARG_DIFF_DST, a_dst, bwppd.diff_dst_desc(), false);
      bind(bwp, DNNL_ARG_SRC, a_src, bwppd.src_desc(), false);
      bind(bwp, DNNL_ARG_DIFF_WEIGHTS, user_w, bwppd.diff_weights_desc(), true);
      t_bwp = time_ms([&] { bwp.run(); }, reps);
    } catch (const dnnl::error&) {
    }
    const double tc[3] = {time_ms([&] { f.run(); }, reps), time_ms([&] { bd.run(); }, reps),
                          time_ms([&] { bw.run(); }, reps)};

    const precis::cpu::ColsShape cs{n, L.hw, L.hw, L.c, ho, ho, L.k, L.k, L.s, L.s, pad, pad};
    const int64_t M = cs.m(), K = cs.k(), O = L.o;
    std::vector<T> x(n * L.hw * L.hw * L.c), dx(x.size()), y(M * O), w(O * K), cols(M * K);
    std::vector<float> dcols(M * K);  // the input gradient's columns stay fp32 (as in the kernel)
    // forward: cols (M,K) · Wᵀ (K,O): W (O,K) row-major read column-major
    Mm mf = make_mm(d, M, K, O, {M * K, K, 1}, {K * O, 1, K}, d);
    Mm mbd = make_mm(d, M, O, K, {M * O, O, 1}, {O * K, K, 1}, dt::f32);
    Mm mbw = make_mm(d, O, M, K, {O * M, 1, O}, {M * K, K, 1}, d);
    const double tm[3] = {time_ms([&] { run_mm(mf, cols.data(), w.data(), y.data()); }, reps),
                          time_ms([&] { run_mm(mbd, y.data(), w.data(), dcols.data()); }, reps),
                          time_ms([&] { run_mm(mbw, y.data(), cols.data(), w.data()); }, reps)};
    const double tg[3] = {
        time_ms([&] { par_im2col(cs, x.data(), cols.data()); run_mm(mf, cols.data(), w.data(), y.data()); }, reps),
        time_ms([&] { run_mm(mbd, y.data(), w.data(), dcols.data()); par_col2im(cs, dcols.data(), dx.data()); }, reps),
        time_ms([&] { par_im2col(cs, x.data(), cols.data()); run_mm(mbw, y.data(), cols.data(), w.data()); }, reps)};
    for (int p = 0; p < 3; ++p) tot[p] += tc[p] * L.count, tot[4 + p] += tg[p] * L.count;
    tot[3] += (t_bwp < 0 ? tc[2] : t_bwp) * L.count;
    char name[64];
    std::snprintf(name, sizeof name, "%ldx%ld k%ld s%ld %ldx%ld x%ld", long(L.c), long(L.o), long(L.k), long(L.s),
                  long(L.hw), long(L.hw), long(L.count));
    std::printf("%-22s %8.3f %8.3f %8.3f %8.3f | %8.3f %8.3f %8.3f | %7.3f %7.3f %7.3f  %s / %s / %s\n", name, tc[0],
                tc[1], tc[2], t_bwp, tg[0], tg[1], tg[2], tm[0], tm[1], tm[2], bwpd.impl_info_str(), bwp_impl.c_str(),
                mbw.impl.c_str());
    std::fflush(stdout);
  }
  std::printf("step totals (ms, x count): conv fwd %.2f bwd_d %.2f bwd_w %.2f (bwd_w plain %.2f) | "
              "gemm fwd %.2f bwd_d %.2f bwd_w %.2f\n",
              tot[0], tot[1], tot[2], tot[3], tot[4], tot[5], tot[6]);
}

int main(int argc, char** argv) {
  const bool bf16 = argc > 1 && std::string(argv[1]) == "bf16";
  const int reps = argc > 2 ? std::atoi(argv[2]) : 10;
  g_cpu_time = argc > 3 && std::string(argv[3]) == "cpu";
  std::printf("%s, threads %d, min of %d, %s time\n", bf16 ? "bf16" : "f32", omp_get_max_threads(), reps,
              g_cpu_time ? "process CPU" : "wall");
  if (bf16)
    probe<precis::BFloat16>(dt::bf16, reps);
  else
    probe<float>(dt::f32, reps);
}
