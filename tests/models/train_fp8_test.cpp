// precis-train --precision fp8 (docs/fp8.md): ResNet's linear head and BERT's linear layers (not
// its vocabulary decoder) run in fp8 inside bf16 autocast; their delayed-scaling state is in the
// checkpoints, a run stopped and resumed ends bit for bit where the uninterrupted run ends, and
// the runs learn.
#include <catch2/catch.hpp>

#include <cmath>
#include <sstream>
#include <string>
#include <vector>

#include "models/train/checkpoint.h"
#include "models/train/trainer.h"
#include "tests/models/train_support.h"

using namespace precis;
using namespace precis::train_testing;

TEST_CASE("precis-train --precision fp8: ResNet's head in fp8, its scales checkpointed, a resume bit-exact",
          "[train][fp8]") {
  TempDir dir("train-fp8-resnet");
  train::TrainOptions o = tiny_resnet(image_data(dir), dir / "full");
  o.precision = DType::bf16;
  o.fp8 = true;
  o.fp8_options.amax_history_len = 8;
  std::ostringstream log;
  const train::TrainSummary full = train::train(o, log);
  CHECK(full.precision == "fp8");
  REQUIRE(std::isfinite(full.test_accuracy));
  const train::Checkpoint ck = train::load_checkpoint(full.last_checkpoint);
  REQUIRE(ck.state.count("model.fc.fp8.weight_scale") == 1);
  CHECK(ck.state.at("model.fc.fp8.weight_scale").item<float>() != 1.0f);  // the scales moved
  CHECK(ck.state.count("model.fc.fp8.grad_output_amax_history") == 1);
  CHECK(ck.metadata.at("precision") == "fp8");

  o.checkpoint_dir = dir / "resumed";
  o.stop_after_steps = 5;
  REQUIRE(train::train(o, log).stopped_early);
  o.stop_after_steps = 0;
  o.resume = true;
  const train::TrainSummary resumed = train::train(o, log);
  require_same_state(full.last_checkpoint, resumed.last_checkpoint);
}

TEST_CASE("precis-train --precision fp8: BERT's linear layers in fp8, the decoder not, and it learns",
          "[train][fp8]") {
  TempDir dir("train-fp8-bert");
  train::TrainOptions o = tiny_bert(text_data(dir), dir / "ck", dir / "vocab.txt");
  o.precision = DType::bf16;
  o.fp8 = true;
  o.fp8_options.amax_history_len = 4;
  o.metrics = dir / "fp8.csv";
  std::ostringstream log;
  const train::TrainSummary s = train::train(o, log);
  const train::Checkpoint ck = train::load_checkpoint(s.last_checkpoint);
  int64_t fp8_layers = 0, decoder = 0;
  for (const auto& [name, t] : ck.state) {
    const std::string suffix = ".fp8.weight_scale";
    if (name.size() > suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0)
      ++fp8_layers;
    if (name.find("decoder.fp8") != std::string::npos) ++decoder;
  }
  CHECK(fp8_layers == 7);  // query, key, value, attention output, intermediate, output, the head's transform
  CHECK(decoder == 0);
  // The loss falls: the first steps' mean above the last steps'.
  const std::string csv = read_file(dir / "fp8.csv");
  std::istringstream in(csv);
  std::string line;
  std::getline(in, line);
  std::vector<double> losses;
  while (std::getline(in, line)) {
    std::istringstream f(line);
    std::string field;
    for (int i = 0; i <= 4; ++i) std::getline(f, field, ',');
    losses.push_back(std::stod(field));
  }
  REQUIRE(losses.size() >= 8);
  CHECK(losses[losses.size() - 1] + losses[losses.size() - 2] < losses[0] + losses[1]);
}
