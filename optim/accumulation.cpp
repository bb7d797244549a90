#include "optim/accumulation.h"

namespace precis::optim {

GradAccumulator::GradAccumulator(int64_t steps) : steps_(steps) {
  PRECIS_CHECK(steps >= 1, "GradAccumulator: steps must be >= 1 micro-batches per optimizer step, got ", steps);
}

bool GradAccumulator::micro_step() {
  if (++count_ < steps_) return false;
  count_ = 0;
  ++optimizer_steps_;
  return true;
}

StateDict GradAccumulator::state_dict() const {
  return {{"steps", state_int(steps_)}, {"pending", state_int(count_)}, {"optimizer_steps", state_int(optimizer_steps_)}};
}

void GradAccumulator::load_state_dict(const StateDict& dict) {
  const int64_t steps = state_get_int(dict, "steps", "GradAccumulator");
  const int64_t pending = state_get_int(dict, "pending", "GradAccumulator");
  const int64_t done = state_get_int(dict, "optimizer_steps", "GradAccumulator");
  PRECIS_CHECK(steps == steps_, "GradAccumulator.load_state_dict: saved with ", steps,
               " micro-batches per step but this accumulator has ", steps_);
  PRECIS_CHECK(pending >= 0 && pending < steps && done >= 0, "GradAccumulator.load_state_dict: invalid counters (pending ",
               pending, ", optimizer_steps ", done, ")");
  count_ = pending;
  optimizer_steps_ = done;
}

}  // namespace precis::optim
