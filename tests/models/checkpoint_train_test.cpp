// precis-train --checkpoint-activations: a run with full or selective activation checkpointing
// writes the checkpoint of the run without, bit for bit (model, optimizer, scaler, counters), for
// the tiny BERT (dropout, AdamW, clipping) and ResNet (batch norm) of the training tests.
#include <catch2/catch.hpp>

#include <sstream>

#include "tests/models/train_support.h"

using namespace precis;
using namespace precis::train_testing;
using autograd::CheckpointMode;

namespace {

void require_same_training(train::TrainOptions o, const TempDir& dir) {
  std::ostringstream log;
  o.checkpoint_dir = dir / "none";
  const train::TrainSummary plain = train::train(o, log);
  for (CheckpointMode mode : {CheckpointMode::full, CheckpointMode::selective}) {
    INFO(autograd::checkpoint_mode_name(mode));
    o.checkpoint_activations = mode;
    o.checkpoint_dir = dir / autograd::checkpoint_mode_name(mode);
    const train::TrainSummary ck = train::train(o, log);
    REQUIRE(ck.steps == plain.steps);
    REQUIRE(ck.test_accuracy == plain.test_accuracy);
    require_same_state(plain.last_checkpoint, ck.last_checkpoint);
  }
}

}  // namespace

TEST_CASE("precis-train: checkpointed BERT layers train the plain run's bits", "[train][checkpoint]") {
  TempDir dir("ckpt-bert");
  for (DType precision : {DType::f32, DType::bf16}) {
    INFO(train::precision_name(precision));
    train::TrainOptions o = tiny_bert(text_data(dir), "", dir / "vocab.txt");
    o.precision = precision;
    o.accum = 2;
    require_same_training(o, dir);
  }
}

TEST_CASE("precis-train: checkpointed ResNet stages train the plain run's bits", "[train][checkpoint]") {
  TempDir dir("ckpt-resnet");
  train::TrainOptions o = tiny_resnet(image_data(dir), "");
  o.precision = DType::bf16;
  require_same_training(o, dir);
}

#ifdef PRECIS_HAS_TRAIN_EXE
TEST_CASE("precis-train --checkpoint-activations takes none, full or selective", "[train][checkpoint]") {
  TempDir dir("ckpt-cli");
  const Run bad = run_cli("resnet --checkpoint-activations partial");
  REQUIRE(bad.code == 2);
  REQUIRE_THAT(bad.output,
               Catch::Matchers::Contains("--checkpoint-activations") && Catch::Matchers::Contains("partial"));
  const Run ok = run_cli("resnet --data " + image_data(dir) + " --width 4 --epochs 1 --batch 32 --threads 1 --quiet "
                         "--checkpoint-activations selective");
  INFO(ok.output);
  REQUIRE(ok.code == 0);
}
#endif
