// The training loop as named pieces around step(batch): set-up (constructor), resume, step (one
// micro-batch) and update (one optimizer step, with the gradient-ready hook first), log,
// evaluate, checkpoint. run() strings them together per epoch.
#include "models/train/trainer.h"

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <optional>
#include <sstream>

#include "amp/autocast.h"
#include "amp/grad_scaler.h"
#include "autograd/grad_mode.h"
#include "core/cuda_graph.h"
#include "core/error.h"
#include "core/rng.h"
#include "core/thread_pool.h"
#include "dist/zero.h"
#include "models/nn/fp8.h"
#include "models/nn/linear.h"
#include "models/train/checkpoint.h"
#include "models/train/distributed.h"
#include "models/train/metrics.h"
#include "models/train/outputs.h"
#include "models/train/progress.h"
#include "models/train/setup.h"
#include "models/train/task.h"
#include "models/train/tensorboard_log.h"
#include "ops/float32_precision.h"
#include "ops/functional.h"
#include "optim/accumulation.h"
#include "optim/clip_grad.h"
#include "tensor/factory.h"

namespace precis::train {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// An autocast region for `precision` on `device` (none for f32).
amp::AutocastOptions autocast_for(DType precision, Device device) {
  return {.device_type = device.type,
          .dtype = precision == DType::f32 ? amp::default_autocast_dtype(device.type) : precision,
          .enabled = precision != DType::f32};
}

struct Evaluation {
  double loss = 0, accuracy = 0;
  int64_t count = 0;
  double seconds = 0;
};

// What one optimizer step leaves on the device (nothing of it is read here).
struct StepOutputs {
  ForwardStats stats;
  amp::StepResult result;
  Tensor grad_norm;  // --clip: the total norm before clipping
};

// --cuda-graphs: the step of a full batch (forward, backward, clipping, the scaler's step and
// update, the schedule's device step; the gradients zeroed in place first) captured once in a CUDA
// graph after `warmup` eager steps, then replayed. Batches of another shape (an epoch's short
// last one) run the same step eagerly.
struct GraphedStep {
  static constexpr int kWarmup = 2;  // eager full-batch steps first: optimizer state, cuDNN plans
  explicit GraphedStep(int device) : graph(device) {}
  cuda::Graph graph;  // on the training device: a capture follows that device's stream only
  std::vector<Shape> shapes;    // the full batch's tensor shapes (empty until one is seen)
  std::vector<Tensor> inputs;   // the device tensors the captured step reads, refilled per batch
  StepOutputs captured;         // the captured step's outputs, rewritten by every replay
  int warmup_left = kWarmup;
};

class Trainer {
 public:
  Trainer(const TrainOptions& options, std::ostream& out, const TrainHooks& hooks);
  TrainSummary run();

 private:
  void resume();
  void print_plan();
  std::string stop_line() const;
  bool train_epoch(int64_t epoch);
  bool step(const data::Batch& batch);
  void update();
  void after_update(const amp::StepResult& r, const Tensor& grad_norm);
  void keep_unread(const amp::StepResult& r);
  void note_step_lr();
  bool graphed_step(const data::Batch& batch);
  double step_lr() const;
  void log_step(const amp::StepResult& r, const Tensor& grad_norm, double tb_grad_norm);
  void log_progress(bool last);
  void log_epoch(const Evaluation& ev);
  void print_precision();
  RunningMetrics global(const RunningMetrics& m, int64_t& extra);
  Evaluation evaluate();
  void checkpoint(data::DataPosition at);
  bool checkpoint_due() const { return o_.checkpoint_every > 0 && global_step_ % o_.checkpoint_every == 0; }
  int64_t steps_in(int64_t epoch) const { return (loader_->num_batches(epoch) + o_.accum - 1) / o_.accum; }

  // ---- the run
  const TrainOptions o_;
  std::ostream& out_;
  const TrainHooks& hooks_;
  std::optional<Float32PrecisionGuard> winograd_;  // --winograd, for the run's lifetime
  const Clock::time_point run_start_ = Clock::now();
  std::unique_ptr<TrainTask> task_;
  std::shared_ptr<nn::Module> model_;
  std::unique_ptr<optim::Optimizer> opt_;
  std::unique_ptr<amp::GradScaler> scaler_;
  std::unique_ptr<optim::GradAccumulator> acc_;
  std::unique_ptr<optim::LRScheduler> sched_;
  data::DataLoader* loader_ = nullptr;
  std::unique_ptr<DistributedRun> dist_;  // --distributed: this rank's loaders and DDP
  bool rank0() const { return !dist_ || dist_->rank() == 0; }
  std::map<std::string, std::string> identity_;
  std::unique_ptr<MetricsCsv> csv_;
  std::unique_ptr<TensorBoardLog> tb_;  // --tensorboard: opened in run(), after resume() knows the step
  bool tty_ = false;
  std::unique_ptr<GraphedStep> graphed_;  // --cuda-graphs

  // ---- what a checkpoint carries besides the objects above
  int64_t global_step_ = 0;
  int64_t skipped_ = 0;             // counts the results of unread_ only once read (skipped())
  // The scaler's results not yet read: a step does not wait for the device to learn whether it
  // was applied; the next log point, checkpoint or summary reads them (skipped()).
  std::vector<amp::StepResult> unread_;
  int64_t skipped();
  data::DataPosition start_;        // where training (re)starts
  RunningMetrics epoch_metrics_;    // the current epoch's, for progress lines and the epoch summary

  // ---- the current epoch (this process)
  int64_t epoch_ = 0, epoch_step_ = 0, epoch_steps_ = 0, first_step_ = 0;
  int64_t epoch_samples_ = 0;
  int64_t epoch_batches_ = 0;       // batches the loader yields this epoch (on this rank)
  double epoch_seconds_ = 0;
  Clock::time_point epoch_start_, step_start_;
  RunningMetrics step_metrics_;     // the current optimizer step's micro-batches
  double step_lr_ = 0;              // the lr the last optimizer step used (the scheduler has moved on)
  Tensor step_lr_device_;           // a schedule on the device (CUDA): that lr, copied there (step_lr())
  std::unique_ptr<Progress> progress_;

  std::string last_checkpoint_;     // the last checkpoint written, else the one resumed from
  int64_t last_checkpoint_step_ = -1;  // the step last_checkpoint_ holds
  int64_t written_step_ = -1;       // the step and position of the last checkpoint this run wrote
  data::DataPosition written_at_;
  double train_seconds_ = 0;
  int64_t train_samples_ = 0;
};

// ---- set-up ------------------------------------------------------------------------------------

Trainer::Trainer(const TrainOptions& options, std::ostream& out, const TrainHooks& hooks)
    : o_(options), out_(out), hooks_(hooks) {
  validate(o_);
  require_usable_device(o_.device);  // before the data is read: a missing GPU fails at once
  // Only rank 0 writes (checkpoints, metrics, events, the vocabulary on a shared disk).
  if (!o_.distributed || dist::init_process_group()->rank() == 0) require_writable_outputs(o_);
  if (o_.threads > 0) set_num_threads(o_.threads);
  if (o_.winograd) winograd_.emplace(Float32OpFamily::conv, Float32Precision::tf32, DeviceType::cpu);
  print_precision();
  manual_seed(o_.seed);  // model initialisation and dropout

  task_ = o_.task == Task::resnet ? make_image_task(o_, out_) : make_mlm_task(o_, out_);
  model_ = task_->model();
  if (o_.master_weights) model_->to(o_.precision);
  // On the device before the optimizer exists, so that its state (and fp32 masters) are made there.
  model_->to(o_.device);
  model_->train();
  if (o_.fp8) {
    // Every linear layer but BERT's vocabulary decoder (its weight is the embedding table; the
    // output layer stays in higher precision, as Transformer Engine recipes keep it).
    const int layers = nn::enable_fp8(*model_, o_.fp8_options, [](const std::string& name, const nn::Linear&) {
      return name.size() < 7 || name.compare(name.size() - 7, 7, "decoder") != 0;
    });
    if (!o_.quiet) out_ << "fp8: " << layers << " linear layer" << (layers == 1 ? "" : "s") << "\n";
  }
  opt_ = make_optimizer(o_, model_->parameters());
  amp::GradScalerOptions scaler_options = o_.scaler;
  scaler_options.enabled = o_.precision == DType::f16;
  scaler_options.device = o_.device;
  scaler_ = std::make_unique<amp::GradScaler>(scaler_options);
  scaler_->set_parameter_names(model_->named_parameters());
  acc_ = std::make_unique<optim::GradAccumulator>(o_.accum);
  loader_ = &task_->train_loader();
  if (o_.distributed) {
    dist_ = make_distributed_run(*model_, *scaler_, task_->train_loader(), task_->test_loader());
    loader_ = dist_->train_loader.get();
    // --zero: the optimizer made above (no state yet) is replaced by one over this rank's shard.
    if (o_.zero)
      opt_ = std::make_unique<dist::ZeroOptimizer>(*dist_->ddp, model_->parameters(),
                                                   [this](std::vector<std::vector<Tensor>> shards) {
                                                     return make_optimizer(o_, std::move(shards[0]));
                                                   });
    // Each rank its own dropout stream, advancing in step with rank 0's (whose state checkpoints keep).
    default_generator().set_state(o_.seed + static_cast<uint64_t>(dist_->rank()), default_generator().offset());
  }

  int64_t total_steps = 0;
  for (int64_t e = 0; e < o_.epochs; ++e) total_steps += steps_in(e);
  PRECIS_CHECK(total_steps > 0, "the training set gives no batches (", loader_->dataset().size(),
               " examples, --batch ", o_.batch, "); check --data and --limit-train");
  sched_ = make_scheduler(o_, *opt_, steps_in(0), total_steps);
  step_lr_ = opt_->group_lr(0);
  // On a GPU the schedule counts applied steps on the device, where the loss scaler decides them,
  // and the optimizer reads its lr there: a step never waits to learn whether it was applied.
  if (o_.device.is_cuda() && sched_) {
    opt_->set_capturable(true);
    sched_->to_device(total_steps);
  }
  if (o_.cuda_graphs) {
    PRECIS_CHECK(!hooks_.gradients_ready, "--cuda-graphs: a TrainHooks::gradients_ready hook cannot run inside a "
                 "captured step (no host code runs in a replay); train without graphs to use it");
    opt_->set_capturable(true);  // the replays read the lr from the device
    graphed_ = std::make_unique<GraphedStep>(o_.device.index);
  }
  identity_ = run_identity(o_, *task_);
  if (dist_) identity_["world_size"] = std::to_string(dist_->size());
  csv_ = std::make_unique<MetricsCsv>(rank0() ? o_.metrics : std::string(), resuming(o_));
  tty_ = o_.progress >= 0 ? o_.progress == 1 : ::isatty(STDOUT_FILENO) == 1;
  // --distributed: progress lines are log points where every rank reduces its figures, so they
  // must fall on the same steps everywhere: every log_every steps, never by the clock.
  if (dist_) tty_ = false;
}

// ---- resume ------------------------------------------------------------------------------------

// The option that sets a run-identity key (run_identity), for messages.
const char* option_of(const std::string& key) {
  static const std::map<std::string, const char*> kOptions{
      {"task", "subcommand"}, {"model", "--model"}, {"width", "--width"}, {"precision", "--precision"},
      {"master_weights", "--master-weights"}, {"optimizer", "--optimizer"}, {"batch", "--batch"},
      {"max_tokens", "--max-tokens"}, {"accum", "--accum"}, {"seed", "--seed"}, {"limit_train", "--limit-train"},
      {"vocab_size", "--vocab-size"}, {"world_size", "number of ranks (mpirun -np)"}, {"winograd", "--winograd"}};
  auto it = kOptions.find(key);
  return it == kOptions.end() ? "options" : it->second;
}

// Restores every piece of state a step depends on from the newest (or the named) checkpoint,
// after checking it was written by a run with the same identity and thread count.
void Trainer::resume() {
  std::string path = o_.resume_from;
  if (path.empty()) {
    std::optional<std::string> latest = latest_checkpoint(o_.checkpoint_dir);
    PRECIS_CHECK_T(IOError, latest.has_value(), "--resume: no checkpoint (step-*.safetensors) in --checkpoint '",
                   o_.checkpoint_dir, "'; start without --resume, or name a file with --resume-from FILE");
    path = *latest;
  }
  Checkpoint ck = load_checkpoint(path);
  for (const auto& [key, value] : identity_) {
    auto it = ck.metadata.find(key);
    // Checkpoints from before --winograd existed were written without it.
    const std::string saved = it != ck.metadata.end() ? it->second : key == "winograd" ? "0" : "(absent)";
    const std::string option = option_of(key);
    const bool plain = option.rfind("--", 0) == 0 && key != "master_weights" && key != "winograd" &&
                       it != ck.metadata.end();
    PRECIS_CHECK(saved == value, "cannot resume from '", path, "': it was written with ", key, " = ", saved,
                 " but this run has ", key, " = ", value, "; resume with the original ", option,
                 plain ? " (" + option + " " + saved + ")" : std::string(),
                 ", or start a new run without resuming");
  }
  // Checkpoints from before the thread count was recorded have none: nothing to compare.
  if (auto it = ck.metadata.find("threads"); it != ck.metadata.end() && it->second != std::to_string(get_num_threads())) {
    const std::string saved = it->second, now = std::to_string(get_num_threads());
    PRECIS_CHECK(o_.allow_thread_change, "cannot resume from '", path, "': it was written by a run with ",
                 saved, saved == "1" ? " intra-op thread" : " intra-op threads", " and this run has ", now,
                 "; another count splits reductions differently, so the continuation would not be bit-exact. "
                 "Resume with --threads ", saved, ", or add --allow-thread-change to continue with ", now);
    if (!o_.quiet)
      out_ << "warning: resuming with " << plural(get_num_threads(), "thread") << " where '" << path
           << "' was written with " << saved << " (--allow-thread-change): the run is no longer bit-exact\n";
  }
  model_->load_state_dict(state_subset(ck.state, "model."));
  opt_->load_state_dict(state_subset(ck.state, "optimizer."));
  if (scaler_->is_enabled()) scaler_->load_state_dict(state_subset(ck.state, "scaler."));
  if (sched_) sched_->load_state_dict(state_subset(ck.state, "scheduler."));
  acc_->load_state_dict(state_subset(ck.state, "accumulator."));
  const StateDict t = state_subset(ck.state, "trainer.");
  const char* who = "precis-train checkpoint";
  global_step_ = state_get_int(t, "global_step", who);
  skipped_ = state_get_int(t, "skipped", who);
  start_.epoch = state_get_int(t, "epoch", who);
  start_.batch = state_get_int(t, "batch", who);
  default_generator().set_state(static_cast<uint64_t>(state_get_int(t, "generator_seed", who)) +
                                    static_cast<uint64_t>(dist_ ? dist_->rank() : 0),
                                static_cast<uint64_t>(state_get_int(t, "generator_offset", who)));
  epoch_metrics_.load_state_dict(t, who);
  epoch_metrics_.to(o_.device);  // the running sums continue on the device
  if (!rank0()) epoch_metrics_.reset();  // the saved sums are the job's (global()): rank 0 carries them
  last_checkpoint_ = path;  // until this run writes one
  last_checkpoint_step_ = global_step_;
  if (!o_.quiet)
    out_ << "resumed from " << path << " (step " << global_step_ << ", epoch " << start_.epoch + 1 << ", batch "
         << start_.batch << ")\n";
}

// ---- checkpoint --------------------------------------------------------------------------------

// Writes the state after the optimizer step `global_step_` (between steps only: no gradients are
// pending), with the loader position `at` to continue from.
void Trainer::checkpoint(data::DataPosition at) {
  if (o_.checkpoint_dir.empty()) return;
  // An epoch's last step checkpointed by --checkpoint-every is the epoch-end state already.
  if (global_step_ == written_step_ && at == written_at_) return;
  int64_t unused = 0;
  const RunningMetrics figures = global(epoch_metrics_, unused);  // the job's sums (a collective)
  // --zero: the optimizer's state dict gathers the shards, a collective every rank takes part in.
  StateDict optimizer_state;
  if (o_.zero) optimizer_state = opt_->state_dict();
  if (!rank0()) {  // rank 0 writes; the others wait until the file is complete
    written_step_ = global_step_;
    written_at_ = at;
    dist_->group->barrier()->wait();
    return;
  }
  const Generator& g = default_generator();
  StateDict trainer = figures.state_dict();
  trainer.insert({{"global_step", state_int(global_step_)},
                  {"skipped", state_int(skipped())},
                  {"epoch", state_int(at.epoch)},
                  {"batch", state_int(at.batch)},
                  {"generator_seed", state_int(static_cast<int64_t>(g.seed()))},
                  {"generator_offset", state_int(static_cast<int64_t>(g.offset()))}});
  StateDict state;
  state_merge(state, model_->state_dict(), "model.");
  state_merge(state, o_.zero ? optimizer_state : opt_->state_dict(), "optimizer.");
  state_merge(state, scaler_->state_dict(), "scaler.");
  if (sched_) state_merge(state, sched_->state_dict(), "scheduler.");
  state_merge(state, acc_->state_dict(), "accumulator.");
  state_merge(state, trainer, "trainer.");
  std::map<std::string, std::string> meta = identity_;
  meta["format"] = "precis-train checkpoint 1";
  meta["threads"] = std::to_string(get_num_threads());  // not identity: --allow-thread-change may differ
  last_checkpoint_ = save_checkpoint(o_.checkpoint_dir, global_step_, state, meta, o_.keep);
  last_checkpoint_step_ = global_step_;
  if (tb_) tb_->flush();  // a run resumed from here continues the curves without a gap
  written_step_ = global_step_;
  written_at_ = at;
  if (dist_) dist_->group->barrier()->wait();
}

// ---- step --------------------------------------------------------------------------------------

// One micro-batch: forward under autocast, backward of the loss scaled for accumulation and by the
// loss scaler, its figures added on the device. When it completes an accumulation window, the
// optimizer step follows. Returns whether it did.
bool Trainer::step(const data::Batch& batch) {
  if (graphed_) return graphed_step(batch);
  if (dist_) {  // reduce on a window's last micro-batch, and on the epoch's last (a short window)
    dist_->ddp->require_sync(acc_->is_last_micro_step() || batch.index + 1 == epoch_batches_);
    dist_->ddp->pre_forward();
  }
  ForwardStats s;
  {
    amp::Autocast ac(autocast_for(o_.precision, o_.device));
    amp::Fp8Autocast fp8(o_.fp8);
    s = task_->forward(*model_, batch, o_.device);
  }
  Tensor loss = o_.accum > 1 ? mul(s.loss, acc_->loss_scale()) : s.loss;
  scaler_->scale(loss).backward();
  epoch_metrics_.add(s);
  step_metrics_.add(s);
  epoch_samples_ += s.samples;
  if (!acc_->micro_step()) return false;
  update();
  return true;
}

// The optimizer step of a complete window (or of an epoch's shorter last one). Its first point is
// the gradient-ready seam (TrainHooks::gradients_ready): all backwards of the window are done and
// nothing has read the gradients yet.
void Trainer::update() {
  if (hooks_.gradients_ready)
    hooks_.gradients_ready({.model = *model_, .optimizer = *opt_, .scaler = *scaler_, .step = global_step_ + 1,
                            .micro_batches = step_metrics_.micro_batches});
  Tensor grad_norm;
  if (o_.clip > 0) grad_norm = scaler_->clip_grad_norm_(*opt_, o_.clip);
  note_step_lr();
  amp::StepResult r = scaler_->step(*opt_);
  scaler_->update();
  if (o_.fp8) {  // the next step's fp8 scales, from this step's amaxes (every rank's)
    if (dist_) reduce_fp8_amaxes(*dist_, *model_);
    nn::update_fp8(*model_);
  }
  if (sched_ && !sched_->on_device()) {
    // A scheduler advances on applied steps only: on the CPU the host reads the flag at no cost.
    const bool applied = r.applied();
    if (!applied) ++skipped_;
    sched_->step(applied);
  } else {
    if (sched_) sched_->step_on_device(r.skip_flag());  // a GPU: counted where the flag is
    keep_unread(r);
  }
  after_update(r, grad_norm);
}

// Keeps a step result for the next log point; bounded memory in a run that never logs: one read
// per kUnreadLimit steps.
void Trainer::keep_unread(const amp::StepResult& r) {
  unread_.push_back(r);
  constexpr size_t kUnreadLimit = 256;
  if (unread_.size() >= kUnreadLimit) (void)skipped();
}

// Notes the lr the coming optimizer step uses, for the log: on the host, or copied on the device
// when the schedule lives there (read at a log point, step_lr()).
void Trainer::note_step_lr() {
  if (sched_ && sched_->on_device()) {
    step_lr_device_ = opt_->scheduled(0).narrow(0, 0, 1).clone();
  } else {
    step_lr_ = opt_->group_lr(0);
  }
}

// What follows every optimizer step, eager or replayed: the --tensorboard reads, zero_grad (eager
// steps: a graphed step zeroes the gradients in place at its start), the counters and the log.
void Trainer::after_update(const amp::StepResult& r, const Tensor& grad_norm) {
  // --tensorboard reads the gradients before zero_grad: their norm (computed here when neither
  // clipping nor the scaler's unscale_ did) and, when due, their histograms.
  double tb_grad_norm = NAN;
  if (!o_.tensorboard.empty() && o_.zero && !grad_norm.defined() && !r.grad_norm()) {
    // --zero: a model parameter's .grad is the rank's unreduced gradient; the optimizer measures
    // the reduced shards, a collective every rank takes part in (an infinite bound clips nothing).
    const double n = opt_->clip_grad_norm_(INFINITY).item<double>();
    if (tb_) tb_grad_norm = n;
  } else if (tb_) {
    if (grad_norm.defined()) {
      tb_grad_norm = grad_norm.item<double>();
    } else if (std::optional<double> n = r.grad_norm()) {
      tb_grad_norm = *n;
    } else {
      double sq = 0;
      for (double n : optim::grad_norms(model_->parameters())) sq += n * n;
      tb_grad_norm = std::sqrt(sq);
    }
  }
  if (tb_ && tb_->histograms_due(global_step_ + 1)) tb_->histograms(*model_, global_step_ + 1);
  if (!graphed_) opt_->zero_grad();
  ++global_step_;
  ++epoch_step_;
  log_step(r, grad_norm, tb_grad_norm);
  step_metrics_.reset();
  step_start_ = Clock::now();
}

// ---- --cuda-graphs ------------------------------------------------------------------------------

namespace {

std::vector<Shape> shapes_of(const data::Batch& b) {
  std::vector<Shape> out;
  for (const Tensor& t : b.tensors) out.push_back(t.defined() ? t.sizes() : Shape{});
  return out;
}

}  // namespace

// One optimizer step of `batch` (accum is 1) as a graph replay, or eagerly: while warming up, to
// capture, and for a batch of another shape. The step is the same either way; nothing in it waits
// for the device, and what the log needs (metrics, the scaler's result, the lr) is copied on the
// device after it and read only at log points.
bool Trainer::graphed_step(const data::Batch& batch) {
  GraphedStep& g = *graphed_;
  const std::vector<Shape> shapes = shapes_of(batch);
  if (g.shapes.empty() && batch[0].size(0) == o_.batch) g.shapes = shapes;  // the first full batch fixes the shape
  const bool full = shapes == g.shapes;
  data::Batch on_device = batch;
  if (full) {
    if (g.inputs.empty())
      for (const Tensor& t : batch.tensors)
        g.inputs.push_back(t.defined() ? empty(t.sizes(), {.dtype = t.dtype(), .device = o_.device}) : Tensor());
    for (size_t i = 0; i < g.inputs.size(); ++i) {
      if (!g.inputs[i].defined()) continue;
      g.inputs[i].copy_(batch.tensors[i], /*non_blocking=*/batch.tensors[i].is_pinned());
      on_device.tensors[i] = g.inputs[i];
    }
  } else {
    on_device = to_device(batch, o_.device);
  }
  note_step_lr();
  auto run = [&] {
    StepOutputs out;
    opt_->zero_grad(/*set_to_none=*/false);  // the captured gradients stay where the graph writes them
    {
      amp::Autocast ac(autocast_for(o_.precision, o_.device));
      amp::Fp8Autocast fp8(o_.fp8);
      out.stats = task_->forward(*model_, on_device, o_.device);
    }
    scaler_->scale(out.stats.loss).backward();
    if (o_.clip > 0) out.grad_norm = scaler_->clip_grad_norm_(*opt_, o_.clip);
    out.result = scaler_->step(*opt_);
    scaler_->update();
    if (sched_) sched_->step_on_device(out.result.skip_flag());
    if (o_.fp8) nn::update_fp8(*model_);
    return out;
  };
  StepOutputs out;
  if (full && (g.graph.captured() || g.warmup_left == 0)) {
    if (!g.graph.captured()) cuda::capture(g.graph, [&] { g.captured = run(); });
    g.graph.replay();
    // This replay's outputs, copied before the next replay overwrites them.
    out.stats = g.captured.stats;
    out.stats.loss = g.captured.stats.loss.clone();
    out.stats.correct = g.captured.stats.correct.clone();
    out.result = g.captured.result.snapshot();
    if (g.captured.grad_norm.defined()) out.grad_norm = g.captured.grad_norm.clone();
  } else {
    out = run();
    if (full) --g.warmup_left;
  }
  epoch_metrics_.add(out.stats);
  step_metrics_.add(out.stats);
  epoch_samples_ += out.stats.samples;
  keep_unread(out.result);
  after_update(out.result, out.grad_norm);
  return true;
}

// The lr of the last optimizer step (a device read when the schedule lives on the device).
double Trainer::step_lr() const {
  return step_lr_device_.defined() ? step_lr_device_.item<double>() : step_lr_;
}

// ---- log ---------------------------------------------------------------------------------------

// Reads the step results a step left unread (where the host reads anyway: a log point, a
// checkpoint, the summary), and runs the scaler's floor check that update() left due.
int64_t Trainer::skipped() {
  for (const amp::StepResult& r : unread_) skipped_ += !r.applied();
  unread_.clear();
  if (graphed_) scaler_->check_floor();  // replays run no host update() that would schedule it
  if (scaler_->is_enabled()) (void)scaler_->get_scale();
  return skipped_;
}

// The --metrics row and the --tensorboard scalars of the step just taken (a log point: it reads
// the step's device sums; under --distributed, the job's sums).
void Trainer::log_step(const amp::StepResult& r, const Tensor& grad_norm, double tb_grad_norm) {
  // Not csv_->enabled() or tb_: only rank 0 writes, but every rank takes part in global().
  if (o_.metrics.empty() && o_.tensorboard.empty()) return;
  const double lr = step_lr();
  int64_t samples = step_metrics_.samples;
  const RunningMetrics::Values v = global(step_metrics_, samples).read();
  const double dt = seconds_since(step_start_);
  const double samples_per_s = dt > 0 ? static_cast<double>(samples) / dt : 0.0;
  if (csv_->enabled())
    csv_->row(epoch_, global_step_, epoch_step_, lr, v.loss, v.accuracy, r.scale_before(), r.applied(),
             grad_norm.defined() ? grad_norm.item<double>() : NAN, samples_per_s, loader_->wait_fraction());
  if (tb_)
    tb_->step({.step = global_step_, .loss = v.loss, .accuracy = v.accuracy, .lr = lr,
               .loss_scale = r.scale_before(), .applied = r.applied(), .reason = r.reason(),
               .scale_after = r.scale_after(), .skipped_total = skipped(), .grad_norm = tb_grad_norm,
               .samples_per_s = samples_per_s, .data_wait = loader_->wait_fraction()});
  if (tb_ && o_.fp8) tb_->fp8(*model_, global_step_);
}

// --distributed: `m`'s sums (and `extra`) over the ranks, one all_reduce at a log point; else `m`.
// Values stay exact: counts are integers below 2^53, the loss a sum of f64 terms.
RunningMetrics Trainer::global(const RunningMetrics& m, int64_t& extra) {
  if (!dist_) return m;
  const double loss = m.loss_sum.defined() ? m.loss_sum.item<double>() : 0.0;
  const double correct = m.correct.defined() ? static_cast<double>(m.correct.item<int64_t>()) : 0.0;
  Tensor t = from_vector<double>({loss, static_cast<double>(m.micro_batches), correct, static_cast<double>(m.count),
                                  static_cast<double>(m.samples), static_cast<double>(extra)},
                                 {6});
  dist_->group->all_reduce(t, dist::ReduceOp::sum)->wait();
  const std::vector<double> v = t.to_vector<double>();
  RunningMetrics g;
  g.micro_batches = static_cast<int64_t>(v[1]);
  if (g.micro_batches > 0) g.loss_sum = state_real(v[0]);
  if (v[3] > 0) g.correct = state_int(static_cast<int64_t>(v[2]));
  g.count = static_cast<int64_t>(v[3]);
  g.samples = static_cast<int64_t>(v[4]);
  extra = static_cast<int64_t>(v[5]);
  return g;
}

// The progress line, when one is due (only then are the epoch's device sums read).
void Trainer::log_progress(bool last) {
  if (!progress_->due(epoch_step_, last)) return;
  int64_t samples = epoch_samples_;
  const RunningMetrics::Values v = global(epoch_metrics_, samples).read();
  ProgressInfo p;
  p.epoch = epoch_, p.epochs = o_.epochs, p.step = epoch_step_, p.steps = epoch_steps_;
  p.loss = v.loss;
  p.accuracy = v.accuracy;
  p.metric = o_.task == Task::resnet ? "acc" : "mlm-acc";
  const double elapsed = seconds_since(epoch_start_);
  p.samples_per_s = elapsed > 0 ? static_cast<double>(samples) / elapsed : 0.0;
  p.scale = scaler_->is_enabled() ? scaler_->get_scale() : 0.0;
  p.skipped = skipped();
  p.data_wait = loader_->wait_fraction();
  p.lr = step_lr();  // the step's own, as in --metrics and --tensorboard (group_lr is the next step's)
  const int64_t done_here = epoch_step_ - first_step_;
  p.eta_s = done_here > 0 ? elapsed / static_cast<double>(done_here) * static_cast<double>(epoch_steps_ - epoch_step_)
                          : -1.0;
  progress_->update(p, last);
}

void Trainer::log_epoch(const Evaluation& ev) {
  if (o_.quiet) return;
  const double epoch_seconds = epoch_seconds_;
  const int64_t skipped_so_far = skipped();
  int64_t samples = epoch_samples_;
  const RunningMetrics job = global(epoch_metrics_, samples);
  const RunningMetrics::Values v = job.read();
  const bool any = job.micro_batches > 0;
  char line[400];
  std::snprintf(line, sizeof line,
                "epoch %lld/%lld: train loss %.4f %s %.2f%% (%.1f s, %.0f samples/s, data wait %.0f%%) | test "
                "loss %.4f %s %.2f%% (%s, %.1f s)%s%s\n",
                static_cast<long long>(epoch_ + 1), static_cast<long long>(o_.epochs), any ? v.loss : NAN,
                task_->metric(), job.count > 0 ? 100.0 * v.accuracy : NAN, epoch_seconds,
                epoch_seconds > 0 ? static_cast<double>(samples) / epoch_seconds : 0.0,
                100.0 * loader_->wait_fraction(), ev.loss, task_->metric(), 100.0 * ev.accuracy,
                precision_name(o_.eval_precision), ev.seconds,
                skipped_so_far > 0 ? (", skipped steps so far " + std::to_string(skipped_so_far)).c_str() : "",
                written_step_ == global_step_ && rank0() && !o_.checkpoint_dir.empty()
                    ? ("; saved " + last_checkpoint_).c_str()
                    : "");
  out_ << line << std::flush;
}

// How the run computes, e.g. "bf16 autocast" or "f16 model with fp32 master weights + loss scaler".
std::string precision_text(const TrainOptions& o) {
  std::string t = precision_name(o.precision);
  if (o.master_weights) t += " model with fp32 master weights";
  else if (o.precision != DType::f32) t += " autocast";
  if (o.precision == DType::f16) t += " + loss scaler";
  if (o.fp8) t += " with the linear layers' GEMMs in fp8 (E4M3 forward, E5M2 gradients, delayed scaling)";
  if (o.winograd) t += " with Winograd 3x3 convolutions";
  return t;
}

// The run's first line: which precision it trains in and why (--precision auto decides by the machine).
void Trainer::print_precision() {
  if (o_.quiet) return;
  out_ << "precision: " << precision_text(o_)
       << (o_.precision_choice.empty() ? "" : " (" + o_.precision_choice + ")") << ", on " << o_.device << "\n";
}

void Trainer::print_plan() {
  if (o_.quiet) return;
  out_ << "training: " << plural(o_.epochs, "epoch") << " of " << plural(steps_in(0), "step") << ", batch "
       << (o_.max_tokens > 0 ? "<= " + std::to_string(o_.max_tokens) + " tokens" : std::to_string(o_.batch))
       << (o_.accum > 1 ? " × " + std::to_string(o_.accum) + " micro-batches" : "") << ", " << precision_text(o_)
       << ", " << optimizer_name(o_.optimizer) << " lr " << o_.lr << ", schedule " << schedule_name(o_.schedule)
       << ", on " << o_.device << ", " << plural(get_num_threads(), "thread") << ", "
       << plural(o_.workers, "loader worker") << "\n";
}

// What --stop-after-steps left behind: the checkpoint of the step it stopped after, or why there
// is none and which step the last one holds.
std::string Trainer::stop_line() const {
  std::string line = "stopped after step " + std::to_string(global_step_) + " (--stop-after-steps " +
                     std::to_string(o_.stop_after_steps) + ")";
  if (last_checkpoint_step_ == global_step_ && !last_checkpoint_.empty())
    return line + "; checkpoint of step " + std::to_string(global_step_) + ": " + last_checkpoint_;
  line += "; no checkpoint of step " + std::to_string(global_step_) + " was written (no --checkpoint DIR)";
  if (!last_checkpoint_.empty())
    line += "; the last one, " + last_checkpoint_ + ", holds step " + std::to_string(last_checkpoint_step_);
  return line;
}

// ---- evaluate ----------------------------------------------------------------------------------

// The test split's mean loss and accuracy, summed on the device and read once at the end.
Evaluation Trainer::evaluate() {
  const auto start = Clock::now();
  std::shared_ptr<nn::Module> m = model_;
  // A low-precision model evaluated in fp32: a copy of its (rounded) weights in fp32.
  if (o_.master_weights && o_.eval_precision == DType::f32) {
    m = task_->clone_model(*model_);
    m->to(DType::f32);
  }
  m->eval();
  Evaluation e;
  Tensor loss_sum, correct;
  {
    NoGradGuard no_grad;
    for (data::Batch& b : (dist_ ? *dist_->test_loader : task_->test_loader()).epoch(0)) {
      amp::Autocast ac(autocast_for(o_.eval_precision, o_.device));
      ForwardStats s = task_->forward(*m, b, o_.device);
      if (s.count == 0) continue;
      // The batch's mean loss weighted by its predictions, in f64 (exact for f32 losses).
      Tensor weighted = mul(s.loss.to(DType::f64), static_cast<double>(s.count));
      loss_sum = loss_sum.defined() ? add(loss_sum, weighted) : weighted;
      correct = correct.defined() ? add(correct, s.correct) : s.correct;
      e.count += s.count;
    }
  }
  model_->train();
  double loss_total = loss_sum.defined() ? loss_sum.item<double>() : 0.0;
  double correct_total = correct.defined() ? static_cast<double>(correct.item<int64_t>()) : 0.0;
  double count = static_cast<double>(e.count);
  if (dist_) reduce_evaluation(*dist_, loss_total, correct_total, count);  // sharded: sum the ranks' parts
  e.count = static_cast<int64_t>(count);
  e.loss = e.count > 0 ? loss_total / count : NAN;
  e.accuracy = e.count > 0 ? correct_total / count : NAN;
  e.seconds = seconds_since(start);
  return e;
}

// ---- run ---------------------------------------------------------------------------------------

// The steps of one epoch from where the run stands. False when --stop-after-steps ended it.
bool Trainer::train_epoch(int64_t epoch) {
  epoch_ = epoch;
  const int64_t first_batch = epoch == start_.epoch ? start_.batch : 0;
  if (first_batch == 0) epoch_metrics_.reset();
  epoch_steps_ = steps_in(epoch);
  epoch_batches_ = loader_->num_batches(epoch);
  epoch_step_ = first_step_ = first_batch / o_.accum;
  const int64_t log_every = o_.log_every > 0 ? o_.log_every : std::max<int64_t>(1, epoch_steps_ / 10);
  progress_ = std::make_unique<Progress>(out_, tty_, log_every, o_.quiet);
  loader_->set_position(epoch, first_batch);
  epoch_start_ = step_start_ = Clock::now();
  epoch_samples_ = 0;
  step_metrics_.reset();

  auto stop_due = [&] { return o_.stop_after_steps > 0 && global_step_ >= o_.stop_after_steps; };
  bool stop = false;
  for (data::Batch& b : *loader_) {
    if (!step(b)) continue;
    log_progress(false);
    if (checkpoint_due()) checkpoint(loader_->position());
    if (stop_due()) {
      stop = true;
      break;
    }
  }
  // A last window shorter than accum micro-batches still makes a step (its gradient is the
  // window's sum over accum, so slightly smaller): every example of the epoch counts.
  if (!stop && acc_->micro_steps_pending() > 0) {
    update();
    acc_->reset();
    stop = stop_due();
  }
  epoch_seconds_ = seconds_since(epoch_start_);
  train_seconds_ += epoch_seconds_;
  train_samples_ += epoch_samples_;
  log_progress(true);
  progress_->break_line();
  return !stop;
}

TrainSummary Trainer::run() {
  if (resuming(o_)) resume();
  if (!o_.tensorboard.empty() && rank0())  // one writer: rank 0 logs the job's values
    tb_ = std::make_unique<TensorBoardLog>(o_.tensorboard, o_.tensorboard_histograms,
                                           resuming(o_) ? global_step_ : -1, identity_);
  TrainSummary summary;
  summary.model = o_.model;
  summary.precision = std::string(o_.fp8 ? "fp8" : precision_name(o_.precision)) + (o_.master_weights ? "-master" : "");
  summary.test_accuracy = NAN;
  summary.test_loss = NAN;
  summary.epochs = static_cast<double>(start_.epoch);
  print_plan();

  bool stopped = false;
  for (int64_t epoch = start_.epoch; epoch < o_.epochs; ++epoch) {
    if (!train_epoch(epoch)) {
      // The part of the epoch a cut run trained: "epochs": 0.6667 after 4 of 6 steps.
      summary.epochs = static_cast<double>(epoch) +
                       (epoch_steps_ > 0 ? static_cast<double>(epoch_step_) / static_cast<double>(epoch_steps_) : 0.0);
      checkpoint(loader_->position());  // unless the step's own checkpoint was just written
      if (!o_.quiet) out_ << stop_line() << "\n";
      stopped = true;
      break;
    }
    summary.epochs = static_cast<double>(epoch + 1);
    checkpoint(loader_->position());
    const Evaluation ev = evaluate();
    summary.test_accuracy = ev.accuracy;
    summary.test_loss = ev.loss;
    if (tb_) tb_->evaluation(global_step_, ev.loss, ev.accuracy);
    log_epoch(ev);
  }

  if (tb_) tb_->flush();
  summary.steps = global_step_;
  summary.skipped_steps = skipped();
  summary.stopped_early = stopped;
  summary.last_checkpoint = last_checkpoint_;
  summary.train_s = train_seconds_;
  int64_t samples = train_samples_;
  if (dist_) global(RunningMetrics(), samples);  // the job's samples over rank 0's time
  summary.samples_per_s = train_seconds_ > 0 ? static_cast<double>(samples) / train_seconds_ : 0.0;
  summary.wall_s = seconds_since(run_start_);
  return summary;
}

}  // namespace

std::string TrainSummary::json() const {
  std::ostringstream s;
  char epochs_text[32];
  std::snprintf(epochs_text, sizeof epochs_text, "%.4g", epochs);  // 4, or 0.002083 after a cut
  s << "{\"model\": \"" << model << "\", \"precision\": \"" << precision << "\", \"epochs\": " << epochs_text
    << ", \"test_accuracy\": " << json_number(test_accuracy, 4) << ", \"samples_per_s\": "
    << json_number(samples_per_s, 1) << ", \"wall_s\": " << json_number(wall_s, 2) << ", \"train_s\": "
    << json_number(train_s, 2) << ", \"steps\": " << steps << ", \"skipped_steps\": " << skipped_steps << "}";
  return s.str();
}

TrainSummary train(const TrainOptions& options, std::ostream& out, const TrainHooks& hooks) {
  // --distributed: only rank 0 prints (the others write into a stream that discards).
  static std::ostream discard(nullptr);
  const bool silent = options.distributed && dist::init_process_group()->rank() != 0;
  return Trainer(options, silent ? discard : out, hooks).run();
}

}  // namespace precis::train
