// conv_layout_probe: what the activation layout costs oneDNN at the ResNet-18 CIFAR (b64) shapes.
// For every conv of the network it times forward, backward-data and backward-weights (the three
// passes of a training step) with the activations held by the caller in
//   nchw  plain NCHW, primitive created with `any`, reorders in and out per call (precis until
//         2026-12-02),
//   nhwc  channels-last, primitive created with nhwc activations (no activation reorders),
//   blk   the primitive's own blocked layout (nChw16c), i.e. no activation reorders at all;
// weights always come from plain OIHW and are reordered per call where the primitive wants
// another layout (they change every step). Prints per-layer ms and the implementation chosen.
// Build: g++ -O2 -std=c++20 conv_layout_probe.cpp -ldnnl -o conv_layout_probe
// Run:   OMP_NUM_THREADS=2 ./conv_layout_probe [f32|bf16] [reps]
#include <cstdio>
#include <string>

#include "onednn_conv_probe.h"

const char* mode_name(int m) { return m == 0 ? "nchw" : m == 1 ? "nhwc" : "blk"; }

int main(int argc, char** argv) {
  const bool bf16 = argc > 1 && std::string(argv[1]) == "bf16";
  const int reps = argc > 2 ? std::atoi(argv[2]) : 20;
  const dt d = bf16 ? dt::bf16 : dt::f32;
  const int64_t n = 64;
  double total[3][3] = {};
  std::printf("%-26s %-4s %9s %9s %9s  impl(fwd / bwd_d / bwd_w)\n", "layer", "mode", "fwd", "bwd_d", "bwd_w");
  for (const Layer& L : kLayers) {
    const int64_t pad = L.k / 2, ho = (L.hw + 2 * pad - L.k) / L.s + 1;
    const memory::dims src{n, L.c, L.hw, L.hw}, wts{L.o, L.c, L.k, L.k}, dst{n, L.o, ho, ho}, st{L.s, L.s},
        dil{0, 0}, pd{pad, pad};
    for (int mode = 0; mode < 3; ++mode) {
      const tag act = mode == 1 ? tag::nhwc : tag::any;
      const memory::desc a_src(src, d, act), a_w(wts, d, tag::any), a_dst(dst, d, act);
      const convolution_forward::primitive_desc fpd(
          {prop_kind::forward_training, algorithm::convolution_direct, a_src, a_w, a_dst, st, dil, pd, pd}, eng);
      const convolution_backward_data::primitive_desc bdpd(
          {algorithm::convolution_direct, a_src, a_w, a_dst, st, dil, pd, pd}, eng, fpd);
      const convolution_backward_weights::primitive_desc bwpd(
          {algorithm::convolution_direct, a_src, a_w, a_dst, st, dil, pd, pd}, eng, fpd);
      // The caller's layout of activations: plain NCHW (mode 0), NHWC (1) or whatever each
      // primitive chose (2).
      auto user_act = [&](const memory::desc& chosen, const memory::dims& dims) {
        return mode == 0 ? memory::desc(dims, d, tag::nchw) : mode == 1 ? memory::desc(dims, d, tag::nhwc) : chosen;
      };
      const memory::desc user_w(wts, d, tag::oihw);
      ConvPasses passes = conv_passes(fpd, bdpd, bwpd, user_act, src, dst, user_w);
      const std::array<double, 3> t = passes.time(reps);
      for (int p = 0; p < 3; ++p) total[mode][p] += t[p] * static_cast<double>(L.count);
      char name[64];
      std::snprintf(name, sizeof name, "%ldx%ld k%ld s%ld %ldx%ld x%ld", static_cast<long>(L.c), static_cast<long>(L.o),
                    static_cast<long>(L.k), static_cast<long>(L.s), static_cast<long>(L.hw), static_cast<long>(L.hw),
                    static_cast<long>(L.count));
      std::printf("%-26s %-4s %9.3f %9.3f %9.3f  %s / %s / %s\n", name, mode_name(mode), t[0], t[1], t[2],
                  fpd.impl_info_str(), bdpd.impl_info_str(), bwpd.impl_info_str());
    }
  }
  std::printf("\nstep totals (ms, x count, %s, n=%ld):\n", bf16 ? "bf16" : "f32", static_cast<long>(n));
  for (int m = 0; m < 3; ++m)
    std::printf("  %-4s fwd %8.2f bwd_d %8.2f bwd_w %8.2f total %8.2f\n", mode_name(m), total[m][0], total[m][1],
                total[m][2], total[m][0] + total[m][1] + total[m][2]);
}
