// Resume swept over every step: a run resumed from its checkpoint after step k = 1..50 ends bit
// for bit where the uninterrupted run ends, for a small BERT trained in f16 with the loss scaler
// (overflows injected at the gradient-ready point), gradient accumulation with a shorter last
// window per epoch, dropout, clipping and a warmup-linear schedule; plus a few points of ResNet-20
// and BERT-mini. The checkpoint of a run actually stopped at k is byte-identical to the
// uninterrupted run's checkpoint of step k (so resuming from either is the same). Prints the
// figures (resume points, mismatches).
#include <catch2/catch.hpp>

#include <iostream>
#include <sstream>

#include "models/nn/module.h"
#include "tests/models/train_support.h"

using namespace precis;
using namespace precis::train_testing;

namespace {

// Injected overflows: an infinite gradient element at every 9th step from step 4.
train::TrainHooks overflow_hooks() {
  train::TrainHooks h;
  h.gradients_ready = [](const train::GradientsReady& r) {
    if (r.step % 9 == 4) r.model.parameters().front().grad().view({-1}).narrow(0, 0, 1).fill_(INFINITY);
  };
  return h;
}

struct Sweep {
  int points = 0;
  int mismatches = 0;
};

// Trains `o` uninterrupted with a checkpoint after every step, then resumes from each listed
// step's checkpoint into a fresh folder and compares the final state, summary and accuracy.
// At the `stops` (steps inside an epoch), a run really stopped there must have written the same
// bytes as the uninterrupted run. (At an epoch's last step the uninterrupted run's file is the
// epoch-end checkpoint, written after the epoch's evaluation with the loader at the next epoch;
// a run stopped there saved the state before the evaluation. Both resume to the same end:
// tests/models/train_test.cpp.)
Sweep sweep(train::TrainOptions o, const TempDir& dir, const std::string& tag, const std::vector<int64_t>& points,
            const std::vector<int64_t>& stops, const train::TrainHooks& hooks = {}) {
  std::ostringstream log;
  o.checkpoint_dir = dir / (tag + "-full");
  o.checkpoint_every = 1;
  o.keep = 1000;
  const train::TrainSummary full = train::train(o, log, hooks);
  REQUIRE(full.steps > points.back());
  Sweep s;
  for (int64_t k : points) {
    INFO(tag << ": resumed after step " << k);
    train::TrainOptions r = o;
    r.resume = true;
    r.resume_from = train::checkpoint_path(o.checkpoint_dir, k);
    r.checkpoint_dir = dir / (tag + "-from-" + std::to_string(k));
    r.keep = 1;
    const train::TrainSummary resumed = train::train(r, log, hooks);
    std::string diff = state_difference(full.last_checkpoint, resumed.last_checkpoint);
    if (diff.empty() && resumed.steps != full.steps) diff = "steps differ";
    if (diff.empty() && resumed.skipped_steps != full.skipped_steps) diff = "skipped steps differ";
    if (diff.empty() && resumed.test_accuracy != full.test_accuracy) diff = "test accuracy differs";
    CHECK(diff == "");
    ++s.points;
    s.mismatches += !diff.empty();
    std::error_code ec;
    fs::remove_all(r.checkpoint_dir, ec);
  }
  for (int64_t k : stops) {
    INFO(tag << ": stopped after step " << k);
    train::TrainOptions stopped = o;
    stopped.checkpoint_dir = dir / (tag + "-stop-" + std::to_string(k));
    stopped.checkpoint_every = 0;
    stopped.stop_after_steps = k;
    const train::TrainSummary st = train::train(stopped, log, hooks);
    REQUIRE(st.last_checkpoint == train::checkpoint_path(stopped.checkpoint_dir, k));
    INFO(state_difference(st.last_checkpoint, train::checkpoint_path(o.checkpoint_dir, k)));
    REQUIRE(sha256_hex(read_file(st.last_checkpoint)) ==
            sha256_hex(read_file(train::checkpoint_path(o.checkpoint_dir, k))));
  }
  REQUIRE(every_weight_changed(train::checkpoint_path(o.checkpoint_dir, points.front()), full.last_checkpoint));
  std::cout << "resume sweep " << tag << ": " << s.points << " resume points of " << full.steps << " steps ("
            << full.skipped_steps << " skipped), " << s.mismatches << " mismatches" << std::endl;
  return s;
}

std::vector<int64_t> range(int64_t first, int64_t last) {
  std::vector<int64_t> v;
  for (int64_t k = first; k <= last; ++k) v.push_back(k);
  return v;
}

}  // namespace

TEST_CASE("resume after every step 1..50: f16, injected overflows, accumulation, dropout, schedule",
          "[train][sweep]") {
  TempDir dir("sweep");
  train::TrainOptions o = tiny_bert(text_data(dir), "", dir / "vocab.txt");
  o.precision = DType::f16;
  o.batch = 8;   // 29 micro-batches per epoch: 14 windows of 2 and a last one of 1
  o.accum = 2;
  o.epochs = 4;  // 60 steps
  o.workers = 1;
  // 15 steps per epoch; overflows at steps 4, 13, 22, 31, 40, 49. Under ASan (kSanitizedBuild) the
  // sweep keeps the points next to those boundaries; the ordinary build resumes after every step.
  const std::vector<int64_t> points =
      kSanitizedBuild ? std::vector<int64_t>{1, 2, 4, 5, 13, 14, 15, 16, 22, 29, 30, 31, 44, 45, 46, 49, 50}
                      : range(1, 50);
  if (kSanitizedBuild)
    std::cout << "resume sweep: sanitized build, " << points.size()
              << " of the 50 resume points (the ordinary build runs all 50)" << std::endl;
  const Sweep s = sweep(o, dir, "bert-tiny-f16", points, {1, 26, 50}, overflow_hooks());
  REQUIRE(s.points == static_cast<int>(points.size()));
  REQUIRE(s.mismatches == 0);
}

TEST_CASE("resume at a few steps of ResNet-20 and BERT-mini", "[train][sweep]") {
  TempDir dir("sweep-models");
  SECTION("ResNet-20 (16/32/64 channels), f16 with the loss scaler, accumulation, clipping") {
    train::TrainOptions o = tiny_resnet(image_data(dir), "");
    o.width = 0;  // the model's standard width
    o.precision = DType::f16;
    o.accum = 2;
    o.batch = 8;  // 12 micro-batches, 6 steps per epoch
    o.clip = 1.0;
    const Sweep s = sweep(o, dir, "resnet20-f16", {1, 5, 6, 7, 11}, {1, 5, 11}, overflow_hooks());
    REQUIRE(s.mismatches == 0);
  }
  SECTION("BERT-mini (L4 H256 A4 I1024), bf16, dynamic batches, dropout") {
    train::TrainOptions o = tiny_bert(text_data(dir), "", dir / "vocab.txt");
    o.hidden = 256, o.layers = 4, o.heads = 4, o.intermediate = 1024;
    o.precision = DType::bf16;
    o.max_tokens = 256;
    o.limit_train = 96;  // the model at full size, the data cut to a few steps per epoch
    const Sweep s = sweep(o, dir, "bert-mini-bf16", {1, 3, 5, 8}, {1, 5});
    REQUIRE(s.mismatches == 0);
  }
}
