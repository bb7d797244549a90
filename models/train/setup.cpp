// Building a run from its options: optimizer, schedule, resume identity, option checks, and the
// names of the option values.
#include "models/train/setup.h"

#include <cmath>

#include "amp/autocast.h"
#include "core/cpu_features.h"
#include "core/error.h"
#include "core/synchronize.h"
#include "models/train/trainer.h"
#include "tensor/factory.h"
#include "optim/adam.h"
#include "optim/sgd.h"

namespace precis::train {

const char* precision_name(DType dtype) {
  switch (dtype) {
    case DType::f32: return "f32";
    case DType::bf16: return "bf16";
    case DType::f16: return "f16";
    default: return "other";
  }
}

PrecisionChoice choose_precision(const std::string& name, Device device) {
  if (name == "f32") return {DType::f32, "--precision f32"};
  if (name == "bf16") return {DType::bf16, "--precision bf16"};
  if (name == "f16") return {DType::f16, "--precision f16"};
  if (name == "fp8")
    return {DType::bf16, "--precision fp8: linear layers' GEMMs in fp8 with delayed scaling, the rest bf16 autocast",
            true};
  if (name == "amp")
    return {amp::default_autocast_dtype(device.type),
            device.is_cuda() ? "--precision amp: f16 + loss scaler on CUDA" : "--precision amp: bf16 on the CPU"};
  if (name == "auto" || name.empty()) {
    if (device.is_cuda()) {
      // bf16 Tensor Cores from Ampere (sm_80) on: the same speed as f16, fp32's range, no scaler.
      const int cc = cuda_compute_capability(device.index);
      if (cc >= 80)
        return {DType::bf16, "--precision auto: this GPU (sm_" + std::to_string(cc) + ") computes bf16 natively"};
      return {amp::default_autocast_dtype(device.type),
              cc > 0 ? "--precision auto: f16 + loss scaler (this GPU, sm_" + std::to_string(cc) + ", has no bf16)"
                     : std::string("--precision auto: f16 + loss scaler on CUDA")};
    }
    if (cpu_has_native_bf16()) return {DType::bf16, "--precision auto: this CPU computes bf16 dot products natively"};
    return {DType::f32, "--precision auto: this CPU has no native bf16 dot products, so bf16 would save little time"};
  }
  throw ValueError("--precision must be auto, f32, bf16, f16, fp8 or amp, got '" + name + "'");
}

DType resolve_precision(const std::string& name, Device device) { return choose_precision(name, device).dtype; }

void require_usable_device(Device device) {
  if (device.is_cpu()) return;
  const int count = cuda_device_count();
  if (count == 0)
    throw DeviceError("--device " + device.str() + ": no GPU is usable here: " + cuda_unavailable_reason() +
                      ". Use --device cpu");
  if (device.index >= count)
    throw DeviceError(detail::str_cat("--device ", device.str(), ": this machine has ", count, " GPU",
                                      count == 1 ? "" : "s", " (cuda:0", count == 1 ? "" : " to cuda:",
                                      count == 1 ? "" : std::to_string(count - 1), "). Use one of them, or --device cpu"));
  // Allocating one element asks the driver: its DeviceError says why a visible device cannot be had.
  // The device becomes the process's current one first (torch.cuda.set_device), so that what names
  // no device (pinned memory for the loader, a guard restoring the current device) opens no context
  // on cuda:0 — on a node of eight GPUs, one per data-parallel rank, seven stray ones there.
  try {
    cuda::set_device(device.index);
    (void)zeros({1}, {.device = device});
  } catch (const DeviceError& e) {
    throw DeviceError("--device " + device.str() + ": the GPU cannot be used: " + e.what() + ". Use --device cpu");
  }
}

const char* schedule_name(Schedule s) {
  switch (s) {
    case Schedule::none: return "none";
    case Schedule::step: return "step";
    case Schedule::cosine: return "cosine";
    case Schedule::onecycle: return "onecycle";
    case Schedule::warmup_cosine: return "warmup-cosine";
    case Schedule::warmup_linear: return "warmup-linear";
  }
  return "?";
}

const char* optimizer_name(OptimizerKind k) {
  switch (k) {
    case OptimizerKind::sgd: return "sgd";
    case OptimizerKind::adam: return "adam";
    case OptimizerKind::adamw: return "adamw";
  }
  return "?";
}

std::unique_ptr<optim::Optimizer> make_optimizer(const TrainOptions& o, std::vector<Tensor> params) {
  switch (o.optimizer) {
    case OptimizerKind::sgd:
      return std::make_unique<optim::SGD>(std::move(params),
                                          optim::SGDOptions{.lr = o.lr, .momentum = o.momentum,
                                                            .weight_decay = o.weight_decay,
                                                            .nesterov = o.nesterov && o.momentum > 0});
    case OptimizerKind::adam:
      return std::make_unique<optim::Adam>(std::move(params),
                                           optim::AdamOptions{.lr = o.lr, .weight_decay = o.weight_decay});
    case OptimizerKind::adamw:
      return std::make_unique<optim::AdamW>(std::move(params),
                                            optim::AdamWOptions{.lr = o.lr, .weight_decay = o.weight_decay});
  }
  throw ValueError("unknown optimizer");
}

std::unique_ptr<optim::LRScheduler> make_scheduler(const TrainOptions& o, optim::Optimizer& opt,
                                                   int64_t steps_per_epoch, int64_t total_steps) {
  const int64_t total = std::max<int64_t>(total_steps, 1);
  const int64_t warmup = o.warmup_steps > 0 ? o.warmup_steps : std::max<int64_t>(1, total * 6 / 100);
  switch (o.schedule) {
    case Schedule::none: return nullptr;
    case Schedule::step:
      return std::make_unique<optim::StepLR>(
          opt, optim::StepLROptions{.step_size = std::max<int64_t>(1, o.step_size * steps_per_epoch), .gamma = o.gamma});
    case Schedule::cosine:
      return std::make_unique<optim::CosineAnnealingLR>(opt, optim::CosineAnnealingLROptions{.T_max = total});
    case Schedule::onecycle:
      return std::make_unique<optim::OneCycleLR>(
          opt, optim::OneCycleLROptions{.max_lr = o.lr, .total_steps = total,
                                        .cycle_momentum = o.optimizer == OptimizerKind::sgd ? o.momentum > 0 : true});
    case Schedule::warmup_cosine:
    case Schedule::warmup_linear:
      PRECIS_CHECK(warmup < total, "--warmup-steps ", warmup, " must be below the run's ", total, " optimizer steps");
      return std::make_unique<optim::WarmupDecayLR>(
          opt, optim::WarmupDecayLROptions{
                   .warmup_steps = warmup, .total_steps = total,
                   .decay = o.schedule == Schedule::warmup_cosine ? optim::Decay::Cosine : optim::Decay::Linear});
  }
  return nullptr;
}

std::map<std::string, std::string> run_identity(const TrainOptions& o, const TrainTask& task) {
  std::map<std::string, std::string> m = task.metadata();
  m["task"] = o.task == Task::resnet ? "resnet" : "bert-mini";
  m["model"] = o.model;
  m["width"] = std::to_string(o.width);
  m["precision"] = o.fp8 ? "fp8" : precision_name(o.precision);
  m["master_weights"] = o.master_weights ? "1" : "0";
  m["optimizer"] = optimizer_name(o.optimizer);
  m["batch"] = std::to_string(o.batch);
  m["max_tokens"] = std::to_string(o.max_tokens);
  m["accum"] = std::to_string(o.accum);
  m["seed"] = std::to_string(o.seed);
  m["limit_train"] = std::to_string(o.limit_train);
  m["winograd"] = o.winograd ? "1" : "0";
  return m;
}

void validate(const TrainOptions& o) {
  // The command line checks each value as it parses; these checks hold library callers to the
  // same rules, with the same words.
  auto at_least = [](const char* name, int64_t v, int64_t min) {
    PRECIS_CHECK(v >= min, name, " must be an integer ≥ ", min, ", got ", v);
  };
  at_least("--epochs", o.epochs, 1);
  at_least("--batch", o.batch, 1);
  at_least("--accum", o.accum, 1);
  at_least("--eval-batch", o.eval_batch, 1);
  at_least("--keep", o.keep, 1);
  at_least("--workers", o.workers, 0);
  at_least("--threads", o.threads, 0);
  at_least("--checkpoint-every", o.checkpoint_every, 0);
  at_least("--stop-after-steps", o.stop_after_steps, 0);
  at_least("--limit-train", o.limit_train, 0);
  at_least("--limit-test", o.limit_test, 0);
  at_least("--tensorboard-histograms", o.tensorboard_histograms, 0);
  PRECIS_CHECK(o.precision == DType::f32 || o.precision == DType::bf16 || o.precision == DType::f16,
               "--precision must be f32, bf16 or f16, got ", o.precision);
  PRECIS_CHECK(o.eval_precision == DType::f32 || o.eval_precision == DType::bf16 || o.eval_precision == DType::f16,
               "--eval-precision must be f32, bf16 or f16, got ", o.eval_precision);
  PRECIS_CHECK(!o.fp8 || o.precision == DType::bf16, "--precision fp8 runs bf16 autocast around its fp8 linear "
               "layers; the run's precision must be bf16, got ", o.precision);
  PRECIS_CHECK(!o.master_weights || o.precision != DType::f32,
               "--master-weights keeps the model in low precision with fp32 master copies; it needs "
               "--precision bf16 or f16", o.precision_choice.empty() ? "" : " (this run has f32 from " +
               o.precision_choice + ")");
  if (o.winograd) {
    PRECIS_CHECK(o.task == Task::resnet, "--winograd changes 3x3 convolutions; bert-mini has none: drop --winograd");
    PRECIS_CHECK(o.device.is_cpu(), "--winograd runs the CPU's f32 3x3 convolutions as Winograd; this run trains "
                 "on ", o.device.str(), ", where cuDNN picks its own algorithms: drop --winograd");
    PRECIS_CHECK(o.precision == DType::f32 && !o.fp8, "--winograd changes f32 convolutions only; this run trains in ",
                 o.fp8 ? "fp8" : precision_name(o.precision),
                 o.precision_choice.empty() ? "" : " (" + o.precision_choice + ")", ": add --precision f32");
  }
  PRECIS_CHECK(o.lr > 0 && std::isfinite(o.lr), "--lr must be a finite number > 0, got ", o.lr);
  PRECIS_CHECK(!o.zero || o.distributed, "--zero shards the optimizer state over the ranks of an mpirun job; it "
               "needs --distributed (mpirun -np N precis-train ... --distributed --zero)");
  PRECIS_CHECK(o.clip >= 0, "--clip must be a number ≥ 0 (0: no clipping), got ", o.clip);
  PRECIS_CHECK(o.weight_decay >= 0, "--weight-decay must be a number ≥ 0, got ", o.weight_decay);
  PRECIS_CHECK(!o.resume || !o.checkpoint_dir.empty() || !o.resume_from.empty(),
               "--resume continues from the newest checkpoint in --checkpoint DIR, and none was given; add "
               "--checkpoint DIR, or name the file with --resume-from FILE");
  PRECIS_CHECK(o.checkpoint_every == 0 || !o.checkpoint_dir.empty(),
               "--checkpoint-every needs --checkpoint DIR (the folder to write them to)");
  PRECIS_CHECK(o.tensorboard_histograms == 0 || !o.tensorboard.empty(),
               "--tensorboard-histograms needs --tensorboard DIR (the folder to write them to)");
  if (o.cuda_graphs) {
    PRECIS_CHECK(o.device.is_cuda(), "--cuda-graphs captures the training step in a CUDA graph; it needs "
                 "--device cuda (this run trains on ", o.device.str(), ")");
    PRECIS_CHECK(o.task == Task::resnet, "--cuda-graphs replays one captured step on batches of one shape; "
                 "bert-mini's batches change shape (padding to the longest sentence, the masked positions the "
                 "loader picks), so it trains without graphs: drop --cuda-graphs");
    PRECIS_CHECK(o.accum == 1, "--cuda-graphs captures one whole optimizer step per batch; it needs --accum 1, "
                 "got --accum ", o.accum);
    PRECIS_CHECK(!o.distributed, "--cuda-graphs does not run with --distributed yet (the gradient all-reduce "
                 "happens between the backward and the optimizer step, outside a captured step)");
  }
  if (o.task == Task::bert_mini) {
    PRECIS_CHECK(o.max_len >= 3, "--max-len must be an integer ≥ 3 ([CLS] token [SEP]), got ", o.max_len);
    PRECIS_CHECK(o.max_tokens == 0 || o.max_tokens >= o.max_len, "--max-tokens ", o.max_tokens,
                 " must be at least --max-len ", o.max_len, " (a batch must hold the longest sequence)");
    PRECIS_CHECK(o.hidden > 0 && o.heads > 0 && o.hidden % o.heads == 0, "--hidden ", o.hidden,
                 " must be a positive multiple of --heads ", o.heads);
  }
}

}  // namespace precis::train
