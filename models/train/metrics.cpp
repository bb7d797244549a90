#include "models/train/metrics.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "autograd/grad_mode.h"
#include "core/error.h"
#include "ops/functional.h"

namespace precis::train {

namespace {

// What the last failed stream operation's system call said (streams keep no error of their own).
std::string system_reason() { return errno != 0 ? std::strerror(errno) : "unknown error"; }

// sum += v, starting from v itself (on v's device; no host value involved).
void accumulate(Tensor& sum, const Tensor& v) { sum = sum.defined() ? add(sum, v) : v.clone(); }

}  // namespace

void RunningMetrics::add(const ForwardStats& s) {
  NoGradGuard no_grad;
  // f32 → f64 is exact and the sum is taken in f64, as a host double sum of item() values would be.
  accumulate(loss_sum, s.loss.detach().to(DType::f64));
  if (s.correct.defined()) accumulate(correct, s.correct.to(DType::i64));
  count += s.count;
  samples += s.samples;
  ++micro_batches;
}

void RunningMetrics::to(Device device) {
  if (loss_sum.defined()) loss_sum = loss_sum.to(device);
  if (correct.defined()) correct = correct.to(device);
}

RunningMetrics::Values RunningMetrics::read() const {
  Values v;
  if (micro_batches > 0 && loss_sum.defined()) v.loss = loss_sum.item<double>() / static_cast<double>(micro_batches);
  if (correct.defined()) v.correct = correct.item<int64_t>();
  if (count > 0) v.accuracy = static_cast<double>(v.correct) / static_cast<double>(count);
  return v;
}

StateDict RunningMetrics::state_dict() const {
  return {{"loss_sum", loss_sum.defined() ? loss_sum.cpu().clone() : state_real(0.0)},
          {"micro_batches", state_int(micro_batches)},
          {"correct", correct.defined() ? correct.cpu().clone() : state_int(0)},
          {"count", state_int(count)},
          {"samples", state_int(samples)}};
}

void RunningMetrics::load_state_dict(const StateDict& dict, const char* owner) {
  reset();
  loss_sum = state_real(state_get_real(dict, "loss_sum", owner));
  correct = state_int(state_get_int(dict, "correct", owner));
  micro_batches = state_get_int(dict, "micro_batches", owner);
  count = state_get_int(dict, "count", owner);
  samples = state_get_int(dict, "samples", owner);
}

MetricsCsv::MetricsCsv(const std::string& path, bool append) : path_(path) {
  if (path.empty()) return;
  const bool fresh = !append || !std::filesystem::exists(path) || std::filesystem::file_size(path) == 0;
  errno = 0;
  out_.open(path, append ? std::ios::app : std::ios::trunc);
  PRECIS_CHECK_T(IOError, out_.good(), "--metrics ", path, ": cannot open the file for writing: ", system_reason());
  if (fresh) out_ << "epoch,step,epoch_step,lr,loss,accuracy,loss_scale,applied,grad_norm,samples_per_s,data_wait\n";
}

void MetricsCsv::row(int64_t epoch, int64_t step, int64_t epoch_step, double lr, double loss, double accuracy,
                     double scale, bool applied, double grad_norm, double samples_per_s, double data_wait) {
  if (!enabled()) return;
  char buf[320];
  std::snprintf(buf, sizeof buf, "%lld,%lld,%lld,%.6g,%.6f,%.6f,%.6g,%d,%s,%.1f,%.4f\n",
                static_cast<long long>(epoch + 1), static_cast<long long>(step), static_cast<long long>(epoch_step),
                lr, loss, accuracy, scale, applied ? 1 : 0,
                std::isnan(grad_norm) ? "" : json_number(grad_norm, 6).c_str(), samples_per_s, data_wait);
  errno = 0;
  out_ << buf;
  out_.flush();
  // A full disk mid-run: stop now rather than train on with a silently truncated log.
  PRECIS_CHECK_T(IOError, out_.good(), "--metrics ", path_, ": writing the row of step ", step, " failed: ",
                 system_reason(), "; free space or point --metrics at another disk");
}

std::string json_number(double v, int digits) {
  if (!std::isfinite(v)) return "null";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

}  // namespace precis::train
