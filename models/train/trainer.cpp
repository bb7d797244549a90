#include "models/train/trainer.h"

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>

#include "amp/autocast.h"
#include "amp/grad_scaler.h"
#include "autograd/grad_mode.h"
#include "core/error.h"
#include "core/rng.h"
#include "core/thread_pool.h"
#include "models/train/checkpoint.h"
#include "models/train/progress.h"
#include "models/train/task.h"
#include "ops/functional.h"
#include "optim/accumulation.h"
#include "optim/adam.h"
#include "optim/lr_scheduler.h"
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

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

std::string json_number(double v, int digits) {
  if (!std::isfinite(v)) return "null";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

// An autocast region for `precision` (none for f32).
amp::AutocastOptions autocast_for(DType precision) {
  return {.device_type = DeviceType::cpu,
          .dtype = precision == DType::f32 ? DType::bf16 : precision,
          .enabled = precision != DType::f32};
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

// The options a checkpoint must agree with to be resumed: a different value would make the
// restored state meaningless (shapes, dtypes) or the continuation differ from the original run.
std::map<std::string, std::string> run_identity(const TrainOptions& o, const TrainTask& task) {
  std::map<std::string, std::string> m = task.metadata();
  m["task"] = o.task == Task::resnet ? "resnet" : "bert-mini";
  m["model"] = o.model;
  m["width"] = std::to_string(o.width);
  m["precision"] = precision_name(o.precision);
  m["master_weights"] = o.master_weights ? "1" : "0";
  m["optimizer"] = optimizer_name(o.optimizer);
  m["batch"] = std::to_string(o.batch);
  m["max_tokens"] = std::to_string(o.max_tokens);
  m["accum"] = std::to_string(o.accum);
  m["seed"] = std::to_string(o.seed);
  m["limit_train"] = std::to_string(o.limit_train);
  return m;
}

// What the trainer itself carries across a checkpoint.
struct RunState {
  int64_t global_step = 0;
  int64_t skipped = 0;
  // The current epoch's running figures (for the progress line and the epoch summary).
  double loss_sum = 0;  // sum of micro-batch mean losses
  int64_t micro_batches = 0;
  int64_t correct = 0, count = 0, samples = 0;

  void reset_epoch() { loss_sum = 0, micro_batches = 0, correct = 0, count = 0, samples = 0; }
};

StateDict trainer_state(const RunState& s, data::DataPosition pos) {
  const Generator& g = default_generator();
  return {{"global_step", state_int(s.global_step)},
          {"skipped", state_int(s.skipped)},
          {"epoch", state_int(pos.epoch)},
          {"batch", state_int(pos.batch)},
          {"generator_seed", state_int(static_cast<int64_t>(g.seed()))},
          {"generator_offset", state_int(static_cast<int64_t>(g.offset()))},
          {"loss_sum", state_real(s.loss_sum)},
          {"micro_batches", state_int(s.micro_batches)},
          {"correct", state_int(s.correct)},
          {"count", state_int(s.count)},
          {"samples", state_int(s.samples)}};
}

struct Evaluation {
  double loss = 0, accuracy = 0;
  int64_t count = 0;
  double seconds = 0;
};

Evaluation evaluate(TrainTask& task, const std::shared_ptr<nn::Module>& model, const TrainOptions& o) {
  const auto start = Clock::now();
  std::shared_ptr<nn::Module> m = model;
  // A low-precision model evaluated in fp32: a copy of its (rounded) weights in fp32.
  if (o.master_weights && o.eval_precision == DType::f32) {
    m = task.clone_model(*model);
    m->to(DType::f32);
  }
  m->eval();
  Evaluation e;
  double loss_sum = 0;
  int64_t correct = 0;
  {
    NoGradGuard no_grad;
    for (data::Batch& b : task.test_loader().epoch(0)) {
      amp::Autocast ac(autocast_for(o.eval_precision));
      ForwardStats s = task.forward(*m, b);
      if (s.count == 0) continue;
      loss_sum += s.loss.item<double>() * static_cast<double>(s.count);
      correct += s.correct;
      e.count += s.count;
    }
  }
  model->train();
  e.loss = e.count > 0 ? loss_sum / static_cast<double>(e.count) : NAN;
  e.accuracy = e.count > 0 ? static_cast<double>(correct) / static_cast<double>(e.count) : NAN;
  e.seconds = seconds_since(start);
  return e;
}

class MetricsCsv {
 public:
  MetricsCsv(const std::string& path, bool append) {
    if (path.empty()) return;
    const bool fresh = !append || !std::filesystem::exists(path) || std::filesystem::file_size(path) == 0;
    out_.open(path, append ? std::ios::app : std::ios::trunc);
    PRECIS_CHECK_T(IOError, out_.good(), "--metrics: cannot write '", path, "'");
    if (fresh)
      out_ << "epoch,step,epoch_step,lr,loss,accuracy,loss_scale,applied,grad_norm,samples_per_s,data_wait\n";
  }
  bool enabled() const { return out_.is_open(); }
  void row(int64_t epoch, int64_t step, int64_t epoch_step, double lr, double loss, double accuracy, double scale,
           bool applied, double grad_norm, double samples_per_s, double data_wait) {
    if (!enabled()) return;
    char buf[320];
    std::snprintf(buf, sizeof buf, "%lld,%lld,%lld,%.6g,%.6f,%.6f,%.6g,%d,%s,%.1f,%.4f\n",
                  static_cast<long long>(epoch + 1), static_cast<long long>(step), static_cast<long long>(epoch_step),
                  lr, loss, accuracy, scale, applied ? 1 : 0,
                  std::isnan(grad_norm) ? "" : json_number(grad_norm, 6).c_str(), samples_per_s, data_wait);
    out_ << buf;
    out_.flush();
  }

 private:
  std::ofstream out_;
};

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

void validate(const TrainOptions& o) {
  auto positive = [](const char* name, int64_t v) {
    PRECIS_CHECK(v > 0, "precis-train: ", name, " must be positive, got ", v);
  };
  positive("--epochs", o.epochs);
  positive("--batch", o.batch);
  positive("--accum", o.accum);
  positive("--eval-batch", o.eval_batch);
  PRECIS_CHECK(o.precision == DType::f32 || o.precision == DType::bf16 || o.precision == DType::f16,
               "precis-train: --precision must be f32, bf16 or f16");
  PRECIS_CHECK(o.eval_precision == DType::f32 || o.eval_precision == DType::bf16 || o.eval_precision == DType::f16,
               "precis-train: --eval-precision must be f32, bf16 or f16");
  PRECIS_CHECK(!o.master_weights || o.precision != DType::f32,
               "precis-train: --master-weights keeps the model in low precision with fp32 master copies; "
               "it needs --precision bf16 or f16");
  PRECIS_CHECK(o.lr > 0 && std::isfinite(o.lr), "precis-train: --lr must be positive, got ", o.lr);
  PRECIS_CHECK(o.clip >= 0, "precis-train: --clip must be >= 0 (0 disables clipping), got ", o.clip);
  PRECIS_CHECK(o.weight_decay >= 0, "precis-train: --weight-decay must be >= 0, got ", o.weight_decay);
  PRECIS_CHECK(o.workers >= 0, "precis-train: --workers must be >= 0, got ", o.workers);
  PRECIS_CHECK(o.threads >= 0, "precis-train: --threads must be >= 0, got ", o.threads);
  PRECIS_CHECK(o.keep >= 1, "precis-train: --keep must be >= 1, got ", o.keep);
  PRECIS_CHECK(o.checkpoint_every >= 0 && o.stop_after_steps >= 0 && o.limit_train >= 0 && o.limit_test >= 0,
               "precis-train: step and example counts must be >= 0");
  PRECIS_CHECK(!o.resume || !o.checkpoint_dir.empty() || !o.resume_from.empty(),
               "precis-train: --resume needs --checkpoint DIR (resume from its newest checkpoint) or a file "
               "(--resume-from FILE)");
  PRECIS_CHECK(o.checkpoint_every == 0 || !o.checkpoint_dir.empty(),
               "precis-train: --checkpoint-every needs --checkpoint DIR");
  if (o.task == Task::bert_mini) {
    positive("--max-len", o.max_len);
    PRECIS_CHECK(o.max_len >= 3, "precis-train: --max-len must be >= 3 ([CLS] token [SEP])");
    PRECIS_CHECK(o.max_tokens == 0 || o.max_tokens >= o.max_len, "precis-train: --max-tokens ", o.max_tokens,
                 " must be at least --max-len ", o.max_len, " (a batch must hold the longest sequence)");
    PRECIS_CHECK(o.hidden > 0 && o.heads > 0 && o.hidden % o.heads == 0, "precis-train: --hidden ", o.hidden,
                 " must be a positive multiple of --heads ", o.heads);
  }
}

TrainSummary train(const TrainOptions& options, std::ostream& out) {
  const auto run_start = Clock::now();
  TrainOptions o = options;
  validate(o);
  if (o.threads > 0) set_num_threads(o.threads);
  manual_seed(o.seed);  // model initialisation and dropout

  std::unique_ptr<TrainTask> task = o.task == Task::resnet ? make_image_task(o, out) : make_mlm_task(o, out);
  std::shared_ptr<nn::Module> model = task->model();
  if (o.master_weights) model->to(o.precision);
  model->train();
  std::unique_ptr<optim::Optimizer> opt = make_optimizer(o, model->parameters());
  amp::GradScaler scaler(amp::GradScalerOptions{.enabled = o.precision == DType::f16});
  scaler.set_parameter_names(model->named_parameters());
  optim::GradAccumulator acc(o.accum);
  data::DataLoader& loader = task->train_loader();

  auto steps_in = [&](int64_t epoch) { return (loader.num_batches(epoch) + o.accum - 1) / o.accum; };
  int64_t total_steps = 0;
  for (int64_t e = 0; e < o.epochs; ++e) total_steps += steps_in(e);
  PRECIS_CHECK(total_steps > 0, "precis-train: the training set gives no batches (", loader.dataset().size(),
               " examples, batch ", o.batch, ")");
  std::unique_ptr<optim::LRScheduler> sched = make_scheduler(o, *opt, steps_in(0), total_steps);

  const std::map<std::string, std::string> identity = run_identity(o, *task);
  RunState st;
  data::DataPosition pos;
  std::string resumed_from;
  if (o.resume) {
    std::string path = o.resume_from;
    if (path.empty()) {
      std::optional<std::string> latest = latest_checkpoint(o.checkpoint_dir);
      PRECIS_CHECK_T(IOError, latest.has_value(), "precis-train --resume: no checkpoint (step-*.safetensors) in '",
                     o.checkpoint_dir, "'");
      path = *latest;
    }
    Checkpoint ck = load_checkpoint(path);
    for (const auto& [key, value] : identity) {
      auto it = ck.metadata.find(key);
      const std::string saved = it == ck.metadata.end() ? "(absent)" : it->second;
      PRECIS_CHECK(saved == value, "precis-train --resume: checkpoint '", path, "' was written with ", key, " = ",
                   saved, " but this run has ", key, " = ", value, "; resume with the original options");
    }
    model->load_state_dict(state_subset(ck.state, "model."));
    opt->load_state_dict(state_subset(ck.state, "optimizer."));
    if (scaler.is_enabled()) scaler.load_state_dict(state_subset(ck.state, "scaler."));
    if (sched) sched->load_state_dict(state_subset(ck.state, "scheduler."));
    acc.load_state_dict(state_subset(ck.state, "accumulator."));
    const StateDict t = state_subset(ck.state, "trainer.");
    const char* who = "precis-train checkpoint";
    st.global_step = state_get_int(t, "global_step", who);
    st.skipped = state_get_int(t, "skipped", who);
    pos.epoch = state_get_int(t, "epoch", who);
    pos.batch = state_get_int(t, "batch", who);
    default_generator().set_state(static_cast<uint64_t>(state_get_int(t, "generator_seed", who)),
                                  static_cast<uint64_t>(state_get_int(t, "generator_offset", who)));
    st.loss_sum = state_get_real(t, "loss_sum", who);
    st.micro_batches = state_get_int(t, "micro_batches", who);
    st.correct = state_get_int(t, "correct", who);
    st.count = state_get_int(t, "count", who);
    st.samples = state_get_int(t, "samples", who);
    resumed_from = path;
    if (!o.quiet)
      out << "resumed from " << path << " (step " << st.global_step << ", epoch " << pos.epoch + 1 << ", batch "
          << pos.batch << ")\n";
  }

  TrainSummary summary;
  summary.model = o.model;
  summary.precision = std::string(precision_name(o.precision)) + (o.master_weights ? "-master" : "");
  summary.test_accuracy = NAN;
  summary.test_loss = NAN;
  summary.epochs = static_cast<double>(pos.epoch);

  if (!o.quiet)
    out << "training: " << o.epochs << " epochs of " << steps_in(0) << " steps, batch "
        << (o.max_tokens > 0 ? "<= " + std::to_string(o.max_tokens) + " tokens" : std::to_string(o.batch))
        << (o.accum > 1 ? " × " + std::to_string(o.accum) + " micro-batches" : "") << ", "
        << precision_name(o.precision) << (o.master_weights                ? " model with fp32 master weights"
                                                       : o.precision == DType::f32 ? ""
                                                                                   : " autocast")
        << (scaler.is_enabled() ? " + loss scaler" : "") << ", " << optimizer_name(o.optimizer) << " lr " << o.lr
        << ", schedule " << schedule_name(o.schedule) << ", " << get_num_threads() << " threads, " << o.workers
        << " loader workers\n";

  std::string last_checkpoint;
  auto checkpoint = [&](data::DataPosition at) {
    if (o.checkpoint_dir.empty()) return;
    StateDict state;
    state_merge(state, model->state_dict(), "model.");
    state_merge(state, opt->state_dict(), "optimizer.");
    state_merge(state, scaler.state_dict(), "scaler.");
    if (sched) state_merge(state, sched->state_dict(), "scheduler.");
    state_merge(state, acc.state_dict(), "accumulator.");
    state_merge(state, trainer_state(st, at), "trainer.");
    std::map<std::string, std::string> meta = identity;
    meta["format"] = "precis-train checkpoint 1";
    last_checkpoint = save_checkpoint(o.checkpoint_dir, st.global_step, state, meta, o.keep);
  };

  MetricsCsv metrics(o.metrics, o.resume);
  const bool tty = o.progress >= 0 ? o.progress == 1 : ::isatty(STDOUT_FILENO) == 1;
  double train_seconds = 0;
  int64_t train_samples = 0;
  bool stop = false;

  for (int64_t epoch = pos.epoch; epoch < o.epochs && !stop; ++epoch) {
    const int64_t first_batch = epoch == pos.epoch ? pos.batch : 0;
    if (first_batch == 0) st.reset_epoch();
    const int64_t epoch_steps = steps_in(epoch);
    int64_t epoch_step = first_batch / o.accum;
    const int64_t log_every = o.log_every > 0 ? o.log_every : std::max<int64_t>(1, epoch_steps / 10);
    Progress progress(out, tty, log_every, o.quiet);
    loader.set_position(epoch, first_batch);

    const auto epoch_start = Clock::now();
    int64_t epoch_samples = 0;  // in this process
    // The current optimizer step's micro-batches.
    double step_loss = 0;
    int64_t step_correct = 0, step_count = 0, step_samples = 0, step_micro = 0;
    auto step_start = Clock::now();

    auto info = [&]() {
      ProgressInfo p;
      p.epoch = epoch, p.epochs = o.epochs, p.step = epoch_step, p.steps = epoch_steps;
      p.loss = st.micro_batches > 0 ? st.loss_sum / static_cast<double>(st.micro_batches) : 0.0;
      p.accuracy = st.count > 0 ? static_cast<double>(st.correct) / static_cast<double>(st.count) : 0.0;
      p.metric = o.task == Task::resnet ? "acc" : "mlm-acc";
      const double elapsed = seconds_since(epoch_start);
      p.samples_per_s = elapsed > 0 ? static_cast<double>(epoch_samples) / elapsed : 0.0;
      p.scale = scaler.is_enabled() ? scaler.get_scale() : 0.0;
      p.skipped = st.skipped;
      p.data_wait = loader.wait_fraction();
      p.lr = opt->group_lr(0);
      const int64_t done_here = epoch_step - first_batch / o.accum;
      p.eta_s = done_here > 0 ? elapsed / static_cast<double>(done_here) * static_cast<double>(epoch_steps - epoch_step)
                              : -1.0;
      return p;
    };

    auto optimizer_step = [&]() {
      double grad_norm = NAN;
      if (o.clip > 0) grad_norm = scaler.clip_grad_norm_(*opt, o.clip).item<double>();
      const double lr = opt->group_lr(0);
      amp::StepResult r = scaler.step(*opt);
      scaler.update();
      const bool applied = r.applied();
      if (!applied) ++st.skipped;
      if (sched) sched->step(applied);
      opt->zero_grad();
      ++st.global_step;
      ++epoch_step;
      const double dt = seconds_since(step_start);
      metrics.row(epoch, st.global_step, epoch_step, lr, step_loss / static_cast<double>(step_micro),
                  step_count > 0 ? static_cast<double>(step_correct) / static_cast<double>(step_count) : 0.0,
                  r.scale_before(), applied, grad_norm, dt > 0 ? static_cast<double>(step_samples) / dt : 0.0,
                  loader.wait_fraction());
      step_loss = 0, step_correct = 0, step_count = 0, step_samples = 0, step_micro = 0;
      step_start = Clock::now();
    };

    for (data::Batch& b : loader) {
      ForwardStats s;
      {
        amp::Autocast ac(autocast_for(o.precision));
        s = task->forward(*model, b);
      }
      Tensor loss = o.accum > 1 ? mul(s.loss, acc.loss_scale()) : s.loss;
      scaler.scale(loss).backward();
      const double loss_value = s.loss.item<double>();
      st.loss_sum += loss_value, ++st.micro_batches;
      st.correct += s.correct, st.count += s.count, st.samples += s.samples;
      step_loss += loss_value, step_correct += s.correct, step_count += s.count, step_samples += s.samples;
      ++step_micro;
      epoch_samples += s.samples;
      if (!acc.micro_step()) continue;
      optimizer_step();
      progress.update(info());
      if (o.checkpoint_every > 0 && st.global_step % o.checkpoint_every == 0) checkpoint(loader.position());
      if (o.stop_after_steps > 0 && st.global_step >= o.stop_after_steps) {
        stop = true;
        summary.epochs = static_cast<double>(epoch) + static_cast<double>(epoch_step) / static_cast<double>(epoch_steps);
        break;
      }
    }
    // A last window shorter than accum micro-batches still makes a step (its gradient is the
    // window's sum over accum, so slightly smaller): every example of the epoch counts.
    if (!stop && acc.micro_steps_pending() > 0) {
      optimizer_step();
      acc.reset();
    }
    const double epoch_seconds = seconds_since(epoch_start);
    train_seconds += epoch_seconds;
    train_samples += epoch_samples;
    progress.update(info(), /*last=*/true);
    progress.break_line();
    if (stop) {
      if (!(o.checkpoint_every > 0 && st.global_step % o.checkpoint_every == 0)) checkpoint(loader.position());
      if (!o.quiet)
        out << "stopped after step " << st.global_step << " (--stop-after-steps)"
            << (last_checkpoint.empty() ? "" : "; checkpoint " + last_checkpoint) << "\n";
      break;
    }
    summary.epochs = static_cast<double>(epoch + 1);
    checkpoint(loader.position());
    const Evaluation ev = evaluate(*task, model, o);
    summary.test_accuracy = ev.accuracy;
    summary.test_loss = ev.loss;
    if (!o.quiet) {
      char line[400];
      std::snprintf(line, sizeof line,
                    "epoch %lld/%lld: train loss %.4f %s %.2f%% (%.1f s, %.0f samples/s, data wait %.0f%%) | test "
                    "loss %.4f %s %.2f%% (%s, %.1f s)%s%s\n",
                    static_cast<long long>(epoch + 1), static_cast<long long>(o.epochs),
                    st.micro_batches > 0 ? st.loss_sum / static_cast<double>(st.micro_batches) : NAN, task->metric(),
                    st.count > 0 ? 100.0 * static_cast<double>(st.correct) / static_cast<double>(st.count) : NAN,
                    epoch_seconds, epoch_seconds > 0 ? static_cast<double>(epoch_samples) / epoch_seconds : 0.0,
                    100.0 * loader.wait_fraction(), ev.loss, task->metric(), 100.0 * ev.accuracy,
                    precision_name(o.eval_precision), ev.seconds,
                    st.skipped > 0 ? (", skipped steps so far " + std::to_string(st.skipped)).c_str() : "",
                    last_checkpoint.empty() ? "" : ("; saved " + last_checkpoint).c_str());
      out << line << std::flush;
    }
  }

  summary.steps = st.global_step;
  summary.skipped_steps = st.skipped;
  summary.stopped_early = stop;
  summary.last_checkpoint = last_checkpoint;
  summary.train_s = train_seconds;
  summary.samples_per_s = train_seconds > 0 ? static_cast<double>(train_samples) / train_seconds : 0.0;
  summary.wall_s = seconds_since(run_start);
  return summary;
}

}  // namespace precis::train
