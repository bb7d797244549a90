#pragma once
// The trainer's running figures and its per-step CSV. Internal to models/train.
//
// Loss and accuracy sums stay on the device where the forward computed them and are read only at
// log points (a progress line that is due, a CSV row, the epoch summary): a training step itself
// waits for no device result. Counts that follow from the batch alone (examples, labelled tokens)
// are host integers.
#include <cstdint>
#include <fstream>
#include <string>

#include "models/train/task.h"
#include "tensor/state_dict.h"

namespace precis::train {

struct RunningMetrics {
  Tensor loss_sum;          ///< f64 0-d: sum of the micro-batches' mean losses (undefined: none yet)
  Tensor correct;           ///< i64 0-d: right predictions (undefined: none yet)
  int64_t count = 0;        ///< predictions made
  int64_t micro_batches = 0;
  int64_t samples = 0;      ///< examples

  /// Adds one micro-batch's figures (device ops only, no read).
  void add(const ForwardStats& s);
  void reset() { *this = RunningMetrics(); }

  struct Values {
    double loss = 0;      ///< mean over the micro-batches (0 when none)
    double accuracy = 0;  ///< correct / count in [0, 1] (0 when none)
    int64_t correct = 0;
  };
  /// Moves the sums to `device` (after load_state_dict, which restores them on the CPU).
  void to(Device device);
  /// Reads the device sums: the one synchronising call, for log points only.
  Values read() const;

  /// "loss_sum" (0-d f64), "micro_batches", "correct", "count", "samples" (0-d i64), as CPU
  /// tensors (checkpoint keys under "trainer.").
  StateDict state_dict() const;
  /// Restores from state_dict()'s entries; ValueError naming `owner` and a missing key.
  void load_state_dict(const StateDict& dict, const char* owner);
};

/// --metrics: one CSV row per optimizer step (epoch,step,epoch_step,lr,loss,accuracy,loss_scale,
/// applied,grad_norm,samples_per_s,data_wait), flushed per row. Disabled for an empty path.
class MetricsCsv {
 public:
  /// Opens `path` (appending when `append`, e.g. on resume); IOError when it cannot be written.
  MetricsCsv(const std::string& path, bool append);
  bool enabled() const { return out_.is_open(); }
  /// grad_norm NaN: no clipping (empty field). IOError with the system's reason when the row
  /// cannot be written (a full disk).
  void row(int64_t epoch, int64_t step, int64_t epoch_step, double lr, double loss, double accuracy, double scale,
           bool applied, double grad_norm, double samples_per_s, double data_wait);

 private:
  std::string path_;
  std::ofstream out_;
};

/// `v` with `digits` decimals, or "null" when not finite (JSON).
std::string json_number(double v, int digits);

}  // namespace precis::train
