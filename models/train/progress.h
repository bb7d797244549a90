#pragma once
// precis-train's progress display: one line redrawn in place (\r) on a terminal, or plain lines
// every few steps when the output is a file or a pipe (logs stay readable). Internal to
// models/train.
#include <chrono>
#include <cstdint>
#include <ostream>
#include <string>

namespace precis::train {

struct ProgressInfo {
  int64_t epoch = 0, epochs = 0;        ///< epoch is 0-based
  int64_t step = 0, steps = 0;          ///< optimizer steps done in this epoch / in the epoch
  double loss = 0;                      ///< running mean over the epoch
  double accuracy = 0;                  ///< running, in [0, 1]
  const char* metric = "acc";
  double samples_per_s = 0;
  double scale = 0;                     ///< loss scale; 0 when no scaler runs
  int64_t skipped = 0;
  double data_wait = 0;                 ///< share of the epoch's time spent waiting for data
  double lr = 0;
  double eta_s = -1;                    ///< seconds left in the epoch (< 0: unknown)
};

/// The progress line's text (no \r or \n).
std::string format_progress(const ProgressInfo& p);

/// "1 epoch", "4 epochs", "0 threads": n and the noun, with an s unless n is 1.
std::string plural(int64_t n, const std::string& noun);

class Progress {
 public:
  /// tty: redraw in place (at most every 0.2 s); else print a line every `every` steps (>= 1).
  Progress(std::ostream& out, bool tty, int64_t every, bool quiet);
  /// Whether update() after optimizer step `step` of the epoch would print: the caller builds the
  /// ProgressInfo (which reads device metrics) only then.
  bool due(int64_t step, bool last = false) const;
  /// Shows the state after a step; `last` forces the line out (end of an epoch) unless, without a
  /// terminal, the line of that step was printed already.
  void update(const ProgressInfo& p, bool last = false);
  /// Ends a redrawn line, so that other output starts on a fresh line.
  void break_line();

 private:
  std::ostream& out_;
  bool tty_, quiet_;
  int64_t every_;
  bool line_open_ = false;
  int64_t printed_step_ = -1;  // the step of the last plain line (no terminal)
  std::chrono::steady_clock::time_point last_draw_{};
};

}  // namespace precis::train
