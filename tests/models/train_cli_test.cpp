// The precis-train command as a user meets it (issue 27): resuming from a named file, output
// folders checked before any work, range and type errors that say what is allowed, the thread
// count on resume, one-line messages naming the program once, suggestions for misspelled options,
// the progress line, and --precision auto. Every case runs the real binary on the tiny synthetic
// data of train_support.h.
#include <catch2/catch.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "core/cpu_features.h"
#include "models/train/checkpoint.h"
#include "tests/models/train_support.h"

#ifdef PRECIS_HAS_TRAIN_EXE

using namespace precis;
using namespace precis::train_testing;
using Catch::Matchers::Contains;
using Catch::Matchers::StartsWith;

namespace {

// The tiny ResNet (6 steps per epoch at batch 16) on `data`, one thread, f32 unless told otherwise.
std::string tiny(const std::string& data, int epochs = 2) {
  return "resnet --data " + data + " --width 4 --epochs " + std::to_string(epochs) +
         " --batch 16 --threads 1 --limit-test 20 ";
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

// No message may show a library function's name or the program's name twice.
void require_user_words(const std::string& output) {
  for (const char* internal : {"save_checkpoint", "list_checkpoints", "write_vocab", "SummaryWriter",
                               "error: precis-train", "Run with --help"})
    REQUIRE_THAT(output, !Contains(internal));
}

}  // namespace

TEST_CASE("precis-train --resume-from FILE alone resumes, with the checks of --resume", "[train]") {
  TempDir dir("cli-resume-from");
  const std::string base = tiny(image_data(dir)) + "--precision f32 ";
  const Run first = run_cli(base + "--checkpoint " + (dir / "ck") + " --stop-after-steps 3 --quiet");
  INFO(first.output);
  REQUIRE(first.code == 0);
  const std::string file = train::checkpoint_path(dir / "ck", 3);

  // No --resume, no --checkpoint: the file alone continues the run from step 3 to its end.
  const Run resumed = run_cli(base + "--resume-from " + file);
  INFO(resumed.output);
  REQUIRE(resumed.code == 0);
  REQUIRE_THAT(resumed.output, Contains("resumed from " + file + " (step 3,"));
  REQUIRE_THAT(resumed.output, Contains("\"steps\": 12,"));

  // The checks run whichever way the checkpoint is named: another --batch is refused.
  for (const std::string& how : {"--resume-from " + file, "--resume --checkpoint " + (dir / "ck")}) {
    const Run other = run_cli(base + "--batch 8 " + how);
    INFO(how << "\n" << other.output);
    REQUIRE(other.code == 1);
    REQUIRE_THAT(other.output, Contains("batch = 16 but this run has batch = 8") && Contains("(--batch 16)"));
    require_user_words(other.output);
  }
}

TEST_CASE("precis-train proves every output location writable before it reads the data", "[train]") {
  TempDir dir("cli-outputs");
  const std::string data = image_data(dir);
  const std::string file = dir / "a-file";  // a regular file: nothing can be created below it, even by root
  std::ofstream(file) << "x";
  struct Case {
    std::string args, option, reason;
  };
  const std::vector<Case> cases{
      {"--checkpoint " + file + "/ck", "--checkpoint", "Not a directory"},
      {"--tensorboard " + file + "/tb", "--tensorboard", "Not a directory"},
      {"--metrics " + file + "/m.csv", "--metrics", "Not a directory"},
      {"--metrics " + dir.path.string(), "--metrics", "Is a directory"},
  };
  for (const Case& c : cases) {
    const Run r = run_cli(tiny(data, 1) + c.args);
    INFO(c.args << "\n" << r.output);
    REQUIRE(r.code == 1);
    REQUIRE_THAT(r.output, StartsWith("precis-train: error: " + c.option + " ") && Contains(c.reason) &&
                               Contains("point " + c.option + " at a"));
    REQUIRE(lines_of(r.output).size() == 1);  // nothing read, nothing trained
    require_user_words(r.output);
  }

  // bert-mini writes the vocabulary it trains to --vocab FILE: checked before the corpus is read.
  const Run vocab = run_cli("bert-mini --data " + text_data(dir) + " --vocab " + file + "/vocab.txt --threads 1");
  INFO(vocab.output);
  REQUIRE(vocab.code == 1);
  REQUIRE_THAT(vocab.output, StartsWith("precis-train: error: --vocab ") && Contains("Not a directory"));
  REQUIRE(lines_of(vocab.output).size() == 1);

  // A read-only folder. Permissions do not bind root, so only another user sees this refusal.
  if (::geteuid() != 0) {
    const std::string ro = dir / "read-only";
    fs::create_directories(ro);
    ::chmod(ro.c_str(), 0500);
    const Run r = run_cli(tiny(data, 1) + "--checkpoint " + ro);
    ::chmod(ro.c_str(), 0700);
    INFO(r.output);
    REQUIRE(r.code == 1);
    REQUIRE_THAT(r.output, StartsWith("precis-train: error: --checkpoint " + ro + ": cannot create files in the "
                                      "folder: Permission denied"));
  }
}

TEST_CASE("precis-train range and type errors say what is allowed, on one line", "[train]") {
  struct Case {
    const char* args;
    const char* says;
  };
  const Case cases[] = {
      {"resnet --batch 0", "--batch must be an integer ≥ 1, got 0"},
      {"resnet --epochs -2", "--epochs must be an integer ≥ 1, got -2"},
      {"resnet --epochs 1.5", "--epochs must be an integer ≥ 1, got '1.5'"},
      {"resnet --lr abc", "--lr must be a number > 0, got 'abc', which is not a number"},
      {"resnet --lr 0", "--lr must be a number > 0, got 0"},
      {"resnet --lr inf", "--lr must be a number > 0, got inf"},
      {"resnet --momentum 2", "--momentum must be a number from 0 to 1, got 2"},
      {"resnet --clip -1", "--clip must be a number ≥ 0, got -1"},
      {"resnet --threads 99999999999", "--threads must be an integer from 1 to 2147483647, got 99999999999"},
      {"resnet --seed -1", "--seed must be an integer ≥ 0, got -1"},
      {"bert-mini --max-len 2", "--max-len must be an integer from 3 to 512, got 2"},
      {"resnet --precision fp4", "--precision must be one of auto, f32, bf16, f16, fp8, amp, got 'fp4' (did you mean fp8?)"},
      {"resnet --fp8-history 0", "--fp8-history must be an integer ≥ 1, got 0"},
      {"resnet --optimizer adamm", "--optimizer must be one of sgd, adam, adamw, got 'adamm' (did you mean adam?)"},
      {"resnet --device gpu", "--device must be cpu, cuda or cuda:N, got 'gpu'"},
      {"resnet --zero", "--zero shards the optimizer state over the ranks of an mpirun job; it needs --distributed "
                        "(mpirun -np N precis-train ... --distributed --zero)"},
  };
  for (const Case& c : cases) {
    const Run r = run_cli(c.args);
    INFO(c.args << "\n" << r.output);
    REQUIRE(r.code == 2);
    REQUIRE(r.output == std::string("precis-train: error: ") + c.says + "\n");
  }
}

TEST_CASE("precis-train resumed with another --threads is refused unless --allow-thread-change", "[train]") {
  TempDir dir("cli-threads");
  const std::string data = image_data(dir);
  const std::string base = "resnet --data " + data + " --width 4 --epochs 2 --batch 16 --limit-test 20 "
                           "--precision f32 --checkpoint " + (dir / "ck") + " ";
  const Run first = run_cli(base + "--threads 1 --stop-after-steps 3 --quiet");
  INFO(first.output);
  REQUIRE(first.code == 0);
  const std::string file = train::checkpoint_path(dir / "ck", 3);

  const Run other = run_cli(base + "--threads 2 --resume");
  INFO(other.output);
  REQUIRE(other.code == 1);
  REQUIRE_THAT(other.output, Contains("\nprecis-train: error: cannot resume from '" + file +
                              "': it was written by a run with 1 intra-op thread and this run has 2; another count "
                              "splits reductions differently, so the continuation would not be bit-exact. Resume "
                              "with --threads 1, or add --allow-thread-change to continue with 2\n"));

  const Run allowed = run_cli(base + "--threads 2 --resume --allow-thread-change");
  INFO(allowed.output);
  REQUIRE(allowed.code == 0);
  REQUIRE_THAT(allowed.output, Contains("warning: resuming with 2 threads where '" + file + "' was written with 1") &&
                                   Contains("\"steps\": 12,"));
}

TEST_CASE("precis-train resnet --winograd trains f32 with Winograd convolutions, and is part of the run's identity",
          "[train]") {
  TempDir dir("cli-winograd");
  const std::string base = tiny(image_data(dir)) + "--precision f32 --checkpoint " + (dir / "ck") + " ";
  const Run first = run_cli(base + "--winograd --stop-after-steps 3");
  INFO(first.output);
  REQUIRE(first.code == 0);
  REQUIRE_THAT(first.output, StartsWith("precision: f32 with Winograd 3x3 convolutions (--precision f32), on cpu\n"));
  const std::string file = train::checkpoint_path(dir / "ck", 3);

  // Its convolutions round differently: a continuation without it would not be the same run.
  const Run without = run_cli(base + "--resume");
  INFO(without.output);
  REQUIRE(without.code == 1);
  REQUIRE_THAT(without.output, Contains("winograd = 1 but this run has winograd = 0; resume with the original "
                                        "--winograd, or start a new run without resuming"));
  require_user_words(without.output);
  const Run with = run_cli(base + "--winograd --resume");
  INFO(with.output);
  REQUIRE(with.code == 0);
  REQUIRE_THAT(with.output, Contains("resumed from " + file) && Contains("\"steps\": 12,"));

  // Only where it changes something: f32 on the CPU.
  const Run bf16 = run_cli(tiny(image_data(dir)) + "--precision bf16 --winograd");
  INFO(bf16.output);
  REQUIRE(bf16.code != 0);
  REQUIRE_THAT(bf16.output, Contains("--winograd changes f32 convolutions only; this run trains in bf16") &&
                                Contains("add --precision f32"));
  require_user_words(bf16.output);
}

TEST_CASE("precis-train errors name the program once, and the stop line says which step was saved", "[train]") {
  for (const char* args : {"resnet --resume", "resnet --checkpoint-every 2", "resnet --data /nonexistent/precis",
                           "resnet --device cuda:15 --data /nonexistent/precis"}) {
    const Run r = run_cli(args);
    INFO(args << "\n" << r.output);
    REQUIRE(r.code != 0);
    REQUIRE_THAT(lines_of(r.output).back(), StartsWith("precis-train: error: "));  // after the precision line, if any
    require_user_words(r.output);
  }
  REQUIRE(run_cli("resnet --resume").output ==
          "precis-train: error: --resume continues from the newest checkpoint in --checkpoint DIR, and none was "
          "given; add --checkpoint DIR, or name the file with --resume-from FILE\n");

  TempDir dir("cli-stop");
  const std::string base = tiny(image_data(dir)) + "--precision f32 --log-every 100 ";
  const std::string step3 = train::checkpoint_path(dir / "ck", 3);
  const Run first = run_cli(base + "--checkpoint " + (dir / "ck") + " --stop-after-steps 3");
  INFO(first.output);
  REQUIRE_THAT(first.output, Contains("stopped after step 3 (--stop-after-steps 3); checkpoint of step 3: " + step3 +
                                      "\n"));
  // Resumed from step 3 without --checkpoint and stopped after step 4: nothing holds step 4.
  const Run second = run_cli(base + "--resume-from " + step3 + " --stop-after-steps 4");
  INFO(second.output);
  REQUIRE_THAT(second.output, Contains("stopped after step 4 (--stop-after-steps 4); no checkpoint of step 4 was "
                                       "written (no --checkpoint DIR); the last one, " + step3 + ", holds step 3\n"));
}

TEST_CASE("precis-train suggests the option a misspelled one is closest to", "[train]") {
  struct Case {
    const char* args;
    const char* says;
  };
  const Case cases[] = {
      {"resnet --batc 64", "unknown option --batc (did you mean --batch?)"},
      {"resnet --epoch 2", "unknown option --epoch (did you mean --epochs?)"},
      {"bert-mini --max-token 512", "unknown option --max-token (did you mean --max-tokens?)"},
      {"resnet --vocab v.txt", "--vocab is an option of bert-mini, not of resnet"},
      {"resnet --learning-rate 0.1", "unknown option --learning-rate; precis-train resnet --help lists the options"},
      {"resnt", "unknown subcommand 'resnt' (did you mean resnet?)"},
  };
  for (const Case& c : cases) {
    const Run r = run_cli(c.args);
    INFO(c.args << "\n" << r.output);
    REQUIRE(r.code == 2);
    REQUIRE_THAT(r.output, StartsWith("precis-train: error: ") && Contains(c.says));
    REQUIRE(lines_of(r.output).size() == 1);
  }
}

TEST_CASE("precis-train progress lines show the step's own lr, once each, and count in words", "[train]") {
  TempDir dir("cli-progress");
  // Not a terminal (a pipe): a plain line per step (--log-every 1). OneCycle changes the lr every step.
  const Run r = run_cli(tiny(image_data(dir), 1) + "--precision f32 --log-every 1 --metrics " + (dir / "m.csv"));
  INFO(r.output);
  REQUIRE(r.code == 0);
  std::map<int, double> progress_lr;  // step → the lr its progress line shows
  int lines = 0;
  for (const std::string& line : lines_of(r.output)) {
    if (line.rfind("epoch 1/1 [", 0) != 0) continue;
    ++lines;
    const int step = std::stoi(line.substr(line.find("] ") + 2));
    REQUIRE(progress_lr.count(step) == 0);  // each step's line once: the epoch's end adds no copy
    progress_lr[step] = std::stod(line.substr(line.find("  lr ") + 5));
  }
  REQUIRE(lines == 6);
  std::ifstream csv(dir / "m.csv");
  std::string row;
  std::getline(csv, row);  // header: epoch,step,epoch_step,lr,...
  int rows = 0;
  while (std::getline(csv, row)) {
    std::vector<std::string> f;
    std::istringstream fields(row);
    for (std::string x; std::getline(fields, x, ',');) f.push_back(x);
    const int step = std::stoi(f[2]);
    INFO(row);
    REQUIRE(progress_lr.count(step) == 1);
    REQUIRE(progress_lr[step] == Approx(std::stod(f[3])).epsilon(0.005));  // the line prints 3 digits
    ++rows;
  }
  REQUIRE(rows == 6);
  REQUIRE_THAT(r.output, Contains("training: 1 epoch of 6 steps, batch 16, f32, sgd lr 0.1, schedule onecycle, on "
                                  "cpu, 1 thread, 1 loader worker\n"));

  // bert-mini's help: its normalisation is LayerNorm, and the default corpus is shown where --data is.
  const Run help = run_cli("bert-mini --help");
  REQUIRE(help.code == 0);
  REQUIRE_THAT(help.output, Contains("LayerNorm fp32") && !Contains("BatchNorm") && !Contains("see above"));
  const std::vector<std::string> help_lines = lines_of(help.output);
  const auto data_line = std::find_if(help_lines.begin(), help_lines.end(),
                                      [](const std::string& l) { return l.find("--data") != std::string::npos; });
  REQUIRE(data_line != help_lines.end());
  REQUIRE_THAT(*data_line, Contains("/usr/share/wordnet"));
  REQUIRE_THAT(run_cli("resnet --help").output, Contains("BatchNorm fp32") && Contains("/usr/share/datasets/fashion-mnist"));
}

TEST_CASE("precis-train --precision auto, the default, trains in bf16 where the CPU computes it natively", "[train]") {
  TempDir dir("cli-auto");
  const std::string data = image_data(dir);
  const bool native = cpu_has_native_bf16();
  const Run r = run_cli(tiny(data, 1));
  INFO(r.output);
  REQUIRE(r.code == 0);
  // The run's first line names the precision and why; the JSON line carries the resolved one.
  REQUIRE_THAT(r.output, StartsWith(native ? "precision: bf16 autocast (--precision auto: this CPU computes bf16 dot "
                                             "products natively), on cpu\n"
                                           : "precision: f32 (--precision auto: this CPU has no native bf16 dot "
                                             "products, so bf16 would save little time), on cpu\n"));
  REQUIRE_THAT(r.output, Contains(native ? "\"precision\": \"bf16\"" : "\"precision\": \"f32\""));

  const Run f32 = run_cli(tiny(data, 1) + "--precision f32");
  INFO(f32.output);
  REQUIRE(f32.code == 0);
  REQUIRE_THAT(f32.output, StartsWith("precision: f32 (--precision f32), on cpu\n") &&
                               Contains("\"precision\": \"f32\""));
  const Run amp = run_cli(tiny(data, 1) + "--precision amp --quiet");
  REQUIRE_THAT(amp.output, Contains("\"precision\": \"bf16\""));  // amp keeps its meaning: bf16 on the CPU
}

#endif  // PRECIS_HAS_TRAIN_EXE
