#pragma once
// What a training run builds from its options before the first step: the optimizer, the lr
// schedule, and the facts a checkpoint must agree with to be resumed. Internal to models/train.
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "models/train/task.h"
#include "models/train/train_options.h"
#include "optim/lr_scheduler.h"
#include "optim/optimizer.h"

namespace precis::train {

/// Throws DeviceError naming `device` and saying why it cannot be used (a build without CUDA, no
/// visible GPU or driver, an index past the last device) unless it holds a tensor; a no-op for the
/// CPU. precis-train calls it before any other work, so that a run asked for a GPU it cannot have
/// fails at once instead of after loading its data.
void require_usable_device(Device device);

/// SGD (momentum, Nesterov), Adam or AdamW over `params` with the options' lr and weight decay.
std::unique_ptr<optim::Optimizer> make_optimizer(const TrainOptions& o, std::vector<Tensor> params);

/// The options' lr schedule over `total_steps` optimizer steps (null for Schedule::none).
std::unique_ptr<optim::LRScheduler> make_scheduler(const TrainOptions& o, optim::Optimizer& opt,
                                                   int64_t steps_per_epoch, int64_t total_steps);

/// The options (and task facts) a checkpoint must agree with to be resumed: a different value
/// would make the restored state meaningless (shapes, dtypes) or the continuation differ from the
/// original run. Stored as the checkpoint's metadata.
std::map<std::string, std::string> run_identity(const TrainOptions& o, const TrainTask& task);

}  // namespace precis::train
