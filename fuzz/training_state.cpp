#include "fuzz/training_state.h"

#include "amp/grad_scaler.h"
#include "core/error.h"
#include "models/nn/linear.h"
#include "models/nn/norm.h"
#include "models/nn/sequential.h"
#include "optim/adam.h"
#include "optim/lr_scheduler.h"
#include "tensor/factory.h"

namespace precis::fuzz {
namespace {

struct State {
  nn::Sequential model{nn::Linear(4, 3), nn::BatchNorm2d(3)};
  optim::Adam optimizer{model.parameters(), {}};
  optim::StepLR scheduler{optimizer, {.step_size = 2, .gamma = 0.5}};
  amp::GradScaler scaler{};
};

}  // namespace

StateDict make_training_state() {
  State s;
  // One step first, so the optimizer holds moments and the scheduler and scaler have counts.
  for (const Tensor& p : s.model.parameters()) p.set_grad(ones_like(p));
  s.optimizer.step();
  s.scheduler.step();
  StateDict all;
  state_merge(all, s.model.state_dict(), "model.");
  state_merge(all, s.optimizer.state_dict(), "optimizer.");
  state_merge(all, s.scheduler.state_dict(), "scheduler.");
  state_merge(all, s.scaler.state_dict(), "scaler.");
  return all;
}

void load_training_state(const StateDict& dict) {
  State s;
  bool all_loaded = true;
  auto part = [&](auto&& fn) {
    try {
      fn();
    } catch (const Error&) {
      all_loaded = false;
    }
  };
  part([&] { s.model.load_state_dict(state_subset(dict, "model."), /*strict=*/true); });
  part([&] { (void)s.model.load_state_dict(state_subset(dict, "model."), /*strict=*/false); });
  part([&] { s.optimizer.load_state_dict(state_subset(dict, "optimizer.")); });
  part([&] { s.scheduler.load_state_dict(state_subset(dict, "scheduler.")); });
  part([&] { s.scaler.load_state_dict(state_subset(dict, "scaler.")); });
  if (!all_loaded) return;
  // Everything the file said was accepted: the state must now be usable.
  part([&] {
    for (const Tensor& p : s.model.parameters()) p.set_grad(ones_like(p));
    s.optimizer.step();
    s.scheduler.step();
    (void)s.model.state_dict();
    (void)s.optimizer.state_dict();
    (void)s.scaler.state_dict();
  });
}

}  // namespace precis::fuzz
