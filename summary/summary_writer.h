#pragma once
// TensorBoard event files from any training loop, with torch.utils.tensorboard's names:
//
//   summary::SummaryWriter w("runs/resnet20-bf16");
//   for (...) {
//     w.add_scalar("train/loss", loss.item<double>(), step);
//     if (step % 100 == 0) w.add_histogram("weights/fc.weight", fc->weight, step);
//   }
//   w.add_text("notes", "lr 0.1, batch 128", 0);
//   // destroyed (or close()d): everything is on disk
//
// Then `tensorboard --logdir runs`. One writer writes one file,
// <log_dir>/events.out.tfevents.<seconds>.<host>.<pid>.<n><suffix> (pid and the process's writer
// count n zero-padded, so that files sort in the order they were opened), a sequence of TFRecords
// (length, masked CRC-32C of the length, an Event message, masked CRC-32C of the message). The
// Event messages follow TensorBoard's schema (summary/tensorboard.proto, compiled by protoc at
// build time). Events are buffered and written out when max_queue of them are pending, by a
// background flush every flush_secs, on flush(), close() and destruction.
//
// A run resumed from a checkpoint at step k opens a new writer with purge_step = k + 1: its first
// event tells TensorBoard to drop the steps >= k + 1 that earlier files logged (a crash after the
// checkpoint), so no step appears twice.
//
// Built without protobuf (PRECIS_TENSORBOARD=OFF, or AUTO where it was not found) the constructor
// throws NotImplementedError saying how to enable it.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "tensor/tensor.h"

namespace precis::summary {

/// SummaryWriter's settings besides the directory (PyTorch's keyword arguments).
struct SummaryWriterOptions {
  int64_t max_queue = 10;        ///< events buffered before they are written out (>= 1)
  double flush_secs = 120;       ///< the background flush's period in seconds (> 0)
  std::string filename_suffix;   ///< appended to the file name
  /// When set: the file starts with a session START at this step, and TensorBoard discards the
  /// events with step >= purge_step that earlier files of the directory hold.
  std::optional<int64_t> purge_step;
};

/// Writes scalars, histograms and text for TensorBoard into one events file under a directory.
/// Thread-safe: calls from several threads are serialised.
class SummaryWriter {
 public:
  /// Creates `log_dir` (and its parents) when missing and opens a new events file in it. An
  /// empty log_dir means PyTorch's default, runs/DATE_TIME_HOST. IOError when the file
  /// cannot be created; ValueError for bad options.
  explicit SummaryWriter(std::string log_dir = "", SummaryWriterOptions options = {});
  /// Flushes and closes (close()); never throws (a failing final write is reported on stderr).
  ~SummaryWriter();
  SummaryWriter(const SummaryWriter&) = delete;
  SummaryWriter& operator=(const SummaryWriter&) = delete;

  /// One point of the curve `tag` (e.g. "train/loss") at `global_step`. walltime: seconds since
  /// the Unix epoch (default: now). Non-finite values are written as they are.
  void add_scalar(const std::string& tag, double value, int64_t global_step,
                  std::optional<double> walltime = std::nullopt);
  /// The distribution of a tensor's values (any floating dtype or device; read as f64 on the
  /// host) in `bins` equal-width buckets between its minimum and maximum. Non-finite values are
  /// left out (and counted in a warning on stderr, once per tag); a tensor with no finite value
  /// writes nothing. ValueError when bins < 1 or the tensor is undefined or not floating point.
  void add_histogram(const std::string& tag, const Tensor& values, int64_t global_step, int64_t bins = 64,
                     std::optional<double> walltime = std::nullopt);
  /// A text entry (TensorBoard's Text tab renders it as markdown).
  void add_text(const std::string& tag, const std::string& text, int64_t global_step,
                std::optional<double> walltime = std::nullopt);

  /// Writes the pending events to the file and flushes it; IOError when the write fails.
  void flush();
  /// flush(), then stops the background flush and closes the file. Further add_* calls throw
  /// StateError; close() again does nothing.
  void close();

  /// The directory the file is in.
  const std::string& log_dir() const;
  /// The events file's full path.
  const std::string& file_path() const;

  struct Impl;  // internal

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace precis::summary
