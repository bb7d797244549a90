// conv_bw_split_probe: oneDNN's convolution weight gradient at ResNet-18 CIFAR's shapes (batch 64,
// channels-last activations), run as one primitive on the team's threads against the batch split
// per thread: one primitive per half batch, each planned for one thread (created with OpenMP's
// thread count at 1) and run concurrently in one parallel region. The question: whether the
// weight gradient's lower efficiency at two threads (its work split and the reduction across
// threads) is recovered by giving each thread its own batch half. The sum of the halves' weight
// gradients, which a real split would add, is not timed (at most 2.4 M elements).
// With `dw-dtype`: bf16 activations, the whole-batch weight gradient asked as bf16 (what conv2d
// returns; autocast's cast backward widens it) and as f32 (the master weight's dtype): whether the
// f32 result picks a faster kernel (docs/design/cpu-conv.md).
// Build: g++ -O2 -fopenmp -std=c++20 -DPRECIS_HAS_ONEDNN=1 -I. benchmarks/tools/conv_bw_split_probe.cpp -ldnnl \
//            -o conv_bw_split_probe
// Run:   OMP_WAIT_POLICY=passive ./conv_bw_split_probe [bf16|f32|dw-dtype] [reps]   (2 threads)
#include <omp.h>

#include <cstdio>
#include <string>

#include "benchmarks/tools/onednn_conv_probe.h"
#include "ops/cpu/onednn_compat.h"

namespace {

// The weight-gradient primitive of layer l at batch n (activations nhwc of dtype t, weights any,
// the weight gradient of dtype wdt), with its arguments over zero-filled buffers, planned for the
// OpenMP thread count in force.
struct WeightGradient {
  convolution_backward_weights prim;
  std::unordered_map<int, memory> args;
  std::string impl;
  void run(stream& s) {
    prim.execute(s, args);
    s.wait();
  }
};

WeightGradient make(const Layer& l, int64_t n, dt t, dt wdt) {
  const int64_t pad = l.k / 2, ho = (l.hw + 2 * pad - l.k) / l.s + 1;
  const memory::desc src({n, l.c, l.hw, l.hw}, t, tag::nhwc), dst({n, l.o, ho, ho}, t, tag::nhwc);
  const memory::desc w({l.o, l.c, l.k, l.k}, t, tag::any), dw({l.o, l.c, l.k, l.k}, wdt, tag::any);
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

// The bf16 weight gradient asked as bf16 and as f32: each shape, and the step's total.
void compare_dw_dtypes(int reps) {
  double bf16_total = 0, f32_total = 0;
  for (const Layer& l : kLayers) {
    WeightGradient b = make(l, 64, dt::bf16, dt::bf16), f = make(l, 64, dt::bf16, dt::f32);
    const double tb = time_ms([&] { b.run(strm); }, reps), tf = time_ms([&] { f.run(strm); }, reps);
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

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "bf16";
  const dt t = mode == "f32" ? dt::f32 : dt::bf16;
  const int reps = argc > 2 ? std::atoi(argv[2]) : 10;
  omp_set_num_threads(2);
  if (mode == "dw-dtype") {
    compare_dw_dtypes(reps);
    return 0;
  }
  double whole_total = 0, split_total = 0;
  for (const Layer& l : kLayers) {
    WeightGradient whole = make(l, 64, t, t);
    omp_set_num_threads(1);  // the halves' primitives plan for one thread each
    WeightGradient half[2] = {make(l, 32, t, t), make(l, 32, t, t)};
    omp_set_num_threads(2);
    stream streams[2] = {stream(eng), stream(eng)};
    const double w = time_ms([&] { whole.run(strm); }, reps);
    const double s = time_ms(
        [&] {
#pragma omp parallel num_threads(2)
          half[omp_get_thread_num()].run(streams[omp_get_thread_num()]);
        },
        reps);
    std::printf("%3lldx%-3lld k%lld s%lld %2lldx%-2lld x%lld: whole %7.3f ms  split %7.3f ms  %.2fx  (%s)\n",
                static_cast<long long>(l.c), static_cast<long long>(l.o), static_cast<long long>(l.k),
                static_cast<long long>(l.s), static_cast<long long>(l.hw), static_cast<long long>(l.hw),
                static_cast<long long>(l.count), w, s, s / w, whole.impl.c_str());
    whole_total += w * static_cast<double>(l.count);
    split_total += s * static_cast<double>(l.count);
  }
  std::printf("step (x count): whole %.1f ms, split %.1f ms (%.2fx)\n", whole_total, split_total,
              split_total / whole_total);
}
