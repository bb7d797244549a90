// The amp suite: what the loss scaler adds to an optimizer step. On realistic parameter sets
// (ResNet-18's 62 tensors, 11.7M parameters; BERT-mini's 71 tensors, 11.2M parameters, most in
// one embedding table), f32 parameters with f32 gradients, each impl is one whole optimizer step:
//
//   opt.step                    opt.step() alone: the baseline
//   scaler.step                 scaler.step(opt) + update(): a read-only non-finite check of the
//                               gradients, the optimizer divides by the scale in its update
//   unscale_+scaler.step        scaler.unscale_(opt) (one fused pass: unscale in place, non-finite
//                               counts, squared norms) + scaler.step(opt) + update()
//   clip+opt.step               optim::clip_grad_norm_ + opt.step(): an fp32 loop with clipping
//   unscale_+clip+scaler.step   unscale_ + scaler.clip_grad_norm_ (reuses unscale_'s norms) + step
//
// The scale is 1 (and never grows) so that repeated unscaling leaves the gradients as they are,
// and max_norm is above the gradients' norm, so clipping measures the norm and scales nothing;
// the arithmetic per element is the same as with any other scale.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "amp/grad_scaler.h"
#include "benchmarks/bench.h"
#include "core/rng.h"
#include "core/thread_pool.h"
#include "ops/functional.h"
#include "optim/adam.h"
#include "optim/clip_grad.h"
#include "optim/sgd.h"
#include "tensor/factory.h"

namespace precis::bench {
namespace {

// torchvision resnet18 (ImageNet head): conv and BatchNorm weights and biases, the fc layer.
std::vector<Shape> resnet18_shapes() {
  std::vector<Shape> s;
  auto conv_bn = [&](int64_t out, int64_t in, int64_t k) {
    s.push_back({out, in, k, k});
    s.push_back({out});
    s.push_back({out});
  };
  conv_bn(64, 3, 7);
  int64_t in = 64;
  for (int64_t width : {64, 128, 256, 512}) {
    for (int block = 0; block < 2; ++block) {
      conv_bn(width, block == 0 ? in : width, 3);
      conv_bn(width, width, 3);
      if (block == 0 && in != width) conv_bn(width, in, 1);  // the downsample branch
    }
    in = width;
  }
  s.push_back({1000, 512});
  s.push_back({1000});
  return s;
}

// BERT-mini (L=4, H=256, 4 heads, I=1024, 30522-token vocabulary) with its pooler.
std::vector<Shape> bert_mini_shapes() {
  constexpr int64_t H = 256, I = 1024;
  std::vector<Shape> s = {{30522, H}, {512, H}, {2, H}, {H}, {H}};
  for (int layer = 0; layer < 4; ++layer) {
    for (int proj = 0; proj < 4; ++proj) {  // query, key, value, attention output
      s.push_back({H, H});
      s.push_back({H});
    }
    s.push_back({H});  // attention LayerNorm
    s.push_back({H});
    s.push_back({I, H});
    s.push_back({I});
    s.push_back({H, I});
    s.push_back({H});
    s.push_back({H});  // output LayerNorm
    s.push_back({H});
  }
  s.push_back({H, H});  // pooler
  s.push_back({H});
  return s;
}

struct ParamSet {
  const char* name;
  std::vector<Shape> shapes;
};

SuiteReport run_amp(const Options& options) {
  SuiteReport report;
  report.baseline_impl = "opt.step";
  const ParamSet sets[] = {{"resnet18", resnet18_shapes()}, {"bert-mini", bert_mini_shapes()}};
  int64_t counts[2] = {0, 0};
  size_t tensors[2] = {0, 0};
  const int initial_threads = get_num_threads();
  for (size_t si = 0; si < 2; ++si) {
    const ParamSet& set = sets[si];
    Generator gen(3);
    std::vector<Tensor> params;
    for (const Shape& shape : set.shapes) {
      Tensor p = (randn(shape, {}, &gen) * 0.02).requires_grad_();
      p.set_grad(randn(shape, {}, &gen) * 1e-3);
      counts[si] += p.numel();
      params.push_back(p);
    }
    tensors[si] = params.size();
    for (const char* optimizer : {"adam", "sgd"}) {
      std::unique_ptr<optim::Optimizer> opt;
      if (std::string(optimizer) == "adam")
        opt = std::make_unique<optim::Adam>(params, optim::AdamOptions{.lr = 1e-6});
      else
        opt = std::make_unique<optim::SGD>(params, optim::SGDOptions{.lr = 1e-6, .momentum = 0.9});
      const amp::GradScalerOptions scaler_options{.init_scale = 1.0, .growth_interval = int64_t{1} << 40};
      amp::GradScaler s_step(scaler_options), s_unscale(scaler_options), s_clip(scaler_options);
      constexpr double kMaxNorm = 1e9;
      const std::vector<std::string> names = {"opt.step", "scaler.step", "unscale_+scaler.step", "clip+opt.step",
                                              "unscale_+clip+scaler.step"};
      const std::vector<std::function<void()>> impls = {
          [&] { opt->step(); },
          [&] {
            s_step.step(*opt);
            s_step.update();
          },
          [&] {
            s_unscale.unscale_(*opt);
            s_unscale.step(*opt);
            s_unscale.update();
          },
          [&] {
            optim::clip_grad_norm_(params, kMaxNorm);
            opt->step();
          },
          [&] {
            s_clip.unscale_(*opt);
            s_clip.clip_grad_norm_(*opt, kMaxNorm);
            s_clip.step(*opt);
            s_clip.update();
          },
      };
      for (int threads : options.threads) {
        set_num_threads(threads);
        const std::vector<Timing> timings = time_interleaved(impls, options);
        for (size_t i = 0; i < impls.size(); ++i) {
          Record r;
          r.suite = "amp";
          r.case_name = std::string(set.name) + "/" + optimizer;
          r.impl = names[i];
          r.dtype = "f32";
          r.threads = threads;
          r.median_ms = timings[i].median_ms;
          r.min_ms = timings[i].min_ms;
          r.reps = timings[i].reps;
          report.records.push_back(r);
        }
      }
    }
  }
  set_num_threads(initial_threads);
  report.note =
      "Case = parameter set / optimizer; every impl is one whole optimizer step over the set (f32 "
      "parameters and gradients): resnet18 = " +
      std::to_string(tensors[0]) + " tensors, " + std::to_string(counts[0]) + " parameters; bert-mini = " +
      std::to_string(tensors[1]) + " tensors, " + std::to_string(counts[1]) +
      " parameters. Adam (moments in fp32) and SGD with momentum. opt.step: the optimizer alone; "
      "scaler.step: GradScaler::step + update with a read-only gradient check (the optimizer "
      "unscales inside its update); unscale_+scaler.step: the fused unscale_ pass first; "
      "clip+opt.step: optim::clip_grad_norm_ (its own norm pass) then the step, no scaler; "
      "unscale_+clip+scaler.step: clipping reuses unscale_'s norms. Scale 1 and max_norm above the "
      "norm, so repetitions leave the gradients unchanged. No GFLOP/s: memory-bound passes.";
  return report;
}

const bool kRegistered = register_suite(
    {"amp", "GradScaler unscale_/step overhead against the optimizer step alone (ResNet-18, BERT-mini)", &run_amp});

}  // namespace
}  // namespace precis::bench
