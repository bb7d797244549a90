#pragma once
// The places a run writes to, proven writable before it reads any data: a read-only or mistyped
// output folder should cost seconds, not the epoch after which the first checkpoint is due.
// Internal to models/train.
#include "models/train/train_options.h"

namespace precis::train {

/// Creates --checkpoint DIR and --tensorboard DIR (and the folders of --metrics FILE and of a
/// --vocab FILE still to be written) and proves each writable by creating a file there, which is
/// removed again. IOError naming the option, the path, the system's reason and what to do for the
/// first one that is not.
void require_writable_outputs(const TrainOptions& o);

}  // namespace precis::train
