// precis-train: kill-and-resume is bit-exact (bf16, f16 + loss scaler, master weights, BERT with
// dropout), damaged checkpoints are refused while the previous one stays usable, the command
// prints its JSON line and explains usage errors. Data is synthetic and tiny (8×8 IDX images, a
// few hundred lines of text) so the suite needs no dataset package and runs in seconds.
#include <catch2/catch.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "amp/grad_scaler.h"
#include "core/device.h"
#include "core/error.h"
#include "models/nn/module.h"
#include "models/train/checkpoint.h"
#include "models/train/trainer.h"
#include "tensor/safetensors.h"
#include "tests/models/train_support.h"
#include "tests/support/tensor_testing.h"

using namespace precis;
using namespace precis::train_testing;

namespace {

// Trains `o` uninterrupted, and again stopped after step k then resumed; the final checkpoints
// (and test accuracies) must agree bit for bit.
// expected_epochs (when >= 0): the summary's "epochs" after the stop, whole epochs plus the part.
void check_resume_bit_exact(train::TrainOptions o, const TempDir& dir, int64_t k, double expected_epochs = -1) {
  std::ostringstream log;
  o.checkpoint_dir = dir / "full";
  const train::TrainSummary full = train::train(o, log);
  REQUIRE_FALSE(full.stopped_early);

  o.checkpoint_dir = dir / "resumed";
  o.stop_after_steps = k;
  const train::TrainSummary first = train::train(o, log);
  REQUIRE(first.stopped_early);
  REQUIRE(first.steps == k);
  REQUIRE(first.epochs > 0);  // a cut run reports the part of an epoch it trained, not 0
  if (expected_epochs >= 0) REQUIRE(first.epochs == Approx(expected_epochs));
  if (first.epochs < 1) REQUIRE(std::isnan(first.test_accuracy));
  o.stop_after_steps = 0;
  o.resume = true;
  const train::TrainSummary second = train::train(o, log);
  REQUIRE_FALSE(second.stopped_early);
  REQUIRE(second.steps == full.steps);
  REQUIRE(second.skipped_steps == full.skipped_steps);
  REQUIRE(second.test_accuracy == full.test_accuracy);
  require_same_state(full.last_checkpoint, second.last_checkpoint);
  // The steps after k really changed the model (equal bits of a model that stopped training
  // would prove little).
  REQUIRE(every_weight_changed(first.last_checkpoint, second.last_checkpoint));
}

}  // namespace

TEST_CASE("precis-train: a run stopped and resumed equals the uninterrupted run bit for bit", "[train]") {
  TempDir dir("resume");
  const std::string data = image_data(dir);
  train::TrainOptions o = tiny_resnet(data, "");
  SECTION("bf16 autocast, stopped mid-epoch") {
    o.precision = DType::bf16;
    check_resume_bit_exact(o, dir, 4, 4.0 / 6.0);
  }
  SECTION("f16 autocast with the loss scaler, stopped at an epoch end, gradient accumulation and clipping") {
    o.precision = DType::f16;
    o.accum = 2;
    o.clip = 1.0;
    o.batch = 8;  // 12 micro-batches, 6 steps per epoch
    check_resume_bit_exact(o, dir, 6, 1.0);
  }
  SECTION("bf16 model with fp32 master weights, Adam, checkpoints every 2 steps") {
    o.precision = DType::bf16;
    o.master_weights = true;
    o.optimizer = train::OptimizerKind::adam;
    o.lr = 1e-3;
    o.checkpoint_every = 2;
    check_resume_bit_exact(o, dir, 7, 1.0 + 1.0 / 6.0);
  }
}

TEST_CASE("precis-train: BERT masked-LM resumes bit for bit (dropout stream, dynamic batches)", "[train]") {
  TempDir dir("bert");
  train::TrainOptions o = tiny_bert(text_data(dir), "", dir / "vocab.txt");
  o.precision = DType::bf16;
  o.max_tokens = 256;
  check_resume_bit_exact(o, dir, 5);
  REQUIRE(fs::exists(dir / "vocab.txt"));  // trained once, then reused
}

TEST_CASE("precis-train: a damaged checkpoint is refused and the previous one stays usable", "[train]") {
  TempDir dir("damaged");
  train::TrainOptions o = tiny_resnet(image_data(dir), dir / "ckpt");
  o.precision = DType::bf16;
  o.checkpoint_every = 2;
  o.keep = 2;
  o.stop_after_steps = 6;
  std::ostringstream log;
  train::train(o, log);
  const std::vector<std::string> files = train::list_checkpoints(o.checkpoint_dir);
  REQUIRE(files.size() == 2);  // steps 4 and 6: step 2's went once step 6's was complete (--keep 2)
  const std::string previous = files[0], latest = files[1];
  REQUIRE(previous == train::checkpoint_path(o.checkpoint_dir, 4));
  REQUIRE(latest == train::checkpoint_path(o.checkpoint_dir, 6));
  const auto read_all = read_file;
  const std::string previous_bytes = read_all(previous);
  std::string bytes = read_all(latest);

  o.stop_after_steps = 0;
  o.resume = true;
  SECTION("a flipped byte in the data fails the checksum") {
    bytes[bytes.size() - 3] ^= 0x40;
    std::ofstream(latest, std::ios::binary | std::ios::trunc) << bytes;
    REQUIRE_THAT(error_of<IOError>([&] { train::train(o, log); }),
                 Catch::Matchers::Contains("CRC-32") && Catch::Matchers::Contains(latest) &&
                               Catch::Matchers::Contains(previous) &&
                               Catch::Matchers::Contains("resume from one with --resume-from FILE"));
  }
  SECTION("a truncated file is refused") {
    std::ofstream(latest, std::ios::binary | std::ios::trunc) << bytes.substr(0, bytes.size() / 2);
    REQUIRE_THAT(error_of<IOError>([&] { train::train(o, log); }),
                 Catch::Matchers::Contains("damaged") && Catch::Matchers::Contains(latest) &&
                               Catch::Matchers::Contains(previous));
  }
  REQUIRE(read_all(previous) == previous_bytes);
  o.resume_from = previous;
  const train::TrainSummary s = train::train(o, log);
  REQUIRE(s.steps == 12);
  REQUIRE(std::isfinite(s.test_accuracy));
}

TEST_CASE("precis-train: resuming with different options is refused, naming the option", "[train]") {
  TempDir dir("mismatch");
  train::TrainOptions o = tiny_resnet(image_data(dir), dir / "ckpt");
  o.stop_after_steps = 2;
  std::ostringstream log;
  train::train(o, log);
  o.stop_after_steps = 0;
  o.resume = true;
  o.precision = DType::f16;
  REQUIRE_THAT(error_of<ValueError>([&] { train::train(o, log); }),
               Catch::Matchers::Contains("precision = f32") && Catch::Matchers::Contains("f16"));
}

TEST_CASE("precis-train: the gradient-ready hook runs once per step, after backward, before the update", "[train]") {
  TempDir dir("hook");
  train::TrainOptions o = tiny_resnet(image_data(dir), dir / "ckpt");
  o.precision = DType::f16;
  // At the default 2^16 this width-4 network's first-conv weight gradient comes out of its f16
  // convolution at 47-53k of f16's 65504, so whether a step overflows turns on last-bit roundings
  // elsewhere; 2^10 leaves no natural overflow, only the injected ones below.
  o.scaler.init_scale = 1024.0;
  o.accum = 2;
  o.batch = 11;  // 9 micro-batches per epoch (8 full + 8 examples): 5 steps, the last one of 1 micro-batch
  o.epochs = 1;
  std::vector<int64_t> steps, micro;
  int64_t grads_missing = 0;
  train::TrainHooks hooks;
  hooks.gradients_ready = [&](const train::GradientsReady& r) {
    steps.push_back(r.step);
    micro.push_back(r.micro_batches);
    for (const Tensor& p : r.model.parameters()) grads_missing += !p.grad().defined();
  };
  std::ostringstream log;
  train::TrainSummary s = train::train(o, log, hooks);
  REQUIRE(steps == std::vector<int64_t>{1, 2, 3, 4, 5});
  REQUIRE(micro == std::vector<int64_t>{2, 2, 2, 2, 1});
  REQUIRE(grads_missing == 0);
  REQUIRE(s.skipped_steps == 0);

  SECTION("gradients changed in place there are what the scaler and optimizer see") {
    // Injected overflows: the scaler must skip exactly those steps (and back off).
    hooks.gradients_ready = [&](const train::GradientsReady& r) {
      if (r.step == 2 || r.step == 4) r.model.parameters().front().grad().view({-1}).narrow(0, 0, 1).fill_(INFINITY);
      if (r.step == 5) {
        const std::vector<amp::HistoryEntry> h = r.scaler.history();
        REQUIRE(h.size() == 4);
        for (const amp::HistoryEntry& e : h) {
          const int64_t step = e.step + 1;  // the scaler counts from 0
          INFO("step " << step);
          CHECK(e.applied == (step != 2 && step != 4));
          CHECK((e.reason == amp::SkipReason::overflow) == !e.applied);
        }
      }
    };
    o.checkpoint_dir = dir / "overflow";
    s = train::train(o, log, hooks);
    REQUIRE(s.skipped_steps == 2);
  }
  SECTION("an exception from the hook ends train()") {
    hooks.gradients_ready = [](const train::GradientsReady& r) {
      if (r.step == 3) throw StateError("all-reduce failed");
    };
    o.checkpoint_dir = dir / "throws";
    REQUIRE_THAT(error_of<StateError>([&] { train::train(o, log, hooks); }),
                 Catch::Matchers::Contains("all-reduce failed"));
  }
}

#ifdef PRECIS_HAS_TRAIN_EXE
TEST_CASE("precis-train: the command prints progress, an epoch summary and the JSON line", "[train]") {
  TempDir dir("cli");
  const std::string data = image_data(dir);
  const Run r = run_cli("resnet --data " + data + " --width 4 --epochs 1 --batch 16 --threads 1 --log-every 3 "
                        "--precision bf16 --metrics " + (dir / "m.csv"));
  INFO(r.output);
  REQUIRE(r.code == 0);
  REQUIRE_THAT(r.output, Catch::Matchers::Contains("epoch 1/1 [") && Catch::Matchers::Contains("samples/s") &&
                             Catch::Matchers::Contains("epoch 1/1: train loss"));
  const std::string last = r.output.substr(r.output.rfind('{'));
  for (const char* key : {"\"model\": \"resnet20\"", "\"precision\": \"bf16\"", "\"epochs\": 1", "\"test_accuracy\": 0.",
                          "\"samples_per_s\": ", "\"wall_s\": "})
    REQUIRE_THAT(last, Catch::Matchers::Contains(key));
  std::ifstream csv(dir / "m.csv");
  std::string header, line;
  std::getline(csv, header);
  REQUIRE(header.rfind("epoch,step,epoch_step,lr,loss,accuracy,loss_scale,applied", 0) == 0);
  int rows = 0;
  while (std::getline(csv, line)) ++rows;
  REQUIRE(rows == 6);

  // A later option overrides an earlier one, as `make train TRAIN_ARGS="--epochs 1"` needs.
  const Run q = run_cli("resnet --data " + data + " --width 4 --epochs 3 --batch 16 --threads 2 --quiet --epochs 1 "
                        "--threads 1");
  INFO(q.output);
  REQUIRE(q.code == 0);
  REQUIRE(q.output.find('{') == 0);  // nothing but the JSON line
  REQUIRE_THAT(q.output, Catch::Matchers::Contains("\"epochs\": 1,"));
}

TEST_CASE("precis-train: usage errors are explained and exit with 2", "[train]") {
  struct Case {
    const char* args;
    std::vector<const char*> says;
  };
  const Case cases[] = {
      {"", {"subcommand"}},
      {"resnet --precision f8", {"--precision", "f8"}},
      {"resnet --epochs 0", {"--epochs"}},
      {"resnet --optimizer lamb", {"--optimizer", "lamb"}},
      {"resnet --bogus", {"--bogus"}},
      {"resnet --master-weights --precision f32", {"--master-weights", "bf16 or f16"}},
      {"resnet --resume", {"--resume", "--checkpoint"}},
      {"bert-mini --max-len 64 --max-tokens 32", {"--max-tokens", "--max-len"}},
      {"resnet --device gpu", {"--device", "gpu", "cuda:N"}},
      {"resnet --precision fp4", {"--precision", "fp4"}},
      {"resnet --precision fp8 --fp8-amax avg", {"--fp8-amax", "avg", "most_recent"}},
  };
  for (const Case& c : cases) {
    const Run r = run_cli(c.args);
    INFO(c.args << "\n" << r.output);
    REQUIRE(r.code == 2);
    for (const char* s : c.says) REQUIRE_THAT(r.output, Catch::Matchers::Contains(s));
  }
  const Run missing = run_cli("resnet --data /nonexistent/precis --threads 1");
  INFO(missing.output);
  REQUIRE(missing.code == 1);
  REQUIRE_THAT(missing.output, Catch::Matchers::Contains("/nonexistent/precis") &&
                                   Catch::Matchers::Contains("dataset-fashion-mnist"));
}

// [cuda]: with a GPU present the unusable device is the one past it, and precis-train asks the
// driver for it.
TEST_CASE("precis-train --device: an unusable GPU exits with 1 naming it, --precision amp is bf16 on the CPU",
          "[train][cuda]") {
  (void)PRECIS_CUDA_PART("the device past a present GPU");
  // One past the last visible device: unusable on any machine. The data path does not exist, so
  // an error about it would show the run started before checking the device.
  const std::string dev = "cuda:" + std::to_string(cuda_device_count());
  const Run r = run_cli("resnet --device " + dev + " --data /nonexistent/precis --threads 1");
  INFO(r.output);
  REQUIRE(r.code == 1);
  REQUIRE_THAT(r.output, Catch::Matchers::Contains("--device " + dev) && Catch::Matchers::Contains("--device cpu"));
  REQUIRE_THAT(r.output, !Catch::Matchers::Contains("/nonexistent/precis"));

  TempDir dir("cli-device");
  const Run amp = run_cli("resnet --device cpu --precision amp --data " + image_data(dir) +
                          " --width 4 --epochs 1 --batch 48 --threads 1 --quiet --limit-test 20");
  INFO(amp.output);
  REQUIRE(amp.code == 0);
  REQUIRE_THAT(amp.output, Catch::Matchers::Contains("\"precision\": \"bf16\""));
}
#endif
