#pragma once
// A small but real training state for the state-dict and checkpoint harnesses: a module with
// parameters and buffers (Linear + BatchNorm2d), an Adam optimizer over them, a StepLR schedule
// and a GradScaler, under the prefixes precis-train uses ("model.", "optimizer.", "scheduler.",
// "scaler.").
#include "tensor/state_dict.h"

namespace precis::fuzz {

/// That state, fresh, as one StateDict (the seed generator writes it).
StateDict make_training_state();

/// Loads `dict` into a fresh training state, each part on its own (a part that throws
/// precis::Error leaves the others to be tried), then takes one optimizer, scheduler and scaler
/// step when every part loaded. Only precis::Error may escape from the parts; anything else
/// propagates to libFuzzer.
void load_training_state(const StateDict& dict);

}  // namespace precis::fuzz
