#include "models/train/progress.h"

#include <cmath>
#include <cstdio>

namespace precis::train {

namespace {

std::string duration(double s) {
  if (s < 0 || !std::isfinite(s)) return "?";
  const long t = std::lround(s);
  char buf[32];
  if (t >= 3600)
    std::snprintf(buf, sizeof buf, "%ld:%02ld:%02ld", t / 3600, (t / 60) % 60, t % 60);
  else
    std::snprintf(buf, sizeof buf, "%ld:%02ld", t / 60, t % 60);
  return buf;
}

}  // namespace

std::string format_progress(const ProgressInfo& p) {
  constexpr int kBar = 20;
  const double frac = p.steps > 0 ? static_cast<double>(p.step) / static_cast<double>(p.steps) : 0.0;
  const int filled = static_cast<int>(frac * kBar);
  std::string bar(static_cast<size_t>(kBar), ' ');
  for (int i = 0; i < filled && i < kBar; ++i) bar[static_cast<size_t>(i)] = '=';
  if (filled < kBar) bar[static_cast<size_t>(filled)] = '>';
  char buf[320];
  std::snprintf(buf, sizeof buf,
                "epoch %lld/%lld [%s] %lld/%lld  loss %.4f  %s %.2f%%  %.0f samples/s  lr %.3g  scale %s  "
                "skipped %lld  data %.0f%%  eta %s",
                static_cast<long long>(p.epoch + 1), static_cast<long long>(p.epochs), bar.c_str(),
                static_cast<long long>(p.step), static_cast<long long>(p.steps), p.loss, p.metric,
                100.0 * p.accuracy, p.samples_per_s, p.lr,
                p.scale > 0 ? std::to_string(static_cast<long long>(p.scale)).c_str() : "-",
                static_cast<long long>(p.skipped), 100.0 * p.data_wait, duration(p.eta_s).c_str());
  return buf;
}

std::string plural(int64_t n, const std::string& noun) {
  return std::to_string(n) + " " + noun + (n == 1 ? "" : "s");
}

Progress::Progress(std::ostream& out, bool tty, int64_t every, bool quiet)
    : out_(out), tty_(tty), quiet_(quiet), every_(every < 1 ? 1 : every) {}

bool Progress::due(int64_t step, bool last) const {
  if (quiet_) return false;
  if (tty_)
    return last || !line_open_ || std::chrono::steady_clock::now() - last_draw_ >= std::chrono::milliseconds(200);
  if (step == printed_step_) return false;  // the epoch's last step may also be a --log-every step
  return last || step % every_ == 0;
}

void Progress::update(const ProgressInfo& p, bool last) {
  if (!due(p.step, last)) return;
  if (tty_) {
    last_draw_ = std::chrono::steady_clock::now();
    out_ << '\r' << format_progress(p) << "\x1b[K" << std::flush;
    line_open_ = true;
  } else {
    out_ << format_progress(p) << '\n' << std::flush;
    printed_step_ = p.step;
  }
}

void Progress::break_line() {
  if (line_open_) out_ << '\n' << std::flush;
  line_open_ = false;
}

}  // namespace precis::train
