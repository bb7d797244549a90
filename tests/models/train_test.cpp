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
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "models/train/checkpoint.h"
#include "models/train/trainer.h"
#include "tensor/safetensors.h"

using namespace precis;
namespace fs = std::filesystem;

namespace {

// A fresh folder under the system temp dir, removed at scope exit.
struct TempDir {
  fs::path path;
  explicit TempDir(const std::string& tag) {
    static int counter = 0;
    path = fs::temp_directory_path() /
           ("precis-train-test-" + tag + "-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string operator/(const std::string& name) const { return (path / name).string(); }
};

void put_u32(std::ofstream& out, uint32_t v) {
  const unsigned char b[4] = {static_cast<unsigned char>(v >> 24), static_cast<unsigned char>(v >> 16),
                              static_cast<unsigned char>(v >> 8), static_cast<unsigned char>(v)};
  out.write(reinterpret_cast<const char*>(b), 4);
}

// MNIST-format IDX files of n 8×8 images whose class is a bright row (row = label % 8, plus a
// column for labels >= 8) on noise: learnable in a few steps.
void write_images(const std::string& dir, const std::string& prefix, int n, uint32_t seed) {
  std::ofstream images(dir + "/" + prefix + "-images-idx3-ubyte", std::ios::binary);
  std::ofstream labels(dir + "/" + prefix + "-labels-idx1-ubyte", std::ios::binary);
  put_u32(images, 0x803);
  put_u32(images, static_cast<uint32_t>(n));
  put_u32(images, 8);
  put_u32(images, 8);
  put_u32(labels, 0x801);
  put_u32(labels, static_cast<uint32_t>(n));
  uint32_t s = seed;
  auto next = [&s] { return s = s * 1664525u + 1013904223u; };
  for (int i = 0; i < n; ++i) {
    const int label = static_cast<int>(next() >> 8) % 10;
    labels.put(static_cast<char>(label));
    for (int y = 0; y < 8; ++y)
      for (int x = 0; x < 8; ++x) {
        int v = static_cast<int>((next() >> 24) % 64);
        if (y == label % 8 || (label >= 8 && x == label - 6)) v += 180;
        images.put(static_cast<char>(v));
      }
  }
}

std::string image_data(const TempDir& dir) {
  const std::string d = dir / "images";
  fs::create_directories(d);
  write_images(d, "train", 96, 7);
  write_images(d, "t10k", 40, 11);
  return d;
}

std::string text_data(const TempDir& dir) {
  const std::string path = dir / "corpus.txt";
  std::ofstream out(path);
  const char* words[] = {"the", "cat", "sat", "on", "a", "mat", "dog", "ran", "to", "big", "red", "house",
                         "small", "bird", "sang", "in", "tree", "green", "field", "under", "blue", "sky"};
  uint32_t s = 3;
  for (int line = 0; line < 240; ++line) {
    const int len = 4 + static_cast<int>((s = s * 1664525u + 1013904223u) >> 28);
    for (int w = 0; w < len; ++w) out << (w ? " " : "") << words[((s = s * 1664525u + 1013904223u) >> 16) % 22];
    out << ".\n";
  }
  return path;
}

train::TrainOptions tiny_resnet(const std::string& data, const std::string& ckpt) {
  train::TrainOptions o;
  o.task = train::Task::resnet;
  o.model = "resnet20";
  o.width = 4;
  o.data = data;
  o.epochs = 2;
  o.batch = 16;  // 6 steps per epoch
  o.lr = 0.05;
  o.schedule = train::Schedule::onecycle;
  o.threads = 1;
  o.workers = 1;
  o.eval_batch = 20;
  o.checkpoint_dir = ckpt;
  o.keep = 100;
  o.quiet = true;
  return o;
}

train::TrainOptions tiny_bert(const std::string& data, const std::string& ckpt, const std::string& vocab) {
  train::TrainOptions o;
  o.task = train::Task::bert_mini;
  o.model = "bert-mini";
  o.data = data;
  o.vocab = vocab;
  o.vocab_size = 60;
  o.hidden = 32, o.layers = 1, o.heads = 2, o.intermediate = 64;
  o.max_len = 16;
  o.epochs = 2;
  o.batch = 32;  // 228 training lines: 8 steps per epoch
  o.optimizer = train::OptimizerKind::adamw;
  o.lr = 2e-3;
  o.weight_decay = 0.01;
  o.clip = 1.0;
  o.schedule = train::Schedule::warmup_linear;
  o.threads = 1;
  o.workers = 2;
  o.eval_batch = 16;
  o.checkpoint_dir = ckpt;
  o.keep = 100;
  o.quiet = true;
  return o;
}

bool same_bits(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype() || a.sizes() != b.sizes()) return false;
  Tensor ca = a.contiguous(), cb = b.contiguous();
  return std::memcmp(ca.data_ptr(), cb.data_ptr(), static_cast<size_t>(ca.numel()) * ca.element_size()) == 0;
}

// Every model, optimizer, scaler and scheduler tensor of two checkpoints is bit-identical.
void require_same_state(const std::string& a_path, const std::string& b_path) {
  train::Checkpoint a = train::load_checkpoint(a_path);
  train::Checkpoint b = train::load_checkpoint(b_path);
  REQUIRE(a.state.size() == b.state.size());
  int64_t compared = 0;
  for (const auto& [name, t] : a.state) {
    if (name.rfind("trainer.", 0) == 0) continue;  // counters compared below
    INFO(name);
    REQUIRE(b.state.count(name) == 1);
    REQUIRE(same_bits(t, b.state.at(name)));
    compared += name.rfind("model.", 0) == 0;
  }
  REQUIRE(compared > 10);
  for (const char* key : {"trainer.global_step", "trainer.epoch", "trainer.batch", "trainer.generator_offset"}) {
    INFO(key);
    REQUIRE(a.state.at(key).item<int64_t>() == b.state.at(key).item<int64_t>());
  }
}

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
  const train::Checkpoint at_k = train::load_checkpoint(first.last_checkpoint);
  const train::Checkpoint last = train::load_checkpoint(second.last_checkpoint);
  int64_t changed = 0, params = 0;
  for (const auto& [name, t] : last.state)
    if (name.rfind("model.", 0) == 0 && name.find("weight") != std::string::npos) {
      ++params;
      changed += !same_bits(t, at_k.state.at(name));
    }
  REQUIRE(changed == params);
}

// The message of the E that `f` throws (failing the test when it throws nothing or something else).
template <typename E, typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  FAIL("expected an exception");
  return "";
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
  const auto read_all = [](const std::string& p) {
    std::ifstream in(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
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

#ifdef PRECIS_TRAIN_EXE
namespace {
struct Run {
  int code = -1;
  std::string output;  // stdout and stderr
};
Run run_cli(const std::string& args) {
  Run r;
  FILE* p = ::popen((std::string(PRECIS_TRAIN_EXE) + " " + args + " 2>&1").c_str(), "r");
  REQUIRE(p != nullptr);
  std::array<char, 4096> buf;
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) r.output.append(buf.data(), n);
  const int status = ::pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}
}  // namespace

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

  const Run q = run_cli("resnet --data " + data + " --width 4 --epochs 1 --batch 16 --threads 1 --quiet");
  REQUIRE(q.code == 0);
  REQUIRE(q.output.find('{') == 0);  // nothing but the JSON line
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
      {"resnet --master-weights", {"--master-weights", "bf16 or f16"}},
      {"resnet --resume", {"--resume", "--checkpoint"}},
      {"bert-mini --max-len 64 --max-tokens 32", {"--max-tokens", "--max-len"}},
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
#endif
