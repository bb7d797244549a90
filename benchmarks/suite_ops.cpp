// The ops suite: forward + backward of the neural-network ops at the shapes ResNet-18 (CIFAR layout,
// batch 64) and BERT-mini (batch 16, seq 128, hidden 256, 4 heads, vocabulary 30522) use. Its peer,
// benchmarks/peers/torch_ops.py, times the same cases in PyTorch under the same case names, and
// benchmarks/report.py puts both JSON files side by side.
#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "amp/autocast.h"
#include "autograd/engine.h"
#include "benchmarks/bench.h"
#include "core/rng.h"
#include "core/thread_pool.h"
#include "ops/memory_format.h"
#include "ops/functional.h"
#include "tensor/factory.h"

#ifdef PRECIS_BENCH_HAS_OPENMP
#include <omp.h>
#endif

namespace precis::bench {
namespace {

constexpr int64_t kBatch = 64;  // ResNet-18 CIFAR batch

// One ResNet-18 (CIFAR layout) convolution: input (64, cin, hw, hw), weight (cout, cin, k, k),
// no bias, padding 1 for 3×3 and 0 for 1×1.
struct ConvShape {
  int64_t cin, cout, k, stride, hw;
};

// Every distinct conv shape of ResNet-18 on 32×32 inputs (stem, the four stages, the three 1×1
// downsamples).
const ConvShape kConvShapes[] = {
    {3, 64, 3, 1, 32},    {64, 64, 3, 1, 32},   {64, 128, 3, 2, 32}, {128, 128, 3, 1, 16},
    {64, 128, 1, 2, 32},  {128, 256, 3, 2, 16}, {256, 256, 3, 1, 8}, {128, 256, 1, 2, 16},
    {256, 512, 3, 2, 8},  {512, 512, 3, 1, 4},  {256, 512, 1, 2, 8},
};

std::string conv_name(const ConvShape& c) {
  return "conv2d " + std::to_string(c.cin) + "->" + std::to_string(c.cout) + " k" + std::to_string(c.k) + " s" +
         std::to_string(c.stride) + " " + std::to_string(c.hw) + "x" + std::to_string(c.hw);
}

// A case: its name and a maker that allocates the inputs and returns the timed step. Its FLOPs
// are counted on the first warm-up run (time_step): conv2d's, and the matmuls of attention.
struct OpCase {
  std::string name;
  std::function<std::function<void()>()> make;
  std::string dtype = "f32";  ///< the record's dtype label (and the --cases suffix)
};

// One timed step: forward, then the gradients of `wrt` for `grad_out` (undefined for a scalar
// loss) through autograd::grad, which leaves .grad alone (as torch.autograd.grad in the peer).
std::function<void()> step(std::function<Tensor()> forward, std::vector<Tensor> wrt, Tensor grad_out) {
  return [forward = std::move(forward), wrt = std::move(wrt), grad_out = std::move(grad_out)] {
    const Tensor y = forward();
    const autograd::TensorList grads =
        grad_out.defined() ? autograd::grad({y}, wrt, {grad_out}) : autograd::grad({y}, wrt);
    (void)grads;
  };
}

Tensor leaf(const Shape& sizes, Generator& gen, double scale = 1.0) {
  Tensor t = randn(sizes, {}, &gen);
  if (scale != 1.0) t = mul(t, scale);
  t.requires_grad_(true);
  return t;
}

std::vector<OpCase> make_cases() {
  std::vector<OpCase> cases;
  for (const ConvShape& c : kConvShapes) {
    const int64_t pad = c.k == 3 ? 1 : 0;
    const int64_t out_hw = (c.hw + 2 * pad - c.k) / c.stride + 1;
    cases.push_back({conv_name(c), [c, pad, out_hw] {
                       Generator gen(1);
                       const Tensor x = leaf({kBatch, c.cin, c.hw, c.hw}, gen);
                       const Tensor w = leaf({c.cout, c.cin, c.k, c.k}, gen, 0.05);
                       const Tensor gy = randn({kBatch, c.cout, out_hw, out_hw}, {}, &gen);
                       return step([=] { return conv2d(x, w, Tensor(), {c.stride, c.stride}, {pad, pad}); }, {x, w}, gy);
                     }});
  }
  // The same with channels-last activations (x, the output and the gradients; the weight as the
  // peer's, torch.channels_last): oneDNN's nhwc kernels, no activation reorders. Named apart so the
  // conv total stays the NCHW one.
  for (const ConvShape& c : kConvShapes) {
    const int64_t pad = c.k == 3 ? 1 : 0;
    const int64_t out_hw = (c.hw + 2 * pad - c.k) / c.stride + 1;
    cases.push_back({"channels_last " + conv_name(c), [c, pad, out_hw] {
                       Generator gen(1);
                       const Tensor x = contiguous(leaf({kBatch, c.cin, c.hw, c.hw}, gen), MemoryFormat::ChannelsLast)
                                            .detach()
                                            .requires_grad_(true);
                       const Tensor w = leaf({c.cout, c.cin, c.k, c.k}, gen, 0.05);
                       const Tensor gy =
                           contiguous(randn({kBatch, c.cout, out_hw, out_hw}, {}, &gen), MemoryFormat::ChannelsLast);
                       return step([=] { return conv2d(x, w, Tensor(), {c.stride, c.stride}, {pad, pad}); }, {x, w}, gy);
                     }});
  }
  // batch_norm in training mode on every ResNet-18 activation shape (running statistics updated),
  // NCHW and channels-last.
  for (bool cl : {false, true})
  for (const auto& [channels, hw] : std::vector<std::pair<int64_t, int64_t>>{{64, 32}, {128, 16}, {256, 8}, {512, 4}}) {
    const std::string name = std::string(cl ? "channels_last " : "") + "batch_norm " + std::to_string(kBatch) + "x" +
                             std::to_string(channels) + "x" + std::to_string(hw) + "x" + std::to_string(hw);
    cases.push_back({name, [channels, hw, cl] {
                       Generator gen(2);
                       const MemoryFormat f = cl ? MemoryFormat::ChannelsLast : MemoryFormat::Contiguous;
                       const Tensor x = contiguous(leaf({kBatch, channels, hw, hw}, gen), f).detach().requires_grad_(true);
                       const Tensor w = leaf({channels}, gen), b = leaf({channels}, gen);
                       const Tensor rm = zeros({channels}), rv = ones({channels});
                       const Tensor gy = contiguous(randn({kBatch, channels, hw, hw}, {}, &gen), f);
                       return step([=] { return batch_norm(x, rm, rv, w, b, true, 0.1, 1e-5); }, {x, w, b}, gy);
                     }});
  }
  // interpolate x2, a U-Net or FPN decoder's upsampling, forward and backward, NCHW and channels-last.
  for (bool cl : {false, true})
  for (const bool bilinear : {false, true}) {
    std::string name = cl ? "channels_last interpolate " : "interpolate ";
    name += bilinear ? "bilinear x2 " : "nearest x2 ";
    name += std::to_string(kBatch) + "x64x32x32";
    cases.push_back({name, [bilinear, cl] {
                       Generator gen(4);
                       const MemoryFormat f = cl ? MemoryFormat::ChannelsLast : MemoryFormat::Contiguous;
                       const Tensor x = contiguous(leaf({kBatch, 64, 32, 32}, gen), f).detach().requires_grad_(true);
                       const Tensor gy = contiguous(randn({kBatch, 64, 64, 64}, {}, &gen), f);
                       const InterpolateMode mode = bilinear ? InterpolateMode::bilinear : InterpolateMode::nearest;
                       const InterpolateOptions o{.scale_factor = {2.0}, .mode = mode};
                       return step([=] { return interpolate(x, o); }, {x}, gy);
                     }});
  }
  cases.push_back({"layer_norm 2048x256", [] {
                     Generator gen(3);
                     const Tensor x = leaf({2048, 256}, gen), w = leaf({256}, gen), b = leaf({256}, gen);
                     const Tensor gy = randn({2048, 256}, {}, &gen);
                     return step([=] { return layer_norm(x, {256}, w, b, 1e-12); }, {x, w, b}, gy);
                   }});
  cases.push_back({"softmax 16x4x128x128", [] {
                     Generator gen(4);
                     const Tensor x = leaf({16, 4, 128, 128}, gen);
                     const Tensor gy = randn({16, 4, 128, 128}, {}, &gen);
                     return step([=] { return softmax(x, -1); }, {x}, gy);
                   }});
  cases.push_back({"cross_entropy 2048x30522", [] {
                     Generator gen(5);
                     const Tensor logits = leaf({2048, 30522}, gen);
                     const Tensor target = randint(0, 30522, {2048}, {.dtype = DType::i64}, &gen);
                     return step([=] { return cross_entropy(logits, target); }, {logits}, Tensor());
                   }});
  // BERT-mini's masked-LM decoder and loss over all 2048 tokens as one op (no (M, V) logits), in
  // f32 and under bf16 autocast (fp32 leaves, the GEMMs in bf16, the loss fp32). Peer: the
  // unfused cross_entropy(linear(...)) a PyTorch user writes, under torch.autocast for bf16.
  for (const bool bf16 : {false, true}) {
    cases.push_back({"linear_cross_entropy 2048x256->30522", [bf16] {
                       Generator gen(11);
                       const Tensor x = leaf({2048, 256}, gen), w = leaf({30522, 256}, gen, 0.05),
                                    b = leaf({30522}, gen);
                       const Tensor target = randint(0, 30522, {2048}, {.dtype = DType::i64}, &gen);
                       return step(
                           [=] {
                             amp::Autocast ac(DType::bf16, DeviceType::cpu, bf16);
                             return linear_cross_entropy(x, w, b, target);
                           },
                           {x, w, b}, Tensor());
                     }, bf16 ? "bf16" : "f32"});
  }
  // BERT-mini attention: q, k, v (16, 4, 128, 64).
  for (const bool masked : {false, true}) {
    cases.push_back({masked ? "attention 16x4x128x64 padding mask" : "attention 16x4x128x64", [masked] {
                       Generator gen(6);
                       const Tensor q = leaf({16, 4, 128, 64}, gen), k = leaf({16, 4, 128, 64}, gen),
                                    v = leaf({16, 4, 128, 64}, gen);
                       const Tensor gy = randn({16, 4, 128, 64}, {}, &gen);
                       // A key-padding mask as BERT builds it: (B, 1, 1, L), true = attend; sample b
                       // has its last 4·(b % 8) positions padded.
                       Tensor mask;
                       if (masked) {
                         std::vector<int64_t> keep(16 * 128);
                         for (int64_t b = 0; b < 16; ++b)
                           for (int64_t l = 0; l < 128; ++l) keep[b * 128 + l] = l < 128 - 4 * (b % 8);
                         mask = ne(from_vector<int64_t>(keep, {16, 1, 1, 128}), Scalar(0));
                       }
                       return step([=] { return scaled_dot_product_attention(q, k, v, mask); }, {q, k, v}, gy);
                     }});
  }
  // Element-wise work on operands laid out across the output's order (forward only, no autograd):
  // the tiled iteration of ops/cpu/loops.h. Peer: the same expressions in PyTorch.
  cases.push_back({"layout: transpose copy 2048x2048", [] {
                     const Tensor a = randn({2048, 2048});
                     return std::function<void()>([a] { (void)a.t().contiguous(); });
                   }});
  cases.push_back({"layout: add contiguous + transposed 2048x2048", [] {
                     const Tensor a = randn({2048, 2048}), b = randn({2048, 2048});
                     return std::function<void()>([a, b] { (void)add(a, b.t()); });
                   }});
  cases.push_back({"layout: add two transposed 2048x2048", [] {
                     const Tensor a = randn({2048, 2048}), b = randn({2048, 2048});
                     return std::function<void()>([a, b] { (void)add(a.t(), b.t()); });
                   }});
  cases.push_back({"layout: NCHW to NHWC copy 64x64x32x32", [] {
                     const Tensor x = randn({64, 64, 32, 32});
                     return std::function<void()>([x] { (void)x.permute({0, 2, 3, 1}).contiguous(); });
                   }});
  // The per-op front-end (precision hook, checks, kernel lookup, backward recording) on tensors
  // too small for the kernel to matter, 100 calls a repetition; and one large unary op.
  cases.push_back({"elementwise: 100x tanh 64 forward", [] {
                     const Tensor x = randn({64});
                     return std::function<void()>([x] {
                       for (int i = 0; i < 100; ++i) (void)tanh(x);
                     });
                   }});
  cases.push_back({"elementwise: 100x exp 64 forward+backward", [] {
                     Generator gen(7);
                     const Tensor x = leaf({64}, gen), gy = randn({64}, {}, &gen);
                     return std::function<void()>([x, gy] {
                       for (int i = 0; i < 100; ++i) (void)autograd::grad({exp(x)}, {x}, {gy});
                     });
                   }});
  cases.push_back({"elementwise: 100x mul 64 forward+backward", [] {
                     Generator gen(9);
                     const Tensor a = leaf({64}, gen), b = leaf({64}, gen), gy = randn({64}, {}, &gen);
                     return std::function<void()>([a, b, gy] {
                       for (int i = 0; i < 100; ++i) (void)autograd::grad({mul(a, b)}, {a, b}, {gy});
                     });
                   }});
  cases.push_back({"elementwise: gelu 1024x1024", [] {
                     Generator gen(8);
                     const Tensor x = leaf({1024, 1024}, gen), gy = randn({1024, 1024}, {}, &gen);
                     return step([=] { return gelu(x); }, {x}, gy);
                   }});
  // BERT-mini's intermediate layer as one op (ops/linear_gelu.cpp). Peer: F.gelu(F.linear()).
  cases.push_back({"linear_gelu 2048x256->1024", [] {
                     Generator gen(10);
                     const Tensor x = leaf({2048, 256}, gen), w = leaf({1024, 256}, gen, 0.0625),
                                  b = leaf({1024}, gen, 0.1), gy = randn({2048, 1024}, {}, &gen);
                     return step([=] { return linear_gelu(x, w, b); }, {x, w, b}, gy);
                   }});
  // fp8 GEMM at BERT-mini's intermediate-layer shape, forward only, beside the bf16 GEMM of the
  // same values. On the CPU scaled_matmul is an emulation (an exact widening to bf16, then the bf16
  // GEMM): it measures what emulation costs, never an fp8 speed-up.
  cases.push_back({"fp8 emulation: scaled_matmul e4m3 2048x256->1024", [] {
                     Generator gen(11);
                     const Tensor x = (randn({2048, 256}, {}, &gen) * 64.0).to(DType::f8_e4m3);
                     const Tensor w = (randn({1024, 256}, {}, &gen) * 64.0).to(DType::f8_e4m3);
                     const Tensor s = full({}, 1.0 / 64);
                     return std::function<void()>([=] { (void)scaled_matmul(x, w.t(), s, s); });
                   }, "f8_e4m3"});
  cases.push_back({"fp8 emulation: the same GEMM in bf16 2048x256->1024", [] {
                     Generator gen(11);
                     const Tensor x = (randn({2048, 256}, {}, &gen) * 64.0).to(DType::f8_e4m3).to(DType::bf16);
                     const Tensor w = (randn({1024, 256}, {}, &gen) * 64.0).to(DType::f8_e4m3).to(DType::bf16);
                     return std::function<void()>([=] { (void)matmul(x, w.t()); });
                   }, "bf16"});
  // The fp8 recipe's cast of BERT-mini's intermediate activations (2048 x 1024 bf16 -> E4M3 and
  // amax): the one-pass kernel, and the same result composed of ops as amp did before it.
  cases.push_back({"fp8 emulation: scaled_fp8_cast 2048x1024 -> e4m3", [] {
                     Generator gen(12);
                     const Tensor x = (randn({2048, 1024}, {}, &gen) * 4.0).to(DType::bf16);
                     const Tensor s = full({}, 32.0);
                     return std::function<void()>([=] { (void)scaled_fp8_cast(x, s, DType::f8_e4m3); });
                   }, "bf16"});
  cases.push_back({"fp8 emulation: the same cast composed of ops 2048x1024 -> e4m3", [] {
                     Generator gen(12);
                     const Tensor x = (randn({2048, 1024}, {}, &gen) * 4.0).to(DType::bf16);
                     const Tensor s = full({}, 32.0);
                     return std::function<void()>([=] {
                       (void)minimum(maximum(mul(x.to(DType::f32), s), -448.0), 448.0).to(DType::f8_e4m3);
                       (void)max(abs(x)).to(DType::f32);
                     });
                   }, "bf16"});
  return cases;
}

void set_threads(int n) {
  set_num_threads(n);  // precis's pool, and through it the OpenMP count precis gives oneDNN
#ifdef PRECIS_BENCH_HAS_OPENMP
  omp_set_num_threads(n);
#endif
}

SuiteReport run_ops(const Options& options) {
  SuiteReport report;
  report.note =
      "Forward + backward, f32: each repetition runs the op and then autograd::grad of its inputs and "
      "parameters for a fixed upstream gradient (the loss: for a scalar 1). conv2d: ResNet-18 CIFAR "
      "shapes, batch 64, case 'conv2d Cin->Cout kK sS HxW' (HxW = input size), no bias, padding 1 for "
      "3x3; input and weight gradients. FLOPs are counted by the ops (conv2d forward and both gradients; "
      "attention's matmuls). 'resnet18 conv total' sums "
      "the conv cases' times (each distinct shape once). batch_norm: training, running statistics "
      "updated. 'channels_last' cases: the same with channels-last activations and gradients (the "
      "peer's weight torch.channels_last too). attention: scaled_dot_product_attention, q, k, v (16, 4, 128, 64) (12·B·H·L²·d FLOPs); "
      "'padding mask' adds a bool (16, 1, 1, 128) key mask. 'layout:' cases: forward only, f32, "
      "operands whose innermost dim is strided in memory (transposed, NCHW read as NHWC). GFLOP/s is 0 "
      "for the memory-bound ops. 'elementwise:' cases: the op front-end's cost (100 calls on 64 values a "
      "repetition) and gelu forward+backward. 'linear_gelu': gelu(linear()) as one op, BERT-mini's "
      "intermediate layer, x, W and b gradients (6·M·K·N FLOPs). 'linear_cross_entropy': BERT-mini's "
      "decoder and loss over 2048 tokens as one op, f32 and under bf16 autocast (dtype bf16), x, W and b "
      "gradients (6·M·K·V FLOPs; the peer: cross_entropy(linear())). 'fp8 emulation:' cases: forward only; "
      "scaled_matmul on the CPU widens fp8 exactly to bf16 and runs the bf16 GEMM, so it shows the cost "
      "of emulation beside that bf16 GEMM, not an fp8 speed-up (no peer case); scaled_fp8_cast, the recipe's "
      "one-pass cast, beside the same cast composed of ops (no peer case). "
      "benchmarks/peers/torch_ops.py times the same cases in PyTorch.";
  const int initial_threads = get_num_threads();
  for (const OpCase& c : make_cases()) {
    if (!case_selected(options, c.name + " " + c.dtype)) continue;
    const std::function<void()> run = c.make();
    for (int threads : options.threads) {
      set_threads(threads);
      const StepTiming st = time_step(run, options, c.name + " " + c.dtype + ", " + std::to_string(threads) +
                                                           (threads == 1 ? " thread" : " threads"));
      const Timing& t = st.timing;
      Record r;
      r.suite = "ops";
      r.case_name = c.name;
      r.impl = "precis";
      r.dtype = c.dtype;
      r.threads = threads;
      r.median_ms = t.median_ms;
      r.min_ms = t.min_ms;
      r.flops = st.flops;
      r.gflops = st.flops > 0 && t.median_ms > 0 ? st.flops / (t.median_ms * 1e6) : 0;
      r.reps = t.reps;
      report.records.push_back(r);
    }
  }
  // The conv total per thread count (of every conv case: not with --cases).
  for (int threads : options.cases.empty() ? options.threads : std::vector<int>{}) {
    Record total;
    total.suite = "ops";
    total.case_name = "resnet18 conv total";
    total.impl = "precis";
    total.dtype = "f32";
    total.threads = threads;
    double flops = 0;
    for (const Record& r : report.records) {
      if (r.threads != threads || r.case_name.rfind("conv2d ", 0) != 0) continue;
      total.median_ms += r.median_ms;
      total.min_ms += r.min_ms;
      total.reps = total.reps == 0 ? r.reps : std::min(total.reps, r.reps);
      flops += r.gflops * r.median_ms * 1e6;
    }
    total.flops = flops;
    total.gflops = total.median_ms > 0 ? flops / (total.median_ms * 1e6) : 0;
    report.records.push_back(total);
  }
  set_threads(initial_threads);
  return report;
}

const bool kRegistered = register_suite(
    {"ops", "NN ops forward+backward at ResNet-18 / BERT-mini shapes (peer: benchmarks/peers/torch_ops.py)", &run_ops});

}  // namespace
}  // namespace precis::bench
