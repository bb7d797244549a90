#pragma once
// The options of one training run (precis-train's command line maps 1:1 onto these fields).
#include <cstdint>
#include <optional>
#include <string>

#include "amp/fp8_linear.h"
#include "amp/grad_scaler.h"
#include "autograd/checkpoint.h"
#include "core/device.h"
#include "core/dtype.h"

namespace precis::train {

enum class Task { resnet, bert_mini };
enum class OptimizerKind { sgd, adam, adamw };
/// none: constant lr; step: ×gamma every step_size epochs; cosine: cosine to 0 over the run;
/// onecycle: OneCycleLR (lr = max lr); warmup_cosine / warmup_linear: linear warmup over
/// warmup_steps, then cosine / linear decay to 0.
enum class Schedule { none, step, cosine, onecycle, warmup_cosine, warmup_linear };

struct TrainOptions {
  Task task = Task::resnet;
  /// resnet: resnet20/32/56, resnet18_cifar, resnet18/34/50. bert-mini: "bert-mini".
  std::string model = "resnet20";
  /// Images: a folder of Fashion-MNIST/MNIST IDX files or CIFAR-10 binaries (default
  /// Fashion-MNIST). Text: a folder with WordNet's data.* files, or any text file / folder.
  std::string data;
  /// Where the model, its optimizer state and every batch live: cpu or cuda:N. The model moves
  /// before the optimizer is built; checkpoints load onto it. Without a usable device, train()
  /// throws DeviceError naming it before any other work.
  Device device = Device::cpu();
  DType precision = DType::f32;     ///< f32, bf16 (autocast) or f16 (autocast + GradScaler); see resolve_precision
  /// How `precision` was chosen, shown on the run's first line: precis-train fills it with the
  /// --precision value and, for auto, the reason (choose_precision). Empty: not shown.
  std::string precision_choice;
  bool master_weights = false;      ///< low-precision model mode: params in `precision`, fp32 masters
  /// --precision fp8 (docs/fp8.md): bf16 autocast (precision is bf16) with the model's linear
  /// layers' GEMMs in fp8 with delayed scaling (nn::enable_fp8; BERT's vocabulary decoder stays
  /// bf16), the scales moved once per optimizer step.
  bool fp8 = false;
  amp::Fp8LinearOptions fp8_options;  ///< --fp8-history, --fp8-amax, --fp8-margin
  DType eval_precision = DType::f32;
  int64_t epochs = 1;
  int64_t batch = 128;
  double lr = 0.1;
  OptimizerKind optimizer = OptimizerKind::sgd;
  double momentum = 0.9;
  bool nesterov = true;
  double weight_decay = 5e-4;
  Schedule schedule = Schedule::none;
  int64_t warmup_steps = 0;         ///< warmup_*: steps of linear warmup (0: 6% of the run)
  int64_t step_size = 1;            ///< step: epochs between decays
  double gamma = 0.1;               ///< step: decay factor
  double clip = 0.0;                ///< max gradient 2-norm (0: no clipping)
  /// The loss scaler's settings (init_scale, growth, back-off, ...; amp/grad_scaler.h) for f16
  /// runs; `enabled` and `device` are the trainer's (on for f16, the run's device). A resumed run
  /// continues from the checkpoint's scale.
  amp::GradScalerOptions scaler;
  int64_t accum = 1;                ///< micro-batches per optimizer step
  /// Activation checkpointing of the ResNet stages / BERT encoder layers (autograd/checkpoint.h).
  autograd::CheckpointMode checkpoint_activations = autograd::CheckpointMode::none;
  int threads = 0;                  ///< intra-op threads (0: leave the default)
  /// resnet in f32 on the CPU: the 3x3 stride-1 convolutions on oneDNN's Winograd kernels (the
  /// CPU's conv precision tf32 for the run; docs/mixed-precision.md). Part of the run's identity.
  bool winograd = false;
  /// Resume with another intra-op thread count than the checkpoint's run: refused unless set,
  /// because the continuation is then no longer bit-exact (reductions split differently).
  bool allow_thread_change = false;
  int workers = 1;                  ///< data-loader threads
  uint64_t seed = 1;
  bool augment = true;              ///< images: random crop (pad 2/4) + horizontal flip
  int64_t width = 0;                ///< resnet: first-stage channels (0: the model's standard)
  int64_t limit_train = 0;          ///< use only the first N training examples (0: all)
  int64_t limit_test = 0;           ///< evaluate on the first N test examples (0: all)
  int64_t eval_batch = 256;
  // BERT
  int64_t max_tokens = 0;           ///< dynamic batching: padded tokens per batch (0: fixed --batch)
  int64_t max_len = 128;            ///< sequences are truncated to this many ids
  std::string vocab;                ///< vocab.txt to use, or to train and cache there if absent
  int64_t vocab_size = 8192;        ///< size of a trained vocabulary
  int64_t hidden = 256, layers = 4, heads = 4, intermediate = 1024;
  // checkpoints
  std::string checkpoint_dir;       ///< empty: no checkpoints
  int64_t checkpoint_every = 0;     ///< also every N optimizer steps (0: at epoch ends only)
  int keep = 2;                     ///< checkpoints kept in the folder
  bool resume = false;              ///< continue from the newest checkpoint in checkpoint_dir ...
  std::string resume_from;          ///< ... or from this file (given alone, it resumes too)
  int64_t stop_after_steps = 0;     ///< stop (after checkpointing) once this many optimizer steps ran
  // reporting
  std::string metrics;              ///< per-step CSV file (appended to on resume)
  std::string tensorboard;          ///< TensorBoard events folder (empty: none; models/train/tensorboard_log.h)
  int64_t tensorboard_histograms = 0;  ///< weight/gradient histograms every N steps (0: none)
  int64_t log_every = 0;            ///< non-TTY progress lines every N steps (0: ~10 per epoch)
  int progress = -1;                ///< 1: redraw one line (\r), 0: plain lines, -1: by isatty(stdout)
  bool quiet = false;               ///< only the final JSON line
  /// One rank of an mpirun job (docs/distributed.md): DDP, this rank's share of each global batch,
  /// rank-0 checkpoints and output, sharded evaluation.
  bool distributed = false;
  /// With distributed: shard the optimizer state over the ranks (dist::ZeroOptimizer, ZeRO-1).
  /// Checkpoints are the same as without it.
  bool zero = false;
  /// CUDA graphs (docs/training.md): the optimizer step of every full batch is captured once in a
  /// CUDA graph (after warm-up steps) and replayed; the optimizer is capturable and the lr
  /// schedule counts on the device. Needs a CUDA device, the resnet task, accum 1, no
  /// --distributed.
  bool cuda_graphs = false;
};

/// Whether the run resumes from a checkpoint: --resume (the newest in --checkpoint DIR) or
/// --resume-from FILE, each alone or both (then the file).
inline bool resuming(const TrainOptions& o) { return o.resume || !o.resume_from.empty(); }

const char* precision_name(DType dtype);  ///< "f32", "bf16", "f16"

/// A --precision value resolved on a device, and how (for the run's first line).
struct PrecisionChoice {
  DType dtype = DType::f32;
  std::string how;  ///< "--precision auto: this CPU computes bf16 dot products natively", ...
  bool fp8 = false;  ///< --precision fp8: dtype is bf16, and linear layers run in fp8
};
/// The training precision a precis-train --precision value names on `device`: "f32", "bf16",
/// "f16"; "fp8" (bf16 with fp8 linear layers); "amp" is the device's mixed-precision default (bf16 autocast on the CPU, f16 autocast +
/// the dynamic loss scaler on CUDA); "auto" (and "", not given) is bf16 on a CPU that computes
/// bf16 dot products natively (cpu_has_native_bf16) and f32 on one that does not, where bf16
/// operands are widened to f32 and save little time; on CUDA bf16 autocast on a GPU with bf16
/// Tensor Cores (compute capability 8.0 on: cuda_compute_capability), else "amp" (f16 + loss
/// scaler). ValueError for any other name.
PrecisionChoice choose_precision(const std::string& name, Device device);
/// choose_precision(name, device).dtype.
DType resolve_precision(const std::string& name, Device device);
const char* schedule_name(Schedule s);
const char* optimizer_name(OptimizerKind k);

}  // namespace precis::train
