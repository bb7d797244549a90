// The models suite: one whole training step (forward, backward, SGD step) of the bundled models on
// synthetic data, in f32 and under bf16 autocast, as a user writes it:
//
//   opt.zero_grad(); { amp::Autocast ac(bf16); loss = cross_entropy(model(x), y); } loss.backward(); opt.step();
//
// Cases (benchmarks/peers/torch_models.py runs the same ones in PyTorch):
//   resnet18_cifar b64  resnet18 with the CIFAR stem, batch 64 of 3×32×32, 10 classes, channels-last
//                       activations (the input made contiguous(MemoryFormat::ChannelsLast); the
//                       PyTorch peer does the same with torch.channels_last, model and input)
//   resnet18_cifar_nchw b64  the same with contiguous (NCHW) activations
//   resnet18_cifar b64 checkpoint-full  the channels-last step with each residual block an
//                       activation-checkpointed region (ResNet::set_checkpointing); the PyTorch peer
//                       wraps each block in torch.utils.checkpoint (non-reentrant). FLOPs include
//                       the recomputed forward
//   bert_mini b16x128   BERT-mini (L4 H256 A4 I1024, vocabulary 30522) masked-LM head, batch 16 of
//                       128 tokens, every token a prediction target (labels = inputs), dropout on
//   bert_mini b16x128 fused-loss  the same loss on every token without the logits: the decoder and
//                       cross_entropy as one linear_cross_entropy (MaskedLMOptions::return_logits =
//                       false); the PyTorch peer, which has no such op, makes the logits
//   bert_mini b16x128 masked15  the same with 15 % of the tokens (307 of 2048, fixed positions) as
//                       targets and the head at those positions only (as precis-train trains;
//                       MaskedLMOptions::masked_positions_only)
//   bert_mini b16x128 fp8-linear  bf16 only: the first case with the linear layers in fp8 (not the
//                       decoder), as --precision fp8 trains: the emulation's cost on a CPU; no peer
//   bert_mini b16x128 masked15 checkpoint-full, ... checkpoint-selective  masked15 with each encoder
//                       layer an activation-checkpointed region (BertModel::set_checkpointing: full,
//                       or selective with BERT's own keep policy; docs/checkpointing.md); the PyTorch
//                       peer wraps each layer in torch.utils.checkpoint (non-reentrant), selective
//                       with a policy that saves the matrix products (aten.mm/addmm) and recomputes
//                       the rest. Their FLOPs include the recomputed forward (the work done)
//
// Peak memory: each case runs in a child process forked before it builds anything, and reports the
// child's VmHWM (/proc/self/status) as peak_rss_mb, and its VmRSS before the model was built as
// base_rss_mb. (When the parent already runs threads, e.g. after another suite, forking is unsafe;
// the case then runs in-process and peak_rss_mb is the process peak so far.)
//
// FLOPs: counted from the model on the first warm-up step (time_step, ops/profiler.h: every matmul,
// linear and conv2d of the forward and the backward), not entered by hand.
//
// --device cuda[:N] (benchmarks/peers/torch_models.py --device cuda runs the same cases): the GPU
// cases, one training step with SGD momentum:
//   resnet50 b256 224   ResNet-50 (ImageNet layout, 1000 classes), batch 256 of 3×224×224, NCHW
//                       ("-nchw") and channels-last ("-cl": the input, so every activation, NHWC)
//   bert_mini b64x128   BERT-mini as above, batch 64 of 128 tokens (8192 tokens), dropout on
// each in the variants below, named as the PyTorch peer names its own (the layout suffix only for
// ResNet-50), so that report.py sets each beside PyTorch's of the same math:
//   f32-notf32   f32, "highest" everywhere: IEEE f32 GEMMs and convolutions (ops/float32_precision.h)
//   f32          f32 with the defaults, PyTorch's: convolutions TF32, GEMMs IEEE (ResNet-50 only:
//                without convolutions it is f32-notf32)
//   f32-tf32     f32, "high" everywhere: TF32 GEMMs and convolutions
//   f16-amp      f16 autocast + the dynamic loss scaler (torch.autocast + GradScaler)
//   bf16-amp     bf16 autocast, no scaler (bf16 has fp32's range)
//   fp8-linear   BERT-mini only: bf16-amp with the linear layers' GEMMs in fp8 (cuBLASLt, delayed
//                scaling; precis-train --precision fp8's recipe, not BERT's vocabulary decoder)
//   graphs-f16-amp, graphs-bf16-amp   the same step captured once in a CUDA graph (core/cuda_graph.h)
//                and replayed: one launch per step instead of one per kernel (torch.cuda.CUDAGraph,
//                whole-network capture); the optimizer is capturable (its lr read from the device)
//                and the FLOPs are the eager step's
// --cases S keeps the (case, variant) whose "case variant" or "case dtype" contains S.
// Each step ends with a wait for the device's stream, so the time is the device's. Per case: the
// median step time, images or tokens per second at that time, and the peak of the device
// allocator's allocated bytes over the case (model, optimizer state, scaler, activations; reset
// after the previous case's memory was released). They run in this process (a CUDA context does
// not survive fork). No usable GPU: a DeviceError before the first case, exit status 1.

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "amp/autocast.h"
#include "amp/fp8_linear.h"
#include "amp/grad_scaler.h"
#include "autograd/checkpoint.h"
#include "core/allocator.h"
#include "core/device.h"
#include "core/error.h"
#include "benchmarks/bench.h"
#include "core/cuda_graph.h"
#include "core/rng.h"
#include "core/synchronize.h"
#include "core/thread_pool.h"
#include "models/bert.h"
#include "models/nn/fp8.h"
#include "models/nn/linear.h"
#include "models/resnet.h"
#include "ops/float32_precision.h"
#include "ops/memory_format.h"
#include "ops/functional.h"
#include "ops/profiler.h"
#include "optim/sgd.h"
#include "tensor/factory.h"

namespace precis::bench {
namespace {

struct ModelCase {
  const char* name;
  // Builds the model and data and returns one training step under `dtype` (f32: no autocast).
  std::function<std::function<void()>(DType dtype)> make;
  bool bf16_only = false;  // a bf16 recipe (fp8 linear layers): no f32 run
  bool f32_only = false;   // an f32 setting (the CPU's Winograd convolutions): no bf16 run
};

// fp8: the model's linear layers (not BERT's vocabulary decoder) run in fp8 inside the bf16
// region (nn::enable_fp8, amp::Fp8Autocast) and their scales move after each step.
std::function<void()> training_step(std::shared_ptr<nn::Module> model, DType dtype,
                                    std::function<Tensor(nn::Module&)> loss_fn, bool fp8 = false) {
  if (fp8)
    nn::enable_fp8(*model, {}, [](const std::string& name, const nn::Linear&) {
      return name.find("decoder") == std::string::npos;
    });
  auto opt = std::make_shared<optim::SGD>(model->parameters(), optim::SGDOptions{.lr = 1e-3, .momentum = 0.9});
  return [model, opt, dtype, loss_fn, fp8] {
    opt->zero_grad();
    Tensor loss;
    {
      amp::Autocast ac(DType::bf16, DeviceType::cpu, dtype == DType::bf16);
      amp::Fp8Autocast fp8_region(fp8);
      loss = loss_fn(*model);
    }
    loss.backward();
    opt->step();
    if (fp8) nn::update_fp8(*model);
  };
}

// Labels for 15 % of the 2048 tokens of a (16, 128) batch: the ids at the 307 positions with the
// smallest splitmix64(1 + position) keys, -100 elsewhere. A fixed rule, not a generator draw, so
// that benchmarks/peers/torch_models.py picks the very same positions.
Tensor masked15_labels(const Tensor& ids) {
  auto splitmix64 = [](uint64_t x) {
    uint64_t z = x + 0x9e3779b97f4a7c15ULL;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  };
  const int64_t n = ids.numel(), masked = n * 15 / 100;
  std::vector<int64_t> order(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return splitmix64(1 + a) < splitmix64(1 + b); });
  const std::vector<int64_t> id = ids.contiguous().to_vector<int64_t>();
  std::vector<int64_t> labels(static_cast<size_t>(n), -100);
  for (int64_t k = 0; k < masked; ++k) labels[order[k]] = id[order[k]];
  return from_vector<int64_t>(labels, ids.sizes());
}

// resnet18_cifar's step with the input (and so every activation) in `format`.
std::function<void()> resnet18_cifar_step(DType dtype, MemoryFormat format,
                                          autograd::CheckpointMode checkpointing = autograd::CheckpointMode::none) {
  manual_seed(1);
  std::shared_ptr<models::ResNet> model = models::resnet18_cifar({.num_classes = 10});
  model->set_checkpointing({.mode = checkpointing});
  Tensor x = contiguous(randn({64, 3, 32, 32}), format);
  Tensor y = randint(0, 10, {64});
  return training_step(model, dtype, [x, y](nn::Module& m) { return cross_entropy(m.forward(x), y); });
}

// bert_mini b16x128's step: the MLM loss of forward_with_labels with `options`, on every token
// (labels = the ids) or, with masked15, on masked15_labels(ids).
std::function<void()> bert_mini_step(DType dtype, bool masked15, models::MaskedLMOptions options, bool fp8 = false,
                                     autograd::CheckpointMode checkpointing = autograd::CheckpointMode::none) {
  manual_seed(1);
  auto model = std::make_shared<models::BertForMaskedLM>(models::BertConfig::mini(30522));
  model->bert->set_checkpointing({.mode = checkpointing});
  Tensor ids = randint(0, 30522, {16, 128});
  Tensor labels = masked15 ? masked15_labels(ids) : ids;
  return training_step(
      model, dtype,
      [ids, labels, options](nn::Module& m) {
        return dynamic_cast<models::BertForMaskedLM&>(m).forward_with_labels(ids, Tensor(), labels, options).loss;
      },
      fp8);
}

// `step` with the CPU's f32 convolutions allowed TF32-sized error, so oneDNN's Winograd kernels
// take the 3x3 stride-1 ones (ops/float32_precision.h; set per call: the guard restores the
// default between cases).
std::function<void()> with_winograd(std::function<void()> step) {
  return [step = std::move(step)] {
    Float32PrecisionGuard winograd(Float32OpFamily::conv, Float32Precision::tf32, DeviceType::cpu);
    step();
  };
}

const ModelCase kCases[] = {
    {"resnet18_cifar b64", [](DType dtype) { return resnet18_cifar_step(dtype, MemoryFormat::ChannelsLast); }},
    {"resnet18_cifar_nchw b64", [](DType dtype) { return resnet18_cifar_step(dtype, MemoryFormat::Contiguous); }},
    {"resnet18_cifar b64 checkpoint-full",
     [](DType dtype) {
       return resnet18_cifar_step(dtype, MemoryFormat::ChannelsLast, autograd::CheckpointMode::full);
     }},
    // The same with the CPU's conv precision tf32: Winograd convolutions, no PyTorch peer (its CPU
    // convolutions are direct under every setting). FLOPs stay the direct convolutions' count.
    {"resnet18_cifar b64 winograd",
     [](DType dtype) { return with_winograd(resnet18_cifar_step(dtype, MemoryFormat::ChannelsLast)); }, false, true},
    {"resnet18_cifar_nchw b64 winograd",
     [](DType dtype) { return with_winograd(resnet18_cifar_step(dtype, MemoryFormat::Contiguous)); }, false, true},
    {"bert_mini b16x128", [](DType dtype) { return bert_mini_step(dtype, false, {}); }},
    {"bert_mini b16x128 fused-loss", [](DType dtype) { return bert_mini_step(dtype, false, {.return_logits = false}); }},
    {"bert_mini b16x128 masked15",
     [](DType dtype) { return bert_mini_step(dtype, true, {.masked_positions_only = true}); }},
    // precis-train --precision fp8's recipe: on the CPU the fp8 GEMMs are an exact emulation
    // (widened to bf16) and the casts are composed of ops, so this is the recipe's cost here, not a
    // speed-up (docs/fp8.md); no peer runs it.
    {"bert_mini b16x128 fp8-linear", [](DType dtype) { return bert_mini_step(dtype, false, {}, true); }, true},
    {"bert_mini b16x128 masked15 checkpoint-full",
     [](DType dtype) {
       return bert_mini_step(dtype, true, {.masked_positions_only = true}, false, autograd::CheckpointMode::full);
     }},
    {"bert_mini b16x128 masked15 checkpoint-selective",
     [](DType dtype) {
       return bert_mini_step(dtype, true, {.masked_positions_only = true}, false, autograd::CheckpointMode::selective);
     }},
};

double status_mb(const char* field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  const size_t n = std::strlen(field);
  while (std::getline(in, line))
    if (line.compare(0, n, field) == 0 && line.size() > n && line[n] == ':')
      return std::stod(line.substr(n + 1)) / 1024.0;  // kB
  return 0.0;
}

// What a case's run sends back (plain data: it crosses a pipe from the child).
struct CaseResult {
  double median_ms = 0, min_ms = 0, peak_rss_mb = 0, base_rss_mb = 0, flops = 0;
  int reps = 0;
  char error[512] = {};
};

CaseResult run_case(const ModelCase& c, DType dtype, int threads, const Options& options) {
  CaseResult r;
  try {
    set_num_threads(threads);
    r.base_rss_mb = status_mb("VmRSS");
    std::function<void()> step = c.make(dtype);
    const std::string title = std::string(c.name) + " " + std::string(dtype_name(dtype)) + ", " +
                              std::to_string(threads) + (threads == 1 ? " thread" : " threads");
    const StepTiming st = time_step(step, options, title);
    r.median_ms = st.timing.median_ms, r.min_ms = st.timing.min_ms, r.reps = st.timing.reps, r.flops = st.flops;
    r.peak_rss_mb = status_mb("VmHWM");
  } catch (const std::exception& e) {
    std::snprintf(r.error, sizeof r.error, "%s", e.what());
  }
  return r;
}

// Runs the case in a forked child (a fresh peak-memory counter) when this process is still
// single-threaded; otherwise in-process.
CaseResult run_isolated(const ModelCase& c, DType dtype, int threads, const Options& options, bool* isolated) {
  *isolated = process_threads() == 1;
  if (!*isolated) return run_case(c, dtype, threads, options);
  return run_forked<CaseResult>("models suite", [&] { return run_case(c, dtype, threads, options); });
}

// ---- GPU cases (--device cuda) -----------------------------------------------------------------

struct GpuCase {
  const char* name;
  const char* items;   // what items_per_s counts
  double items_per_step;
  bool convolutions;   // runs cuDNN (and has an image layout)
  bool channels_last;  // the input (so every activation) channels-last: the "-cl" variants
  // Builds the model and data on `device` and returns one training step: f32 (no autocast) or
  // autocast to `dtype` (f16 with the loss scaler, bf16 without); see gpu_training_step.
  std::function<std::function<void()>(Device device, DType dtype, bool graphed, bool fp8, double* flops)> make;
};

// One GPU variant: the autocast dtype (f32: none) and, for f32, the precision of GEMMs and
// convolutions (nullopt: the defaults).
struct GpuVariant {
  const char* name;  // torch_models.py's name without the layout suffix
  DType dtype;
  std::optional<Float32Precision> f32_precision;
  bool needs_convolutions;  // differs from another variant only where the model has convolutions
  bool graphed = false;     // captured once in a CUDA graph, replayed
  bool fp8 = false;         // linear layers in fp8 (BERT-mini only: ResNet-50's one is its head)
};

const GpuVariant kGpuVariants[] = {
    {"f32-notf32", DType::f32, Float32Precision::ieee, false},
    {"f32", DType::f32, std::nullopt, true},
    {"f32-tf32", DType::f32, Float32Precision::tf32, false},
    {"f16-amp", DType::f16, std::nullopt, false},
    {"bf16-amp", DType::bf16, std::nullopt, false},
    {"graphs-f16-amp", DType::f16, std::nullopt, false, true},
    {"graphs-bf16-amp", DType::bf16, std::nullopt, false, true},
    {"fp8-linear", DType::bf16, std::nullopt, false, false, true},
};

// Waits until the device has run everything queued so far (a step's time is the device's).
void device_wait(Device device) {
  if (device.is_cuda()) cuda::synchronize(device.index);
}

// One training step of `model` on `device` (the caller's loss_fn reads inputs already there), as a
// function that runs it and waits for the device. graphed: two eager warm-up steps (the first
// one's FLOPs written to *flops), then one capture of the step; the function replays it.
std::function<void()> gpu_training_step(std::shared_ptr<nn::Module> model, Device device, DType dtype, bool graphed,
                                        bool fp8, double* flops, std::function<Tensor(nn::Module&)> loss_fn) {
  model->to(device);  // before the optimizer: its state is made on the device
  model->train();
  if (fp8)  // --precision fp8's layers: every linear layer but BERT's vocabulary decoder
    nn::enable_fp8(*model, {}, [](const std::string& name, const nn::Linear&) {
      return name.find("decoder") == std::string::npos;
    });
  auto opt = std::make_shared<optim::SGD>(model->parameters(), optim::SGDOptions{.lr = 1e-3, .momentum = 0.9});
  const bool amp = dtype != DType::f32;
  auto scaler =
      std::make_shared<amp::GradScaler>(amp::GradScalerOptions{.enabled = dtype == DType::f16, .device = device});
  // The step's device work: no host wait in it, so that it can be captured.
  auto work = [model, opt, scaler, device, dtype, amp, fp8, loss_fn] {
    opt->zero_grad();
    Tensor loss;
    {
      amp::Autocast ac(amp ? dtype : DType::f16, device.type, amp);
      amp::Fp8Autocast fp8_region(fp8);
      loss = loss_fn(*model);
    }
    scaler->scale(loss).backward();
    scaler->step(*opt);
    scaler->update();
    if (fp8) nn::update_fp8(*model);
  };
  if (!graphed) {
    return [work, device] {
      work();
      device_wait(device);
    };
  }
  opt->set_capturable(true);  // a schedule could set the lr between replays
  {
    profiler::FlopCounter counter;
    work();
    *flops = counter.flops();
  }
  work();
  device_wait(device);
  auto graph = std::make_shared<cuda::Graph>(device.index);
  cuda::capture(*graph, work);
  // The replays write the model's parameters and the optimizer's state: `work` keeps them alive.
  return [graph, work, device] {
    graph->replay();
    device_wait(device);
  };
}

std::function<void()> resnet50_gpu_step(Device device, DType dtype, MemoryFormat format, bool graphed, double* flops) {
  manual_seed(1);
  std::shared_ptr<models::ResNet> model = models::resnet50({.num_classes = 1000});
  Tensor x = contiguous(randn({256, 3, 224, 224}).to(device), format);
  Tensor y = randint(0, 1000, {256}).to(device);
  return gpu_training_step(model, device, dtype, graphed, false, flops,
                           [x, y](nn::Module& m) { return cross_entropy(m.forward(x), y); });
}

const GpuCase kGpuCases[] = {
    {"resnet50 b256 224", "images", 256, true, false,
     [](Device device, DType dtype, bool graphed, bool, double* flops) {
       return resnet50_gpu_step(device, dtype, MemoryFormat::Contiguous, graphed, flops);
     }},
    // What PyTorch users run on a GPU (torch_models.py's "-cl" variants): NHWC end to end.
    {"resnet50 b256 224", "images", 256, true, true,
     [](Device device, DType dtype, bool graphed, bool, double* flops) {
       return resnet50_gpu_step(device, dtype, MemoryFormat::ChannelsLast, graphed, flops);
     }},
    {"bert_mini b64x128", "tokens", 64 * 128, false, false,
     [](Device device, DType dtype, bool graphed, bool fp8, double* flops) {
       manual_seed(1);
       auto model = std::make_shared<models::BertForMaskedLM>(models::BertConfig::mini(30522));
       Tensor ids = randint(0, 30522, {64, 128}).to(device);
       return gpu_training_step(model, device, dtype, graphed, fp8, flops, [ids](nn::Module& m) {
         auto& bert = dynamic_cast<models::BertForMaskedLM&>(m);
         return models::BertForMaskedLM::loss(bert.forward(ids, Tensor()), ids);
       });
     }},
};

SuiteReport run_models_gpu(const Options& options, Device device) {
  // Fail before any case, and clearly, when the device cannot hold a tensor.
  if (cuda_device_count() <= device.index) {
    std::string why = cuda_unavailable_reason();
    if (why.empty()) {
      why = "no such device is visible (cuda_device_count() = " + std::to_string(cuda_device_count()) + ")";
      try {
        (void)zeros({1}, {.device = device});
      } catch (const std::exception& e) {
        why += ": " + std::string(e.what());
      }
    }
    throw DeviceError("precis-bench models --device " + device.str() + ": " + why +
                      "; the GPU cases need a machine with a usable GPU");
  }
  SuiteReport report;
  report.note =
      "GPU training steps on " + device.str() +
      " (forward, backward, SGD momentum step), variants named as torch_models.py's: f32-notf32 = IEEE f32 GEMMs "
      "and convolutions, f32 = the defaults (PyTorch's: TF32 convolutions, IEEE GEMMs), f32-tf32 = TF32 GEMMs and "
      "convolutions, f16-amp = autocast f16 + dynamic loss scaler, bf16-amp = autocast bf16, graphs-* = the same step "
      "captured once in a CUDA graph and replayed, fp8-linear = bf16-amp with BERT-mini's linear layers in fp8; "
      "resnet50 -nchw (NCHW) and -cl "
      "(channels-last input, so NHWC activations end to end) batch 256 of 3×224×224, 1000 classes; bert_mini batch 64×128 tokens, vocabulary 30522, MLM loss on every token. "
      "Each step waits for the device. images/s or tokens/s at the median; peak_device_mb (JSON) is the device "
      "allocator's peak allocated bytes over the case, peak_device_mb_steps the same over the timed steps alone.";
  Allocator& alloc = allocator_for(device);
  for (const GpuCase& c : kGpuCases)
    for (const GpuVariant& v : kGpuVariants) {
      if (v.needs_convolutions && !c.convolutions) continue;
      if (v.fp8 && c.convolutions) continue;
      const std::string dtype(dtype_name(v.dtype));
      const std::string variant = std::string(v.name) + (c.channels_last ? "-cl" : c.convolutions ? "-nchw" : "");
      if (!case_selected(options, std::string(c.name) + " " + variant) &&
          !case_selected(options, std::string(c.name) + " " + dtype))
        continue;
      alloc.empty_cache();
      alloc.reset_peak_stats();
      StepTiming st;
      size_t warmup_peak = 0, steps_peak = 0;
      {
        std::optional<Float32PrecisionGuard> precision;
        if (v.f32_precision) precision.emplace(*v.f32_precision);
        double graphed_flops = 0;
        std::function<void()> step = c.make(device, v.dtype, v.graphed, v.fp8, &graphed_flops);
        // The case's peak (building the model, the warm-up: cuDNN's algorithm search and its
        // workspaces, a graph's capture) and the timed steps' own, as torch_models.py reports both.
        const std::string title = std::string(c.name) + " " + variant + ", " + device.str();
        st = time_step(step, options, title, [&alloc, &warmup_peak] {
          warmup_peak = alloc.stats().peak_allocated;
          alloc.reset_peak_stats();
        });
        steps_peak = alloc.stats().peak_allocated;
        if (v.graphed) st.flops = graphed_flops;  // a replay issues no op the counter could see
      }  // the model, optimizer and data are released here, and the precision settings restored
      const Timing& t = st.timing;
      Record rec;
      rec.suite = "models";
      rec.case_name = c.name;
      rec.impl = "precis";
      rec.dtype = dtype;
      rec.threads = get_num_threads();
      rec.median_ms = t.median_ms;
      rec.min_ms = t.min_ms;
      rec.flops = st.flops;
      rec.gflops = t.median_ms > 0 ? st.flops / (t.median_ms * 1e6) : 0.0;
      rec.reps = t.reps;
      rec.device = device.str();
      rec.items = c.items;
      rec.items_per_s = t.median_ms > 0 ? c.items_per_step / (t.median_ms * 1e-3) : 0.0;
      rec.peak_device_mb = static_cast<double>(std::max(warmup_peak, steps_peak)) / (1024.0 * 1024.0);
      rec.peak_device_mb_steps = static_cast<double>(steps_peak) / (1024.0 * 1024.0);
      rec.variant = variant;
      std::fprintf(stderr, "%-20s %-15s %s  median %9.2f ms  min %9.2f ms  %10.0f %s/s  peak %8.1f MiB (steps %.1f)\n",
                   c.name, variant.c_str(), rec.device.c_str(), t.median_ms, t.min_ms, rec.items_per_s, c.items,
                   rec.peak_device_mb, rec.peak_device_mb_steps);
      report.records.push_back(rec);
    }
  return report;
}

SuiteReport run_models(const Options& options) {
  const Device device = Device::parse(options.device);
  if (device.is_cuda()) return run_models_gpu(options, device);
  SuiteReport report;
  report.note =
      "One training step (forward, backward, SGD momentum step) on synthetic data; bf16 = autocast with "
      "fp32 weights. resnet18_cifar: batch 64 of 3×32×32; bert_mini: batch 16×128 tokens, vocabulary 30522, "
      "MLM loss on every token (fused-loss: the same without the logits, linear_cross_entropy; masked15: "
      "on 15 % of them, the head at those positions only; winograd: f32 with the CPU's conv precision tf32, so "
      "oneDNN's Winograd kernels for the 3×3 stride-1 convolutions; fp8-linear: bf16 with the linear layers' GEMMs in "
      "fp8, emulated exactly on the CPU, so its cost here, not a speed-up; checkpoint-full / -selective: each ResNet "
      "block or each BERT encoder layer activation-checkpointed). FLOPs: the step's matmul, linear, conv2d and "
      "linear_cross_entropy FLOPs (forward, backward and any recomputed forward), "
      "counted from the model. Each case runs in a fresh child "
      "process; peak_rss_mb (JSON) is its VmHWM.";
  for (const ModelCase& c : kCases)
    for (DType dtype : {DType::f32, DType::bf16})
      for (int threads : options.threads) {
        if (c.bf16_only && dtype != DType::bf16) continue;
        if (c.f32_only && dtype != DType::f32) continue;
        if (!case_selected(options, std::string(c.name) + (dtype == DType::f32 ? " f32" : " bf16"))) continue;
        bool isolated = false;
        const CaseResult r = run_isolated(c, dtype, threads, options, &isolated);
        if (r.error[0] != '\0') throw std::runtime_error(std::string("models suite, ") + c.name + ": " + r.error);
        Record rec;
        rec.suite = "models";
        rec.case_name = c.name;
        rec.impl = "precis";
        rec.dtype = dtype == DType::f32 ? "f32" : "bf16";
        rec.threads = threads;
        rec.median_ms = r.median_ms;
        rec.min_ms = r.min_ms;
        rec.flops = r.flops;
        rec.gflops = r.median_ms > 0 ? r.flops / (r.median_ms * 1e6) : 0.0;
        rec.reps = r.reps;
        rec.peak_rss_mb = r.peak_rss_mb;
        rec.base_rss_mb = r.base_rss_mb;
        std::fprintf(stderr, "%-20s %-4s %d threads  median %9.1f ms  min %9.1f ms  peak %7.1f MB%s\n", c.name,
                     rec.dtype.c_str(), threads, r.median_ms, r.min_ms, r.peak_rss_mb,
                     isolated ? "" : " (in-process: peak of the process so far)");
        report.records.push_back(rec);
      }
  return report;
}

const bool kRegistered = register_suite(
    {"models",
     "training step of resnet18 (CIFAR, b64) and BERT-mini (b16x128), f32 and bf16, with peak RSS; with --device "
     "cuda: ResNet-50 (b256, 224x224) and BERT-mini (b64x128), f32 (IEEE, default, TF32), f16 and bf16 AMP, with "
     "peak device memory",
     &run_models});

}  // namespace
}  // namespace precis::bench
