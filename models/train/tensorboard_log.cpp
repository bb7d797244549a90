#include "models/train/tensorboard_log.h"

#include <cstdio>
#include <sstream>
#include <utility>
#include <vector>

#include "models/nn/linear.h"
#include "models/nn/module.h"

namespace precis::train {

namespace {
summary::SummaryWriterOptions writer_options(int64_t resumed_step) {
  summary::SummaryWriterOptions o;
  o.flush_secs = 30;
  o.max_queue = 100;
  // Every run's file opens with a session START: TensorBoard's server treats the first START of
  // a folder as the beginning and a later one as a restart, dropping the points at and after its
  // step that earlier files hold. A fresh run starts at 0 (replacing the curves of an earlier
  // run in the same folder); a resumed one after its checkpoint's step.
  o.purge_step = resumed_step >= 0 ? resumed_step + 1 : 0;
  return o;
}
}  // namespace

TensorBoardLog::TensorBoardLog(const std::string& dir, int64_t histogram_every, int64_t resumed_step,
                               const std::map<std::string, std::string>& identity)
    : writer_(dir, writer_options(resumed_step)), every_(histogram_every) {
  std::ostringstream text;
  for (const auto& [key, value] : identity) text << "- " << key << ": " << value << "\n";
  if (resumed_step >= 0) text << "- resumed at step " << resumed_step << "\n";
  writer_.add_text("run/options", text.str(), resumed_step >= 0 ? resumed_step : 0);
}

void TensorBoardLog::step(const StepLog& s) {
  writer_.add_scalar("train/loss", s.loss, s.step);
  writer_.add_scalar("train/accuracy", s.accuracy, s.step);
  writer_.add_scalar("train/lr", s.lr, s.step);
  writer_.add_scalar("train/loss_scale", s.loss_scale, s.step);
  writer_.add_scalar("train/skipped_steps", static_cast<double>(s.skipped_total), s.step);
  writer_.add_scalar("train/skip_reason", static_cast<double>(static_cast<int>(s.reason)), s.step);
  writer_.add_scalar("train/grad_norm", s.grad_norm, s.step);
  writer_.add_scalar("train/samples_per_s", s.samples_per_s, s.step);
  writer_.add_scalar("train/data_wait", s.data_wait, s.step);
  if (!s.applied) {
    char line[200];
    std::snprintf(line, sizeof line, "step %lld skipped: %s (loss scale %g -> %g)", static_cast<long long>(s.step),
                  amp::skip_reason_name(s.reason), s.loss_scale, s.scale_after);
    writer_.add_text("train/skipped", line, s.step);
  }
}

void TensorBoardLog::fp8(const nn::Module& model, int64_t step) {
  std::vector<std::pair<std::string, const nn::Linear*>> layers;
  for (const auto& [name, m] : model.named_modules())
    if (const auto* l = dynamic_cast<const nn::Linear*>(m); l != nullptr && l->fp8_enabled()) layers.emplace_back(name, l);
  if (layers.empty()) return;
  if (layers.size() > 2) layers.erase(layers.begin() + 1, layers.end() - 1);
  for (const auto& [name, l] : layers) {
    const amp::Fp8LinearState s = l->fp8_scaling().state();
    for (const auto& [operand, d] : {std::pair<const char*, const amp::DelayedScalingState*>{"input", &s.input},
                                     {"weight", &s.weight}, {"grad_output", &s.grad_output}}) {
      const std::string tag = "fp8/" + name + "/" + operand;
      const Tensor& h = d->amax_history();
      writer_.add_scalar(tag + "_amax", h.narrow(0, h.numel() - 1, 1).item<double>(), step);
      writer_.add_scalar(tag + "_scale", d->scale().item<double>(), step);
    }
  }
}

void TensorBoardLog::histograms(const nn::Module& model, int64_t step) {
  for (const auto& [name, p] : model.named_parameters()) {
    writer_.add_histogram("weights/" + name, p, step);
    const Tensor g = p.grad();
    if (g.defined()) writer_.add_histogram("grads/" + name, g, step);
  }
}

void TensorBoardLog::evaluation(int64_t step, double loss, double accuracy) {
  writer_.add_scalar("eval/loss", loss, step);
  writer_.add_scalar("eval/accuracy", accuracy, step);
  writer_.flush();
}

}  // namespace precis::train
