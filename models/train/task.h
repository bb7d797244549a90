#pragma once
// What the trainer needs from a kind of model: its module, its data loaders and one forward pass
// that turns a batch into a loss and an accuracy count. Internal to models/train.
#include <cstdint>
#include <map>
#include <memory>
#include <ostream>
#include <string>

#include "data/data_loader.h"
#include "models/nn/module.h"
#include "models/train/train_options.h"

namespace precis::train {

/// One forward pass: the mean loss (a graph to backpropagate through, unless under NoGradGuard),
/// and how many of `count` predictions were right (images: examples; MLM: masked tokens).
/// Nothing here waits for the device: `loss` and `correct` are device tensors (read at log points
/// only); `count` and `samples` follow from the batch, which the loader builds on the host.
struct ForwardStats {
  Tensor loss;
  Tensor correct;       ///< 0-d i64
  int64_t count = 0;
  int64_t samples = 0;  ///< examples in the batch
};

class TrainTask {
 public:
  virtual ~TrainTask() = default;
  /// The model being trained (built from the default generator, which the trainer seeds).
  virtual std::shared_ptr<nn::Module> model() = 0;
  /// A deep copy of `m` (the task's model class), for evaluating a low-precision model in fp32.
  virtual std::shared_ptr<nn::Module> clone_model(const nn::Module& m) const = 0;
  /// Loss and correct predictions of `m` (on `device`) on `batch`, under whatever autocast the
  /// caller set. `batch` is the loader's, in host memory: the task counts what it needs from it
  /// there (no device read) and copies its tensors to `device` (to_device).
  virtual ForwardStats forward(nn::Module& m, const data::Batch& batch, Device device) = 0;
  virtual data::DataLoader& train_loader() = 0;
  virtual data::DataLoader& test_loader() = 0;
  /// "accuracy" or "mlm_accuracy": what ForwardStats::correct counts.
  virtual const char* metric() const = 0;
  /// Facts a checkpoint must agree on to be resumed (e.g. the vocabulary size), as metadata.
  virtual std::map<std::string, std::string> metadata() const { return {}; }
};

/// ResNet on Fashion-MNIST / MNIST (IDX) or CIFAR-10 (binary), chosen from the files in
/// options.data. Prints one line describing the data to `log`.
std::unique_ptr<TrainTask> make_image_task(const TrainOptions& options, std::ostream& log);
/// BERT masked-LM on a text corpus (WordNet glosses by default) with a loaded or trained vocabulary.
std::unique_ptr<TrainTask> make_mlm_task(const TrainOptions& options, std::ostream& log);

/// `batch` with every defined tensor on `device` (the same tensors when it is the CPU). Pinned
/// tensors (the tasks' loaders pin for a CUDA device) are copied without blocking the host.
data::Batch to_device(const data::Batch& batch, Device device);

/// A dataset of the first `n` examples of `base` (all of them when n <= 0 or n >= size).
std::shared_ptr<const data::Dataset> take_first(std::shared_ptr<const data::Dataset> base, int64_t n);

}  // namespace precis::train
