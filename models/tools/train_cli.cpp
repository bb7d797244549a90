#include "models/tools/train_cli.h"

#include <CLI/CLI.hpp>

#include <map>
#include <string>

#include "dist/process_group.h"

namespace precis::train {

namespace {

const std::map<std::string, OptimizerKind> kOptimizers{
    {"sgd", OptimizerKind::sgd}, {"adam", OptimizerKind::adam}, {"adamw", OptimizerKind::adamw}};
const std::map<std::string, Schedule> kSchedules{{"none", Schedule::none},
                                                 {"step", Schedule::step},
                                                 {"cosine", Schedule::cosine},
                                                 {"onecycle", Schedule::onecycle},
                                                 {"warmup-cosine", Schedule::warmup_cosine},
                                                 {"warmup-linear", Schedule::warmup_linear}};

// Options every subcommand has. Defaults are set per subcommand before parsing.
struct Common {
  std::string precision, eval_precision = "f32", optimizer, schedule, device = "cpu";
  std::optional<double> lr, weight_decay;
};

void add_common(CLI::App& app, TrainOptions& o, Common& c) {
  app.add_option("--data", o.data, "dataset folder or file (default: see above)");
  app.add_option("--device", c.device, "where to train: cpu, cuda or cuda:N (model, optimizer state, batches, "
                 "evaluation; checkpoints load onto it)")
      ->check([](const std::string& v) {
        try {
          (void)Device::parse(v);
          return std::string();
        } catch (const std::exception& e) {
          return std::string(e.what());
        }
      })
      ->capture_default_str();
  app.add_option("--precision", c.precision,
                 "training precision: f32, bf16 (autocast), f16 (autocast + loss scaler) or amp (the device's "
                 "default: bf16 on the CPU, f16 + loss scaler on CUDA) [default: f32 on the CPU, amp on CUDA]")
      ->check(CLI::IsMember({"f32", "bf16", "f16", "amp"}));
  app.add_flag("--master-weights", o.master_weights,
               "low-precision model: parameters in bf16/f16 (BatchNorm fp32), fp32 master copies in the optimizer");
  app.add_option("--eval-precision", c.eval_precision, "precision of the evaluation: f32, bf16 or f16")
      ->check(CLI::IsMember({"f32", "bf16", "f16"}))
      ->capture_default_str();
  app.add_option("--epochs", o.epochs, "epochs")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--batch", o.batch, "examples per micro-batch")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--lr", c.lr, "learning rate (peak lr for onecycle; default 0.1 for sgd, 1e-3 for adam/adamw)")
      ->check(CLI::PositiveNumber);
  app.add_option("--optimizer", c.optimizer, "sgd, adam or adamw")
      ->check(CLI::IsMember({"sgd", "adam", "adamw"}))
      ->capture_default_str();
  app.add_option("--momentum", o.momentum, "SGD momentum")->check(CLI::Range(0.0, 1.0))->capture_default_str();
  app.add_flag("!--no-nesterov", o.nesterov, "plain instead of Nesterov momentum (SGD)");
  app.add_option("--weight-decay", c.weight_decay,
                 "weight decay (default 5e-4 for sgd, 0 for adam, 0.01 for adamw, decoupled)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--schedule", c.schedule, "lr schedule: none, step, cosine, onecycle, warmup-cosine, warmup-linear")
      ->check(CLI::IsMember({"none", "step", "cosine", "onecycle", "warmup-cosine", "warmup-linear"}))
      ->capture_default_str();
  app.add_option("--warmup-steps", o.warmup_steps, "warmup-*: warmup steps (default 6% of the run)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--step-size", o.step_size, "step: epochs between lr decays")->check(CLI::PositiveNumber);
  app.add_option("--gamma", o.gamma, "step: lr decay factor")->check(CLI::PositiveNumber);
  app.add_option("--clip", o.clip, "clip the gradient 2-norm to this (0: no clipping)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--accum", o.accum, "micro-batches per optimizer step (gradient accumulation)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--checkpoint-activations", o.checkpoint_activations,
                 "recompute activations in backward, per ResNet stage or BERT encoder layer: none, full, or "
                 "selective (keeps the GEMM outputs) [default: none]")
      ->transform(CLI::CheckedTransformer(std::map<std::string, autograd::CheckpointMode>{
          {"none", autograd::CheckpointMode::none},
          {"full", autograd::CheckpointMode::full},
          {"selective", autograd::CheckpointMode::selective}}));
  app.add_option("--threads", o.threads, "intra-op threads (default: $PRECIS_NUM_THREADS, $OMP_NUM_THREADS or the usable cores)")->check(CLI::PositiveNumber);
  app.add_option("--workers", o.workers, "data-loader threads (0: load on the training thread)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--seed", o.seed, "seed of initialisation, shuffling, augmentation, masking, dropout")
      ->capture_default_str();
  app.add_option("--limit-train", o.limit_train, "train on the first N examples only")->check(CLI::NonNegativeNumber);
  app.add_option("--limit-test", o.limit_test, "evaluate on the first N test examples only")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--eval-batch", o.eval_batch, "evaluation batch size")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--checkpoint", o.checkpoint_dir, "write checkpoints to DIR at every epoch end");
  app.add_option("--checkpoint-every", o.checkpoint_every, "also every N optimizer steps")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--keep", o.keep, "checkpoints kept in DIR")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_flag("--resume", o.resume, "continue from the newest checkpoint in --checkpoint DIR");
  app.add_option("--resume-from", o.resume_from, "continue from this checkpoint file")->check(CLI::ExistingFile);
  app.add_option("--stop-after-steps", o.stop_after_steps, "stop (after a checkpoint) once N optimizer steps ran")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--metrics", o.metrics, "write a per-step CSV to FILE (appended to on --resume)");
  app.add_option("--tensorboard", o.tensorboard,
                 "write TensorBoard event files to DIR (`tensorboard --logdir DIR`; a resumed run adds a file)");
  app.add_option("--tensorboard-histograms", o.tensorboard_histograms,
                 "with --tensorboard: weight and gradient histograms every N steps (0: none)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--log-every", o.log_every, "when not on a terminal: a progress line every N steps")
      ->check(CLI::NonNegativeNumber);
  app.add_flag("--quiet", o.quiet, "print only the final JSON line");
  app.add_flag("--distributed", o.distributed,
               "data-parallel: run as one rank of an mpirun job, batch per rank (docs/distributed.md)");
}

}  // namespace

std::optional<TrainOptions> parse_train_cli(int argc, const char* const* argv, std::ostream& out, std::ostream& err,
                                            int* exit_code) {
  CLI::App app{"precis-train: train the bundled models with mixed precision. Every run ends with one JSON line "
               "{\"model\",\"precision\",\"epochs\",\"test_accuracy\",\"samples_per_s\",\"wall_s\",...}.",
               "precis-train"};
  app.require_subcommand(1, 1);
  app.fallthrough(false);
  // An option given twice takes its last value (the usual command-line convention): `make train`
  // passes its defaults first and TRAIN_ARGS after them. Set before the subcommands, which inherit it.
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);

  // resnet: the defaults are those of `make train` (resnet20, 4 epochs, OneCycle SGD).
  TrainOptions resnet_o;
  resnet_o.task = Task::resnet;
  resnet_o.epochs = 4;
  resnet_o.batch = 128;
  Common resnet_c{.optimizer = "sgd", .schedule = "onecycle"};
  CLI::App* resnet = app.add_subcommand("resnet", "a CIFAR-style ResNet on Fashion-MNIST (default), MNIST or CIFAR-10");
  resnet->add_option("--model", resnet_o.model, "resnet20, resnet32, resnet56, resnet18_cifar, resnet18, resnet34, resnet50")
      ->check(CLI::IsMember({"resnet20", "resnet32", "resnet56", "resnet18_cifar", "resnet18-cifar", "resnet18",
                             "resnet34", "resnet50"}))
      ->capture_default_str();
  resnet->add_option("--width", resnet_o.width, "first-stage channels (default: the model's)")
      ->check(CLI::NonNegativeNumber);
  resnet->add_flag("!--no-augment", resnet_o.augment, "no random crop / flip");
  add_common(*resnet, resnet_o, resnet_c);
  resnet->footer("--data: a folder of MNIST-format IDX files (default /usr/share/datasets/fashion-mnist) or of "
                 "CIFAR-10 binaries (data_batch_*.bin)");

  // bert-mini: masked-LM pre-training on WordNet's glosses.
  TrainOptions bert_o;
  bert_o.task = Task::bert_mini;
  bert_o.model = "bert-mini";
  bert_o.epochs = 1;
  bert_o.batch = 32;
  bert_o.eval_batch = 64;
  bert_o.clip = 1.0;
  Common bert_c{.optimizer = "adamw", .schedule = "warmup-linear"};
  CLI::App* bert = app.add_subcommand("bert-mini", "BERT-mini (L4 H256 A4) masked-LM on WordNet glosses or any text");
  bert->add_option("--vocab", bert_o.vocab, "vocab.txt to use; when absent it is trained and written there")
      ->capture_default_str();
  bert->add_option("--vocab-size", bert_o.vocab_size, "size of a trained vocabulary")
      ->check(CLI::Range(int64_t{16}, int64_t{1} << 20))
      ->capture_default_str();
  bert->add_option("--max-tokens", bert_o.max_tokens,
                   "dynamic batching: batches of similar-length sequences holding up to N padded tokens")
      ->check(CLI::NonNegativeNumber);
  bert->add_option("--max-len", bert_o.max_len, "truncate sequences to N tokens")->check(CLI::Range(3, 512))->capture_default_str();
  bert->add_option("--hidden", bert_o.hidden, "hidden size")->check(CLI::PositiveNumber)->capture_default_str();
  bert->add_option("--layers", bert_o.layers, "encoder layers")->check(CLI::PositiveNumber)->capture_default_str();
  bert->add_option("--heads", bert_o.heads, "attention heads")->check(CLI::PositiveNumber)->capture_default_str();
  bert->add_option("--intermediate", bert_o.intermediate, "feed-forward size")->check(CLI::PositiveNumber)->capture_default_str();
  add_common(*bert, bert_o, bert_c);
  bert->footer("--data: WordNet's folder (default /usr/share/wordnet: its glosses), or any text file or folder of "
               "text files (one sequence per line); every 20th line is held out for testing");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // CLI11 has an exit code per kind of error; precis-train's contract is 2 for any usage error.
    *exit_code = app.exit(e, out, err) == 0 ? 0 : 2;
    return std::nullopt;
  }
  const bool is_resnet = resnet->parsed();
  TrainOptions o = is_resnet ? resnet_o : bert_o;
  const Common& c = is_resnet ? resnet_c : bert_c;
  if (o.model == "resnet18-cifar") o.model = "resnet18_cifar";
  o.device = Device::parse(c.device);
  // Data parallel on GPUs: a bare "cuda" means one device per rank, the rank's index on its node
  // (as torchrun's LOCAL_RANK); "cuda:N" is taken as written.
  if (o.distributed && c.device == "cuda") o.device = Device::cuda(dist::init_process_group()->local_rank());
  o.precision = resolve_precision(c.precision, o.device);
  o.eval_precision = resolve_precision(c.eval_precision, o.device);
  o.optimizer = kOptimizers.at(c.optimizer);
  o.schedule = kSchedules.at(c.schedule);
  o.lr = c.lr.value_or(o.optimizer == OptimizerKind::sgd ? 0.1 : 1e-3);
  o.weight_decay = c.weight_decay.value_or(o.optimizer == OptimizerKind::sgd     ? 5e-4
                                           : o.optimizer == OptimizerKind::adamw ? 0.01
                                                                                 : 0.0);
  *exit_code = 0;
  return o;
}

}  // namespace precis::train
