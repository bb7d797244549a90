// conv_winograd_probe: oneDNN's Winograd F(4x4, 3x3) f32 convolution (jit_wino_4x3) against its
// direct kernels at the 3x3 stride-1 convolutions of ResNet-18 CIFAR (b64): per-layer time of
// forward, backward-data and backward-weights, with the activations held in the primitive's own
// blocked layout (`blk`: no activation reorders) and held channels-last (`nhwc`: the direct
// kernels take them in place, Winograd's need reorders in and out per call, as precis would do);
// weights from plain OIHW, reordered per call. Then the error of both algorithms against an f64
// reference at sampled points (max |error| over the rms of the reference values), n = 4.
// Build: g++ -O2 -std=c++20 conv_winograd_probe.cpp -ldnnl -o conv_winograd_probe
// Run:   OMP_NUM_THREADS=2 ./conv_winograd_probe [reps]
#include <cmath>
#include <cstdio>
#include <random>
#include <string>

#include "onednn_conv_probe.h"

void speed(int reps) {
  const dt d = dt::f32;
  const int64_t n = 64;
  double total[2][2][3] = {};
  std::printf("%-22s %-6s %-4s %9s %9s %9s  impl(fwd / bwd_d / bwd_w)\n", "layer", "alg", "acts", "fwd", "bwd_d",
              "bwd_w");
  for (const Layer& L : kLayers) {
    if (L.k != 3 || L.s != 1 || L.c < 16) continue;
    const memory::dims src{n, L.c, L.hw, L.hw}, wts{L.o, L.c, 3, 3}, dst{n, L.o, L.hw, L.hw}, st{1, 1}, dil{0, 0},
        pd{1, 1};
    for (int a = 0; a < 2; ++a)
      for (int mode = 0; mode < 2; ++mode) {
        const auto alg = a == 0 ? algorithm::convolution_direct : algorithm::convolution_winograd;
        // Direct on channels-last: its nhwc kernels in place. Winograd has no nhwc kernel: `any`.
        const tag act = mode == 1 && a == 0 ? tag::nhwc : tag::any;
        const memory::desc a_src(src, d, act), a_w(wts, d, tag::any), a_dst(dst, d, act);
        const convolution_forward::primitive_desc fpd(
            {prop_kind::forward_training, alg, a_src, a_w, a_dst, st, dil, pd, pd}, eng);
        const convolution_backward_data::primitive_desc bdpd({alg, a_src, a_w, a_dst, st, dil, pd, pd}, eng, fpd);
        const convolution_backward_weights::primitive_desc bwpd({alg, a_src, a_w, a_dst, st, dil, pd, pd}, eng, fpd);
        auto user_act = [&](const memory::desc& chosen, const memory::dims& dims) {
          return mode == 1 ? memory::desc(dims, d, tag::nhwc) : chosen;
        };
        const memory::desc user_w(wts, d, tag::oihw);
        ConvPasses passes = conv_passes(fpd, bdpd, bwpd, user_act, src, dst, user_w);
        const std::array<double, 3> t = passes.time(reps);
        for (int p = 0; p < 3; ++p) total[a][mode][p] += t[p] * static_cast<double>(L.count);
        char name[64];
        std::snprintf(name, sizeof name, "%ldx%ld %ldx%ld x%ld", static_cast<long>(L.c), static_cast<long>(L.o),
                      static_cast<long>(L.hw), static_cast<long>(L.hw), static_cast<long>(L.count));
        std::printf("%-22s %-6s %-4s %9.3f %9.3f %9.3f  %s / %s / %s\n", name, a == 0 ? "direct" : "wino",
                    mode == 0 ? "blk" : "nhwc", t[0], t[1], t[2], fpd.impl_info_str(), bdpd.impl_info_str(),
                    bwpd.impl_info_str());
      }
  }
  std::printf("\nstep totals of these layers (ms, x count, f32, n=%ld):\n", static_cast<long>(n));
  for (int a = 0; a < 2; ++a)
    for (int m = 0; m < 2; ++m)
      std::printf("  %-6s %-4s fwd %8.2f bwd_d %8.2f bwd_w %8.2f total %8.2f\n", a == 0 ? "direct" : "wino",
                  m == 0 ? "blk" : "nhwc", total[a][m][0], total[a][m][1], total[a][m][2],
                  total[a][m][0] + total[a][m][1] + total[a][m][2]);
}

// The three passes of both algorithms on random data (batch 4) against f64 sums at sampled points:
// outputs and input gradients at 3000 points, weight gradients (a sum over the whole batch) at 300.
void accuracy() {
  struct L {
    int c, hw;
  };
  for (L l : {L{64, 32}, L{128, 16}, L{256, 8}, L{512, 4}}) {
    const int n = 4, C = l.c, O = l.c, H = l.hw;
    std::mt19937 g(1);
    std::normal_distribution<float> nd;
    std::vector<float> x(n * C * H * H), w(O * C * 9), gy(n * O * H * H);
    for (auto& v : x) v = nd(g);
    for (auto& v : w) v = nd(g) / std::sqrt(9.0f * C);
    for (auto& v : gy) v = nd(g);
    const memory::dims src{n, C, H, H}, wts{O, C, 3, 3}, dst{n, O, H, H};
    std::vector<float> out[2], dx[2], dw[2];
    for (int a = 0; a < 2; ++a) {
      auto alg = a ? algorithm::convolution_winograd : algorithm::convolution_direct;
      memory::desc ms(src, dt::f32, tag::nchw), mw(wts, dt::f32, tag::oihw), md(dst, dt::f32, tag::nchw);
      memory::desc as(src, dt::f32, tag::any), aw(wts, dt::f32, tag::any), ad(dst, dt::f32, tag::any);
      convolution_forward::primitive_desc fpd(
          {prop_kind::forward_training, alg, as, aw, ad, {1, 1}, {0, 0}, {1, 1}, {1, 1}}, eng);
      convolution_backward_data::primitive_desc bd({alg, as, aw, ad, {1, 1}, {0, 0}, {1, 1}, {1, 1}}, eng, fpd);
      convolution_backward_weights::primitive_desc bw({alg, as, aw, ad, {1, 1}, {0, 0}, {1, 1}, {1, 1}}, eng, fpd);
      auto to = [&](const memory::desc& user, const memory::desc& want, void* p) {
        memory u(user, eng, p);
        if (user == want) return u;
        memory m(want, eng);
        reorder(u, m).execute(strm, u, m);
        return m;
      };
      auto back = [&](memory m, const memory::desc& user, void* p) {
        memory u(user, eng, p);
        if (!(m.get_desc() == user)) reorder(m, u).execute(strm, m, u);
      };
      out[a].resize(gy.size());
      dx[a].resize(x.size());
      dw[a].resize(w.size());
      memory mx = to(ms, fpd.src_desc(), x.data()), mwt = to(mw, fpd.weights_desc(), w.data());
      memory mo = fpd.dst_desc() == md ? memory(md, eng, out[a].data()) : memory(fpd.dst_desc(), eng);
      convolution_forward(fpd).execute(strm, {{DNNL_ARG_SRC, mx}, {DNNL_ARG_WEIGHTS, mwt}, {DNNL_ARG_DST, mo}});
      back(mo, md, out[a].data());
      memory mgy = to(md, bd.diff_dst_desc(), gy.data()), mw2 = to(mw, bd.weights_desc(), w.data());
      memory mdx = bd.diff_src_desc() == ms ? memory(ms, eng, dx[a].data()) : memory(bd.diff_src_desc(), eng);
      convolution_backward_data(bd).execute(
          strm, {{DNNL_ARG_DIFF_DST, mgy}, {DNNL_ARG_WEIGHTS, mw2}, {DNNL_ARG_DIFF_SRC, mdx}});
      back(mdx, ms, dx[a].data());
      memory mgy2 = to(md, bw.diff_dst_desc(), gy.data()), mx2 = to(ms, bw.src_desc(), x.data());
      memory mdw = bw.diff_weights_desc() == mw ? memory(mw, eng, dw[a].data()) : memory(bw.diff_weights_desc(), eng);
      convolution_backward_weights(bw).execute(
          strm, {{DNNL_ARG_DIFF_DST, mgy2}, {DNNL_ARG_SRC, mx2}, {DNNL_ARG_DIFF_WEIGHTS, mdw}});
      back(mdw, mw, dw[a].data());
      strm.wait();
    }
    // The largest error at the sampled points, over the rms of the f64 values there.
    std::mt19937 pick(7);
    auto X = [&](int b, int c, int i, int j) -> double {
      return (i < 0 || j < 0 || i >= H || j >= H) ? 0.0 : x[((b * C + c) * H + i) * H + j];
    };
    auto GY = [&](int b, int o, int i, int j) -> double {
      return (i < 0 || j < 0 || i >= H || j >= H) ? 0.0 : gy[((b * O + o) * H + i) * H + j];
    };
    double e[3][2] = {}, rms[3] = {};
    const int S = 3000;
    for (int s = 0; s < S; ++s) {
      int b = pick() % n, o = pick() % O, i = pick() % H, j = pick() % H, c = pick() % C;
      double ref = 0;
      for (int cc = 0; cc < C; ++cc)
        for (int u = 0; u < 3; ++u)
          for (int v = 0; v < 3; ++v) ref += X(b, cc, i + u - 1, j + v - 1) * w[((o * C + cc) * 3 + u) * 3 + v];
      rms[0] += ref * ref;
      for (int a = 0; a < 2; ++a) e[0][a] = std::max(e[0][a], std::fabs(out[a][((b * O + o) * H + i) * H + j] - ref));
      // dx at (b, c, i, j)
      double rdx = 0;
      for (int oo = 0; oo < O; ++oo)
        for (int u = 0; u < 3; ++u)
          for (int v = 0; v < 3; ++v) rdx += GY(b, oo, i - u + 1, j - v + 1) * w[((oo * C + c) * 3 + u) * 3 + v];
      rms[1] += rdx * rdx;
      for (int a = 0; a < 2; ++a) e[1][a] = std::max(e[1][a], std::fabs(dx[a][((b * C + c) * H + i) * H + j] - rdx));
      if (s < 300) {  // dw at (o, c, u, v): sum over b, i, j
        int u = pick() % 3, v = pick() % 3;
        double rdw = 0;
        for (int bb = 0; bb < n; ++bb)
          for (int ii = 0; ii < H; ++ii)
            for (int jj = 0; jj < H; ++jj) rdw += GY(bb, o, ii, jj) * X(bb, c, ii + u - 1, jj + v - 1);
        rms[2] += rdw * rdw;
        for (int a = 0; a < 2; ++a) e[2][a] = std::max(e[2][a], std::fabs(dw[a][((o * C + c) * 3 + u) * 3 + v] - rdw));
      }
    }
    rms[0] = std::sqrt(rms[0] / S);
    rms[1] = std::sqrt(rms[1] / S);
    rms[2] = std::sqrt(rms[2] / 300);
    std::printf(
        "%3dx%3d %2dx%2d max |err|/rms: fwd direct %.1e wino %.1e | bwd_d direct %.1e wino %.1e | bwd_w direct %.1e "
        "wino %.1e\n",
        C, O, H, H, e[0][0] / rms[0], e[0][1] / rms[0], e[1][0] / rms[1], e[1][1] / rms[1], e[2][0] / rms[2],
        e[2][1] / rms[2]);
  }
}

int main(int argc, char** argv) {
  speed(argc > 1 ? std::atoi(argv[1]) : 10);
  std::printf("\n");
  accuracy();
}
