#pragma once
// Fixtures for the precis-train tests (tests/models/train_*.cpp): tiny synthetic data sets that
// need no dataset package, option sets for a tiny ResNet and BERT, temporary folders, running the
// precis-train command, and bit-exact comparisons of checkpoints.
#include <catch2/catch.hpp>

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "models/train/checkpoint.h"
#include "models/train/trainer.h"

namespace precis::train_testing {

namespace fs = std::filesystem;

/// True in an AddressSanitizer build (scripts/sanitize-test.sh), where every instruction costs
/// several times more: the longest sweeps there check a subset of their points (saying so) and the
/// full sweep runs in the ordinary build. The sanitizers look for memory errors, which the subset
/// reaches through the same code paths; the sweep's coverage of points is the ordinary build's job.
constexpr bool kSanitizedBuild =
#if defined(__SANITIZE_ADDRESS__)
    true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
    true;
#else
    false;
#endif
#else
    false;
#endif

/// A fresh folder under the system temp dir, removed at scope exit.
struct TempDir {
  fs::path path;
  explicit TempDir(const std::string& tag);
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string operator/(const std::string& name) const { return (path / name).string(); }
};

/// MNIST-format IDX files (96 training and 40 test 8×8 images, learnable in a few steps) in
/// dir/images; returns that folder.
std::string image_data(const TempDir& dir);
/// A 240-line text corpus of a 22-word vocabulary in dir/corpus.txt; returns its path.
std::string text_data(const TempDir& dir);

/// ResNet-20 at width 4 on image_data: 2 epochs of 6 steps, OneCycle SGD, 1 thread, quiet,
/// checkpoints kept (keep 100) in `ckpt` (none when empty).
train::TrainOptions tiny_resnet(const std::string& data, const std::string& ckpt);
/// BERT L1 H32 A2 I64 on text_data, vocabulary of 60 trained into `vocab`: 2 epochs of 8 steps,
/// AdamW with warmup-linear, clipping at 1, 1 thread, 2 loader workers, quiet.
train::TrainOptions tiny_bert(const std::string& data, const std::string& ckpt, const std::string& vocab);

bool same_bits(const Tensor& a, const Tensor& b);
/// Empty when every tensor of two checkpoints is bit-identical, else the first difference.
std::string state_difference(const std::string& a_path, const std::string& b_path);
/// Every tensor of two checkpoints is bit-identical: model, optimizer, scaler, scheduler,
/// accumulator and the trainer's counters (including the running loss and accuracy sums).
void require_same_state(const std::string& a_path, const std::string& b_path);
/// Whether every weight of the model differs between two checkpoints (training really moved it).
bool every_weight_changed(const std::string& a_path, const std::string& b_path);

/// The whole contents of a file.
std::string read_file(const std::string& path);
/// SHA-256 of `bytes`, lowercase hex (FIPS 180-4).
std::string sha256_hex(const std::string& bytes);

#ifdef PRECIS_HAS_TRAIN_EXE
/// What a run of the precis-train command gave.
struct Run {
  int code = -1;
  std::string output;  // stdout and stderr
};
/// Runs the precis-train built beside the tests (or $PRECIS_TRAIN_EXE, where the executables were
/// moved: the GPU check's bundle, tests/gpu/steps.sh) with `args`, a shell command line.
Run run_cli(const std::string& args);
#endif

/// The message of the E that `f` throws (failing the test when it throws nothing or another type).
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

}  // namespace precis::train_testing
