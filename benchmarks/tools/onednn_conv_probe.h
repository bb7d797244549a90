// What the oneDNN convolution probes (conv_layout_probe, conv_gemm_probe, conv_winograd_probe)
// share: ResNet-18 CIFAR's convolutions, one engine and stream, a primitive with its reorders
// from and to the caller's layouts, and the timing (the minimum of reps calls). Header-only:
// each probe is one translation unit built by hand (its first lines say how).
#pragma once

#include <oneapi/dnnl/dnnl.hpp>

#include <time.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstring>
#include <functional>
#include <unordered_map>
#include <utility>
#include <vector>

using namespace dnnl;
using tag = memory::format_tag;
using dt = memory::data_type;

struct Layer {
  int64_t c, o, hw, k, s, count;
};

// ResNet-18 CIFAR: stem, 4 stages of 2 basic blocks, 1x1 projections at each stride-2 stage.
inline const std::vector<Layer> kLayers = {
    {3, 64, 32, 3, 1, 1},     {64, 64, 32, 3, 1, 4},    {64, 128, 32, 3, 2, 1},  {128, 128, 16, 3, 1, 3},
    {64, 128, 32, 1, 2, 1},   {128, 256, 16, 3, 2, 1},  {256, 256, 8, 3, 1, 3},  {128, 256, 16, 1, 2, 1},
    {256, 512, 8, 3, 2, 1},   {512, 512, 4, 3, 1, 3},   {256, 512, 8, 1, 2, 1},
};

inline engine eng(engine::kind::cpu, 0);
inline stream strm(eng);

// cpu: process CPU time instead of wall time. With one thread it is the time the work itself
// took, immune to the preemption a shared machine inflicts (which quantizes wall times at ~16 ms).
inline bool g_cpu_time = false;
inline double now_ms() {
  if (!g_cpu_time)
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

// The minimum over reps calls of f (after one untimed): on a shared, loaded machine the least
// disturbed estimate.
inline double time_ms(const std::function<void()>& f, int reps) {
  f();
  strm.wait();
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    const double a = now_ms();
    f();
    strm.wait();
    t.push_back(now_ms() - a);
  }
  return *std::min_element(t.begin(), t.end());
}

// Runs `prim` with `args`, but inputs given in the caller's layout are reordered into the
// primitive's layout first and outputs reordered back afterwards.
struct Op {
  primitive prim;
  std::unordered_map<int, memory> args;
  std::vector<std::pair<reorder, std::pair<memory, memory>>> pre, post;
  void run() {
    for (auto& r : pre) r.first.execute(strm, r.second.first, r.second.second);
    prim.execute(strm, args);
    for (auto& r : post) r.first.execute(strm, r.second.first, r.second.second);
  }
};

// Zeros: the same speed as data for these kernels.
inline void zero_fill(const memory& m) { std::memset(m.get_data_handle(), 0, m.get_desc().get_size()); }

// Gives `op` the argument `arg` held by the caller in `user` layout (zero-filled), with the
// reorder to or from the primitive's `chosen` layout.
inline void bind(Op& op, int arg, const memory::desc& user, const memory::desc& chosen, bool output) {
  memory u(user, eng), c = user == chosen ? u : memory(chosen, eng);
  zero_fill(u);
  if (!(user == chosen)) {
    if (output) op.post.push_back({reorder(c, u), {c, u}});
    else op.pre.push_back({reorder(u, c), {u, c}});
  }
  op.args[arg] = c;
}

// The three passes of a training step's convolution (forward, input gradient, weight gradient),
// their activations held by the caller in the layout user_act(chosen, dims) gives for the layout
// the primitive chose, their weights in plain OIHW (user_w), reordered per call where needed.
struct ConvPasses {
  Op forward, backward_data, backward_weights;
  /// The three passes' times (ms, time_ms).
  std::array<double, 3> time(int reps) {
    return {time_ms([&] { forward.run(); }, reps), time_ms([&] { backward_data.run(); }, reps),
            time_ms([&] { backward_weights.run(); }, reps)};
  }
};

inline ConvPasses conv_passes(const convolution_forward::primitive_desc& fpd,
                              const convolution_backward_data::primitive_desc& bdpd,
                              const convolution_backward_weights::primitive_desc& bwpd,
                              const std::function<memory::desc(const memory::desc&, const memory::dims&)>& user_act,
                              const memory::dims& src, const memory::dims& dst, const memory::desc& user_w) {
  ConvPasses p;
  Op& f = p.forward;
  f.prim = convolution_forward(fpd);
  bind(f, DNNL_ARG_SRC, user_act(fpd.src_desc(), src), fpd.src_desc(), false);
  bind(f, DNNL_ARG_WEIGHTS, user_w, fpd.weights_desc(), false);
  bind(f, DNNL_ARG_DST, user_act(fpd.dst_desc(), dst), fpd.dst_desc(), true);
  Op& bd = p.backward_data;
  bd.prim = convolution_backward_data(bdpd);
  bind(bd, DNNL_ARG_DIFF_DST, user_act(bdpd.diff_dst_desc(), dst), bdpd.diff_dst_desc(), false);
  bind(bd, DNNL_ARG_WEIGHTS, user_w, bdpd.weights_desc(), false);
  bind(bd, DNNL_ARG_DIFF_SRC, user_act(bdpd.diff_src_desc(), src), bdpd.diff_src_desc(), true);
  Op& bw = p.backward_weights;
  bw.prim = convolution_backward_weights(bwpd);
  bind(bw, DNNL_ARG_DIFF_DST, user_act(bwpd.diff_dst_desc(), dst), bwpd.diff_dst_desc(), false);
  bind(bw, DNNL_ARG_SRC, user_act(bwpd.src_desc(), src), bwpd.src_desc(), false);
  bind(bw, DNNL_ARG_DIFF_WEIGHTS, user_w, bwpd.diff_weights_desc(), true);
  return p;
}
