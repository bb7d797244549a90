#include "models/tools/train_cli.h"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "core/strings.h"
#include "data/idx.h"
#include "data/text/corpus.h"
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

// ---- value checks ------------------------------------------------------------------------------
// Each says what is allowed and what it got. CLI11's own checks print their bounds as doubles
// (0 to 1.797...e308 in 310 digits for "positive") and call a word that is not a number "not in
// range". The messages start with "must": parse_train_cli puts the option's name before them.

// An integer in [min, max], for an option of an integer type up to int64 (or uint64 when min >= 0).
// `open_ended`: max is only the type's limit, so the allowed range reads "≥ min" unless exceeded.
CLI::Validator integer(int64_t min, uint64_t max, bool open_ended = false) {
  const std::string from_to = "an integer from " + std::to_string(min) + " to " + std::to_string(max);
  const std::string allowed = open_ended ? "an integer ≥ " + std::to_string(min) : from_to;
  return CLI::Validator(
      [=](std::string& v) -> std::string {
        const char* end = v.data() + v.size();
        std::from_chars_result r{};
        bool below = false, above = false;
        if (!v.empty() && v[0] == '-') {
          int64_t x = 0;
          r = std::from_chars(v.data(), end, x);
          below = r.ec == std::errc::result_out_of_range || x < min;
        } else {
          uint64_t x = 0;
          r = std::from_chars(v.data() + (!v.empty() && v[0] == '+'), end, x);
          above = r.ec == std::errc::result_out_of_range || x > max;
          below = !above && min > 0 && x < static_cast<uint64_t>(min);
        }
        if (r.ptr != end || r.ec == std::errc::invalid_argument) return "must be " + allowed + ", got '" + v + "'";
        if (above) return "must be " + from_to + ", got " + v;
        return below ? "must be " + allowed + ", got " + v : std::string();
      },
      "");
}
template <typename T>
CLI::Validator integer(int64_t min) {
  return integer(min, static_cast<uint64_t>(std::numeric_limits<T>::max()), true);
}

// A finite number above `low` (or at least it, when `inclusive`) and at most `high`.
CLI::Validator number(double low, bool inclusive, double high = INFINITY) {
  auto text = [](double x) {
    std::string s = std::to_string(x);
    s.erase(s.find_last_not_of('0') + 1);
    if (s.back() == '.') s.pop_back();
    return s;
  };
  const std::string allowed = std::isinf(high) ? std::string("a number ") + (inclusive ? "≥ " : "> ") + text(low)
                                               : "a number from " + text(low) + " to " + text(high);
  return CLI::Validator(
      [=](std::string& v) -> std::string {
        char* end = nullptr;
        const double x = v.empty() ? NAN : std::strtod(v.c_str(), &end);
        if (v.empty() || end != v.c_str() + v.size() || std::isnan(x))
          return "must be " + allowed + ", got '" + v + "', which is not a number";
        const bool ok = std::isfinite(x) && (inclusive ? x >= low : x > low) && x <= high;
        return ok ? std::string() : "must be " + allowed + ", got " + v;
      },
      "");
}

// One of `names`; a near miss gets a suggestion.
CLI::Validator one_of(std::vector<std::string> names) {
  return CLI::Validator(
      [names](std::string& v) -> std::string {
        if (std::find(names.begin(), names.end(), v) != names.end()) return "";
        std::string list, best;
        // A near miss: one edit in a short name ("bf61" is not "f32"), two in a longer one.
        size_t best_distance = v.size() <= 4 ? 2 : 3;
        for (const std::string& n : names) {
          list += (list.empty() ? "" : ", ") + n;
          if (const size_t d = edit_distance(v, n); d < best_distance) best_distance = d, best = n;
        }
        return "must be one of " + list + ", got '" + v + "'" + (best.empty() ? "" : " (did you mean " + best + "?)");
      },
      "");
}

// ---- unknown options ---------------------------------------------------------------------------

// The long option names of `app` ("--batch", ...), help included.
std::vector<std::string> long_names(const CLI::App& app) {
  std::vector<std::string> out;
  for (const CLI::Option* opt : app.get_options())
    for (const std::string& n : opt->get_lnames()) out.push_back("--" + n);
  return out;
}

// "unknown option --batc (did you mean --batch?)" for each argument that looks like an option of
// neither the chosen subcommand nor its parent; "unexpected argument 'x'" for the other leftovers.
std::string explain_extras(const CLI::App& app, const CLI::App* sub, const std::vector<std::string>& extras) {
  const std::vector<std::string> known = long_names(sub != nullptr ? *sub : app);
  std::string out;
  bool after_unknown_option = false;
  for (const std::string& arg : extras) {
    std::string text;
    const bool value_of_previous = after_unknown_option;  // "--batc 64": 64 is --batc's value
    after_unknown_option = false;
    if (arg.size() > 1 && arg[0] == '-') {
      after_unknown_option = arg.find('=') == std::string::npos;
      const std::string name = "--" + arg.substr(arg.find_first_not_of('-'), arg.find('=') - arg.find_first_not_of('-'));
      std::string best;
      size_t best_distance = std::max<size_t>(2, name.size() / 4) + 1;
      for (const std::string& k : known)
        if (const size_t d = edit_distance(name, k); d < best_distance) best_distance = d, best = k;
      text = "unknown option " + arg;
      if (!best.empty()) {
        text += " (did you mean " + best + "?)";
      } else {
        // An option of the other subcommand: say so rather than "unknown".
        for (const CLI::App* other : app.get_subcommands([](const CLI::App*) { return true; })) {
          if (other == sub) continue;
          const std::vector<std::string> theirs = long_names(*other);
          if (std::find(theirs.begin(), theirs.end(), name) != theirs.end())
            text = arg + " is an option of " + other->get_name() + ", not of " + (sub ? sub->get_name() : "precis-train");
        }
      }
    } else if (value_of_previous) {
      continue;
    } else {
      text = "unexpected argument '" + arg + "'";
    }
    out += (out.empty() ? "" : "; ") + text;
  }
  return out;
}

// ---- the options -------------------------------------------------------------------------------

// Options every subcommand has. Defaults are set per subcommand before parsing.
struct Common {
  std::string precision = "auto", eval_precision = "f32", optimizer, schedule, device = "cpu", fp8_amax = "max";
  std::string checkpoint_activations = "none";
  std::optional<double> lr, weight_decay;
};

// What differs between the subcommands' texts of a common option.
struct Texts {
  std::string data, data_default, normalisation;
};

void add_common(CLI::App& app, TrainOptions& o, Common& c, const Texts& t) {
  app.add_option("--data", o.data, t.data)->default_str(t.data_default);
  app.add_option("--device", c.device, "where to train: cpu, cuda or cuda:N (model, optimizer state, batches, "
                 "evaluation; checkpoints load onto it)")
      ->check(CLI::Validator(
          [](std::string& v) {
            try {
              (void)Device::parse(v);
              return std::string();
            } catch (const std::exception&) {
              return "must be cpu, cuda or cuda:N, got '" + v + "'";
            }
          },
          ""))
      ->capture_default_str();
  app.add_option("--precision", c.precision,
                 "training precision: auto (bf16 on a CPU with native bf16 dot products — AVX512-BF16 or AMX — "
                 "else f32; f16 + loss scaler on CUDA), f32, bf16 (autocast), f16 (autocast + loss scaler) or amp "
                 "(the device's mixed precision: bf16 on the CPU, f16 + loss scaler on CUDA), or fp8 (bf16 with the "
                 "linear layers' GEMMs in fp8, delayed scaling: docs/fp8.md). The run's first line says which")
      ->check(one_of({"auto", "f32", "bf16", "f16", "fp8", "amp"}))
      ->capture_default_str();
  app.add_flag("--master-weights", o.master_weights,
               "low-precision model: parameters in bf16/f16 (" + t.normalisation +
                   " fp32), fp32 master copies in the optimizer");
  app.add_option("--fp8-history", o.fp8_options.amax_history_len,
                 "with --precision fp8: steps of amax history per scaled tensor (Transformer Engine's default)")
      ->check(integer<int64_t>(1))
      ->capture_default_str();
  app.add_option("--fp8-amax", c.fp8_amax,
                 "with --precision fp8: the history's amax: max (of the window) or most_recent")
      ->check(one_of({"max", "most_recent"}))
      ->capture_default_str();
  app.add_option("--fp8-margin", o.fp8_options.margin, "with --precision fp8: scale = (fp8 max / amax) / 2^margin")
      ->check(number(-64, true, 64))
      ->capture_default_str();
  app.add_option("--eval-precision", c.eval_precision, "precision of the evaluation: f32, bf16 or f16")
      ->check(one_of({"f32", "bf16", "f16"}))
      ->capture_default_str();
  app.add_option("--epochs", o.epochs, "epochs")->check(integer<int64_t>(1))->capture_default_str();
  app.add_option("--batch", o.batch, "examples per micro-batch")->check(integer<int64_t>(1))->capture_default_str();
  app.add_option("--lr", c.lr, "learning rate (peak lr for onecycle; default 0.1 for sgd, 1e-3 for adam/adamw)")
      ->check(number(0, false));
  app.add_option("--optimizer", c.optimizer, "sgd, adam or adamw")
      ->check(one_of({"sgd", "adam", "adamw"}))
      ->capture_default_str();
  app.add_option("--momentum", o.momentum, "SGD momentum")->check(number(0, true, 1))->capture_default_str();
  app.add_flag("!--no-nesterov", o.nesterov, "plain instead of Nesterov momentum (SGD)");
  app.add_option("--weight-decay", c.weight_decay,
                 "weight decay (default 5e-4 for sgd, 0 for adam, 0.01 for adamw, decoupled)")
      ->check(number(0, true));
  app.add_option("--schedule", c.schedule, "lr schedule: none, step, cosine, onecycle, warmup-cosine, warmup-linear")
      ->check(one_of({"none", "step", "cosine", "onecycle", "warmup-cosine", "warmup-linear"}))
      ->capture_default_str();
  app.add_option("--warmup-steps", o.warmup_steps, "warmup-*: warmup steps (default 6% of the run)")
      ->check(integer<int64_t>(0));
  app.add_option("--step-size", o.step_size, "step: epochs between lr decays")->check(integer<int64_t>(1));
  app.add_option("--gamma", o.gamma, "step: lr decay factor")->check(number(0, false));
  app.add_option("--clip", o.clip, "clip the gradient 2-norm to this (0: no clipping)")
      ->check(number(0, true))
      ->capture_default_str();
  app.add_option("--accum", o.accum, "micro-batches per optimizer step (gradient accumulation)")
      ->check(integer<int64_t>(1))
      ->capture_default_str();
  app.add_option("--checkpoint-activations", c.checkpoint_activations,
                 "recompute activations in backward, per ResNet block or BERT encoder layer: none, full, or "
                 "selective (keeps most GEMM outputs: docs/checkpointing.md)")
      ->check(one_of({"none", "full", "selective"}))
      ->capture_default_str();
  app.add_option("--threads", o.threads,
                 "intra-op threads (default: $PRECIS_NUM_THREADS, $OMP_NUM_THREADS or the usable cores); a resumed "
                 "run needs the count of the run it continues")
      ->check(integer<int>(1));
  app.add_flag("--allow-thread-change", o.allow_thread_change,
               "resume with another --threads than the checkpoint's run (the continuation is then not bit-exact)");
  app.add_option("--workers", o.workers, "data-loader threads (0: load on the training thread)")
      ->check(integer<int>(0))
      ->capture_default_str();
  app.add_option("--seed", o.seed, "seed of initialisation, shuffling, augmentation, masking, dropout")
      ->check(integer<uint64_t>(0))
      ->capture_default_str();
  app.add_option("--limit-train", o.limit_train, "train on the first N examples only")->check(integer<int64_t>(0));
  app.add_option("--limit-test", o.limit_test, "evaluate on the first N test examples only")
      ->check(integer<int64_t>(0));
  app.add_option("--eval-batch", o.eval_batch, "evaluation batch size")
      ->check(integer<int64_t>(1))
      ->capture_default_str();
  app.add_option("--checkpoint", o.checkpoint_dir, "write checkpoints to DIR at every epoch end");
  app.add_option("--checkpoint-every", o.checkpoint_every, "also every N optimizer steps")
      ->check(integer<int64_t>(0));
  app.add_option("--keep", o.keep, "checkpoints kept in DIR")->check(integer<int>(1))->capture_default_str();
  app.add_flag("--resume", o.resume, "continue from the newest checkpoint in --checkpoint DIR");
  app.add_option("--resume-from", o.resume_from, "continue from this checkpoint file (--resume not needed)")
      ->check(CLI::Validator(
          [](std::string& v) {
            return std::filesystem::is_regular_file(v) ? std::string()
                                                       : "must name a checkpoint file, got '" + v + "', which " +
                                                             (std::filesystem::exists(v) ? "is not a file" : "does not exist");
          },
          ""));
  app.add_option("--stop-after-steps", o.stop_after_steps, "stop (after a checkpoint) once N optimizer steps ran")
      ->check(integer<int64_t>(0));
  app.add_option("--metrics", o.metrics, "write a per-step CSV to FILE (appended to on resume)");
  app.add_option("--tensorboard", o.tensorboard,
                 "write TensorBoard event files to DIR (`tensorboard --logdir DIR`; a resumed run adds a file)");
  app.add_option("--tensorboard-histograms", o.tensorboard_histograms,
                 "with --tensorboard: weight and gradient histograms every N steps (0: none)")
      ->check(integer<int64_t>(0));
  app.add_option("--log-every", o.log_every, "when not on a terminal: a progress line every N steps")
      ->check(integer<int64_t>(0));
  app.add_flag("--quiet", o.quiet, "print only the final JSON line");
  app.add_flag("--distributed", o.distributed,
               "data-parallel: run as one rank of an mpirun job, batch per rank (docs/distributed.md)");
  app.add_flag("--cuda-graphs", o.cuda_graphs,
               "capture the step of a full batch in a CUDA graph and replay it (resnet, --device cuda, --accum 1): "
               "one launch per step instead of one per kernel");
  app.add_flag("--zero", o.zero,
               "with --distributed: shard the optimizer state over the ranks (ZeRO-1; the same results and "
               "checkpoints, 1/N of the state per rank)");
}

// "--batch: must be ..." (CLI11's "NAME: MESSAGE" of a failed check) → "--batch must be ...".
std::string join_option_and_check(std::string message) {
  const size_t colon = message.find(": must ");
  if (colon != std::string::npos && message.rfind("--", 0) == 0) message.erase(colon, 1);
  return message;
}

}  // namespace

std::string cli_error_line(std::string message) {
  // Library messages that already start with the program's name ("precis-train --device cuda: ...")
  // would otherwise name it twice.
  for (const char* prefix : {"precis-train: ", "precis-train "})
    if (message.rfind(prefix, 0) == 0) message.erase(0, std::char_traits<char>::length(prefix));
  return "precis-train: error: " + message;
}

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
      ->check(one_of({"resnet20", "resnet32", "resnet56", "resnet18_cifar", "resnet18-cifar", "resnet18", "resnet34",
                      "resnet50"}))
      ->capture_default_str();
  resnet->add_option("--width", resnet_o.width, "first-stage channels (default: the model's)")
      ->check(integer<int64_t>(0));
  resnet->add_flag("!--no-augment", resnet_o.augment, "no random crop / flip");
  resnet->add_flag("--winograd", resnet_o.winograd,
                   "with --precision f32 on the CPU: 3x3 stride-1 convolutions as Winograd (oneDNN, AVX-512), about "
                   "1.7x faster steps for ~5x direct convolution's rounding error (docs/mixed-precision.md)");
  add_common(*resnet, resnet_o, resnet_c,
             {.data = "a folder of MNIST-format IDX files or of CIFAR-10 binaries (data_batch_*.bin)",
              .data_default = data::kFashionMnistDir,
              .normalisation = "BatchNorm"});

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
      ->check(integer(16, uint64_t{1} << 20))
      ->capture_default_str();
  bert->add_option("--max-tokens", bert_o.max_tokens,
                   "dynamic batching: batches of similar-length sequences holding up to N padded tokens")
      ->check(integer<int64_t>(0));
  bert->add_option("--max-len", bert_o.max_len, "truncate sequences to N tokens")
      ->check(integer(3, 512))
      ->capture_default_str();
  bert->add_option("--hidden", bert_o.hidden, "hidden size")->check(integer<int64_t>(1))->capture_default_str();
  bert->add_option("--layers", bert_o.layers, "encoder layers")->check(integer<int64_t>(1))->capture_default_str();
  bert->add_option("--heads", bert_o.heads, "attention heads")->check(integer<int64_t>(1))->capture_default_str();
  bert->add_option("--intermediate", bert_o.intermediate, "feed-forward size")
      ->check(integer<int64_t>(1))
      ->capture_default_str();
  add_common(*bert, bert_o, bert_c,
             {.data = "WordNet's folder (its glosses), or any text file or folder of text files (one sequence per "
                      "line; every 20th line is held out for testing)",
              .data_default = data::kWordNetDir,
              .normalisation = "LayerNorm"});

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    *exit_code = app.exit(e, out, err);
    return std::nullopt;
  } catch (const CLI::CallForAllHelp& e) {
    *exit_code = app.exit(e, out, err);
    return std::nullopt;
  } catch (const CLI::ParseError& e) {
    // One line, the program named once; CLI11 has an exit code per kind of error, precis-train's
    // contract is 2 for any usage error.
    const CLI::App* sub = resnet->parsed() ? resnet : bert->parsed() ? bert : nullptr;
    const std::string help = sub != nullptr ? "precis-train " + sub->get_name() + " --help" : "precis-train --help";
    std::string message;
    if (dynamic_cast<const CLI::ExtrasError*>(&e) != nullptr) {
      message = explain_extras(app, sub, app.remaining(true)) + "; " + help + " lists the options";
    } else if (sub == nullptr && dynamic_cast<const CLI::RequiredError*>(&e) != nullptr) {
      const std::string given = argc > 1 ? argv[1] : "";
      message = given.empty() || given[0] == '-'
                    ? "a subcommand is required: resnet or bert-mini (precis-train --help)"
                    : "unknown subcommand '" + given + "'" +
                          (edit_distance(given, "resnet") <= 2      ? " (did you mean resnet?)"
                           : edit_distance(given, "bert-mini") <= 3 ? " (did you mean bert-mini?)"
                                                                    : "") +
                          "; the subcommands are resnet and bert-mini";
    } else {
      message = join_option_and_check(e.what());
      if (dynamic_cast<const CLI::ValidationError*>(&e) == nullptr) message += "; " + help + " lists the options";
    }
    err << cli_error_line(message) << "\n";
    *exit_code = 2;
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
  const PrecisionChoice precision = choose_precision(c.precision, o.device);
  o.precision = precision.dtype;
  o.precision_choice = precision.how;
  o.fp8 = precision.fp8;
  o.fp8_options.amax_compute = c.fp8_amax == "max" ? amp::AmaxCompute::max : amp::AmaxCompute::most_recent;
  o.eval_precision = resolve_precision(c.eval_precision, o.device);
  o.optimizer = kOptimizers.at(c.optimizer);
  o.schedule = kSchedules.at(c.schedule);
  o.checkpoint_activations = autograd::parse_checkpoint_mode(c.checkpoint_activations);
  o.lr = c.lr.value_or(o.optimizer == OptimizerKind::sgd ? 0.1 : 1e-3);
  o.weight_decay = c.weight_decay.value_or(o.optimizer == OptimizerKind::sgd     ? 5e-4
                                           : o.optimizer == OptimizerKind::adamw ? 0.01
                                                                                 : 0.0);
  *exit_code = 0;
  return o;
}

}  // namespace precis::train
