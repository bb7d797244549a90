// precis-train's --tensorboard output (models/train/tensorboard_log.h), read back with the
// protoc-generated Event classes: every scalar at every step, the skip reason of injected
// overflows, eval per epoch, histograms every N steps, and a resume that replaces the steps an
// interrupted run logged after its checkpoint instead of duplicating them.
#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "models/nn/module.h"
#include "models/train/checkpoint.h"
#include "ops/functional.h"
#include "models/train/trainer.h"
#include "summary/tensorboard.pb.h"
#include "tests/models/train_support.h"

using namespace precis;
using namespace precis::train_testing;
namespace pb = precis::tensorboard;

namespace {

// The events of one file (framing is checked by summary_writer_test; here only the payloads).
std::vector<pb::Event> events_of(const fs::path& file) {
  std::ifstream f(file, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  const std::string b = ss.str();
  std::vector<pb::Event> out;
  for (size_t at = 0; at + 12 <= b.size();) {
    uint64_t len = 0;
    for (int i = 7; i >= 0; --i) len = (len << 8) | static_cast<unsigned char>(b[at + static_cast<size_t>(i)]);
    pb::Event e;
    REQUIRE(e.ParseFromString(b.substr(at + 12, len)));
    out.push_back(e);
    at += 12 + len + 4;
  }
  return out;
}

std::vector<fs::path> event_files(const std::string& dir) {
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(dir))
    if (entry.path().filename().string().find("tfevents") != std::string::npos) files.push_back(entry.path());
  std::sort(files.begin(), files.end());  // TensorBoard's order: by name (time first)
  return files;
}

struct Point {
  int64_t step;
  double value;
};
// The scalars of a folder as TensorBoard merges its files: in file order, a session START at step
// s dropping the points with step >= s read before it.
std::map<std::string, std::vector<Point>> scalars(const std::string& dir, int* starts = nullptr) {
  std::map<std::string, std::vector<Point>> out;
  for (const fs::path& file : event_files(dir)) {
    for (const pb::Event& e : events_of(file)) {
      if (e.has_session_log() && e.session_log().status() == pb::SessionLog::START) {
        if (starts) ++*starts;
        for (auto& [tag, points] : out)
          points.erase(std::remove_if(points.begin(), points.end(), [&](const Point& p) { return p.step >= e.step(); }),
                       points.end());
      }
      for (const pb::Summary::Value& v : e.summary().value())
        if (v.value_case() == pb::Summary::Value::kSimpleValue) out[v.tag()].push_back({e.step(), v.simple_value()});
    }
  }
  return out;
}

std::vector<int64_t> steps_of(const std::vector<Point>& points) {
  std::vector<int64_t> s;
  for (const Point& p : points) s.push_back(p.step);
  return s;
}

const std::vector<std::string> kTrainTags = {"train/loss",          "train/accuracy",   "train/lr",
                                             "train/loss_scale",    "train/skipped_steps", "train/skip_reason",
                                             "train/grad_norm",     "train/samples_per_s", "train/data_wait"};

}  // namespace

TEST_CASE("precis-train --tensorboard: every scalar per step, skips with their reason, eval, histograms",
          "[summary][train]") {
  TempDir dir("tensorboard");
  train::TrainOptions o = tiny_resnet(image_data(dir), "");
  o.precision = DType::f16;
  o.tensorboard = dir / "tb";
  o.tensorboard_histograms = 4;
  o.metrics = dir / "metrics.csv";
  train::TrainHooks hooks;
  hooks.gradients_ready = [](const train::GradientsReady& r) {
    if (r.step == 3) r.model.parameters().front().grad().view({-1}).narrow(0, 0, 1).fill_(INFINITY);
  };
  std::ostringstream log;
  const train::TrainSummary s = train::train(o, log, hooks);
  REQUIRE(s.steps == 12);
  REQUIRE(s.skipped_steps == 1);

  REQUIRE(event_files(o.tensorboard).size() == 1);
  int starts = 0;
  const auto sc = scalars(o.tensorboard, &starts);
  CHECK(starts == 1);  // the run's own, at step 0
  CHECK(events_of(event_files(o.tensorboard)[0])[1].session_log().status() == pb::SessionLog::START);
  CHECK(events_of(event_files(o.tensorboard)[0])[1].step() == 0);
  std::vector<int64_t> all_steps;
  for (int64_t i = 1; i <= 12; ++i) all_steps.push_back(i);
  for (const std::string& tag : kTrainTags) {
    INFO(tag);
    REQUIRE(sc.count(tag) == 1);
    CHECK(steps_of(sc.at(tag)) == all_steps);
  }
  const auto at = [&](const std::string& tag, int64_t step) { return sc.at(tag)[static_cast<size_t>(step - 1)].value; };
  CHECK(at("train/skip_reason", 3) == 1.0);  // overflow
  CHECK(at("train/skip_reason", 2) == 0.0);
  CHECK(at("train/skipped_steps", 2) == 0.0);
  CHECK(at("train/skipped_steps", 3) == 1.0);
  CHECK(at("train/skipped_steps", 12) == 1.0);
  CHECK(at("train/loss_scale", 3) == 65536.0);
  CHECK(at("train/loss_scale", 4) == 32768.0);  // backed off after the overflow
  for (int64_t step = 1; step <= 12; ++step) {
    INFO("step " << step);
    CHECK(std::isfinite(at("train/loss", step)));
    CHECK(at("train/lr", step) > 0);
    CHECK(at("train/data_wait", step) >= 0);
    CHECK(at("train/data_wait", step) <= 1);
    CHECK(at("train/samples_per_s", step) > 0);
    if (step != 3) CHECK(std::isfinite(at("train/grad_norm", step)));
  }
  CHECK_FALSE(std::isfinite(at("train/grad_norm", 3)));

  // The scalars are the --metrics CSV's figures (same step, same value rounded to float).
  std::ifstream csv(o.metrics);
  std::string line;
  std::getline(csv, line);  // header
  for (int64_t step = 1; std::getline(csv, line); ++step) {
    std::vector<std::string> f;
    std::stringstream ls(line);
    for (std::string c; std::getline(ls, c, ',');) f.push_back(c);
    REQUIRE(f.size() >= 7);
    CHECK(std::stoll(f[1]) == step);
    CHECK(at("train/loss", step) == Approx(std::stod(f[4])).epsilon(1e-5));
    CHECK(at("train/lr", step) == Approx(std::stod(f[3])).epsilon(1e-5));
  }

  // Eval at each epoch's last step; the last one is the summary's.
  REQUIRE(steps_of(sc.at("eval/loss")) == std::vector<int64_t>{6, 12});
  REQUIRE(steps_of(sc.at("eval/accuracy")) == std::vector<int64_t>{6, 12});
  CHECK(sc.at("eval/loss")[1].value == static_cast<float>(s.test_loss));
  CHECK(sc.at("eval/accuracy")[1].value == static_cast<float>(s.test_accuracy));

  // Histograms at steps 4, 8, 12 for every parameter and its gradient; the skip's text.
  std::map<std::string, std::set<int64_t>> histos;
  std::vector<std::string> texts;
  for (const pb::Event& e : events_of(event_files(o.tensorboard)[0]))
    for (const pb::Summary::Value& v : e.summary().value()) {
      if (v.has_histo()) {
        histos[v.tag()].insert(e.step());
        CHECK(v.histo().num() > 0);
      }
      if (v.has_tensor()) texts.push_back(v.tag() + ": " + v.tensor().string_val(0));
    }
  CHECK(histos.size() == 2 * 65);  // resnet20: 65 parameter tensors, weights/ and grads/
  CHECK(histos["weights/fc.weight"] == std::set<int64_t>{4, 8, 12});
  CHECK(histos["grads/fc.weight"] == std::set<int64_t>{4, 8, 12});
  REQUIRE(texts.size() == 2);
  CHECK_THAT(texts[0], Catch::Matchers::StartsWith("run/options: ") && Catch::Matchers::Contains("precision: f16"));
  CHECK(texts[1] == "train/skipped: step 3 skipped: overflow (loss scale 65536 -> 32768)");
}

TEST_CASE("precis-train --tensorboard: a resumed run replaces the steps after its checkpoint, none twice",
          "[summary][train]") {
  TempDir dir("tensorboard-resume");
  const std::string data = image_data(dir);
  // The reference: one uninterrupted run.
  train::TrainOptions whole = tiny_resnet(data, dir / "ck-whole");
  whole.tensorboard = dir / "tb-whole";
  std::ostringstream log;
  train::train(whole, log);
  // Interrupted after step 8, resumed from the checkpoint of step 4: steps 5..8 run twice.
  train::TrainOptions o = tiny_resnet(data, dir / "ck");
  o.tensorboard = dir / "tb";
  o.checkpoint_every = 4;
  o.stop_after_steps = 8;
  train::train(o, log);
  train::TrainOptions r = tiny_resnet(data, dir / "ck");
  r.tensorboard = o.tensorboard;
  r.resume = true;
  r.resume_from = train::checkpoint_path(r.checkpoint_dir, 4);
  train::train(r, log);

  REQUIRE(event_files(o.tensorboard).size() == 2);
  const std::vector<pb::Event> second = events_of(event_files(o.tensorboard)[1]);
  REQUIRE(second.size() >= 2);
  CHECK(second[1].session_log().status() == pb::SessionLog::START);
  CHECK(second[1].step() == 5);

  int starts = 0;
  const auto merged = scalars(o.tensorboard, &starts);
  const auto reference = scalars(whole.tensorboard);
  CHECK(starts == 2);  // the first run's at 0, the resumed run's at 5
  for (const std::string& tag : {"train/loss", "train/accuracy", "train/lr", "train/grad_norm", "eval/loss"}) {
    INFO(tag);
    const std::vector<Point>& m = merged.at(tag);
    const std::vector<Point>& ref = reference.at(tag);
    REQUIRE(steps_of(m) == steps_of(ref));  // 1..12 once each (eval: 6, 12)
    // Bit-exact resume: the same figures as the uninterrupted run.
    if (std::string(tag) != "train/grad_norm")
      for (size_t i = 0; i < m.size(); ++i) CHECK(m[i].value == ref[i].value);
  }
}

// --precision fp8: the first and the last fp8 linear layer's amaxes and scales at every step
// (ResNet has one: its head), equal to what the checkpoint's fp8 state says after the last step.
TEST_CASE("precis-train --tensorboard with --precision fp8: fp8 amaxes and scales per step", "[summary][train][fp8]") {
  TempDir dir("tensorboard-fp8");
  train::TrainOptions o = tiny_resnet(image_data(dir), dir / "ck");
  o.precision = DType::bf16;
  o.fp8 = true;
  o.fp8_options.amax_history_len = 4;
  o.tensorboard = dir / "tb";
  std::ostringstream log;
  const train::TrainSummary s = train::train(o, log);
  REQUIRE(s.steps == 12);
  const auto sc = scalars(o.tensorboard);
  const train::Checkpoint ck = train::load_checkpoint(s.last_checkpoint);
  for (const char* operand : {"input", "weight", "grad_output"}) {
    const std::string tag = std::string("fp8/fc/") + operand;
    INFO(tag);
    REQUIRE(sc.count(tag + "_amax") == 1);
    REQUIRE(sc.count(tag + "_scale") == 1);
    CHECK(sc.at(tag + "_scale").size() == 12);
    const float scale = ck.state.at(std::string("model.fc.fp8.") + operand + "_scale").item<float>();
    const std::vector<float> history =
        ck.state.at(std::string("model.fc.fp8.") + operand + "_amax_history").to_vector<float>();
    CHECK(sc.at(tag + "_scale").back().value == scale);
    CHECK(sc.at(tag + "_amax").back().value == history.back());
    CHECK(history.back() > 0.0f);
  }
}
