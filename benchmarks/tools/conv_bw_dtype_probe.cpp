// conv_bw_dtype_probe: oneDNN's bf16 convolution weight gradient at ResNet-18 CIFAR's shapes (batch
// 64, channels-last bf16 activations), asked for a bf16 weight gradient (what precis's conv2d
// returns, autocast's cast backward then widens it) and for an f32 one (the master weight's dtype):
// whether the f32 result picks a faster kernel or saves time. Wall time, the minimum of reps calls,
// 2 threads; the step total weighs each shape by its count in the network.
// Build: g++ -O2 -fopenmp -std=c++20 -DPRECIS_HAS_ONEDNN=1 -I. benchmarks/tools/conv_bw_dtype_probe.cpp -ldnnl \
//            -o conv_bw_dtype_probe
// Run:   OMP_WAIT_POLICY=passive ./conv_bw_dtype_probe [reps]
#include <omp.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "benchmarks/tools/onednn_conv_probe.h"
#include "ops/cpu/onednn_compat.h"

namespace {

// The weight-gradient primitive of layer l (bf16 src and diff_dst, diff_weights of dtype wdt) with
// its arguments over zero-filled buffers.
struct WeightGradient {
  convolution_backward_weights prim;
  std::unordered_map<int, memory> args;
  std::string impl;
  void run() {
    prim.execute(strm, args);
    strm.wait();
  }
};

WeightGradient make(const Layer& l, dt wdt) {
  const int64_t pad = l.k / 2, ho = (l.hw + 2 * pad - l.k) / l.s + 1;
  const memory::desc src({64, l.c, l.hw, l.hw}, dt::bf16, tag::nhwc), dst({64, l.o, ho, ho}, dt::bf16, tag::nhwc);
  const memory::desc w({l.o, l.c, l.k, l.k}, dt::bf16, tag::any), dw({l.o, l.c, l.k, l.k}, wdt, tag::any);
  const precis::cpu::onednn::ConvWindow win{{l.s, l.s}, {0, 0}, {pad, pad}, {pad, pad}};
  const auto hint = precis::cpu::onednn::conv_forward_pd(eng, prop_kind::forward_training, src, w, nullptr, dst, win);
  const auto pd = precis::cpu::onednn::conv_backward_weights_pd(eng, src, dw, nullptr, dst, win, hint);
  WeightGradient g{convolution_backward_weights(pd), {}, pd.impl_info_str()};
  g.args = {{DNNL_ARG_SRC, memory(pd.src_desc(), eng)},
            {DNNL_ARG_DIFF_DST, memory(pd.diff_dst_desc(), eng)},
            {DNNL_ARG_DIFF_WEIGHTS, memory(pd.diff_weights_desc(), eng)},
            {DNNL_ARG_SCRATCHPAD, memory(pd.scratchpad_desc(), eng)}};
  zero_fill(g.args.at(DNNL_ARG_SRC));
  zero_fill(g.args.at(DNNL_ARG_DIFF_DST));
  return g;
}

}  // namespace

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::atoi(argv[1]) : 10;
  omp_set_num_threads(2);
  double bf16_total = 0, f32_total = 0;
  for (const Layer& l : kLayers) {
    WeightGradient b = make(l, dt::bf16), f = make(l, dt::f32);
    const double tb = time_ms([&] { b.run(); }, reps), tf = time_ms([&] { f.run(); }, reps);
    std::printf("%3lldx%-3lld k%lld s%lld %2lldx%-2lld x%lld: bf16 dW %7.3f ms  f32 dW %7.3f ms  %.2fx  (%s | %s)\n",
                static_cast<long long>(l.c), static_cast<long long>(l.o), static_cast<long long>(l.k),
                static_cast<long long>(l.s), static_cast<long long>(l.hw), static_cast<long long>(l.hw),
                static_cast<long long>(l.count), tb, tf, tf / tb, b.impl.c_str(), f.impl.c_str());
    bf16_total += tb * static_cast<double>(l.count);
    f32_total += tf * static_cast<double>(l.count);
  }
  std::printf("step (x count): bf16 dW %.1f ms, f32 dW %.1f ms (%.2fx)\n", bf16_total, f32_total,
              f32_total / bf16_total);
}
