#pragma once
// DataLoader: batches of a Dataset, loaded ahead by worker threads into a bounded queue.
//
//   auto train = std::make_shared<data::MnistDataset>(data::kFashionMnistDir, /*train=*/true);
//   data::DataLoader loader(train, {.batch_size = 64, .shuffle = true, .seed = 1, .num_workers = 2});
//   for (int64_t e = 0; e < epochs; ++e)
//     for (data::Batch& b : loader.epoch(e)) step(b[0], b[1]);   // images (64, 1, 28, 28), labels (64,)
//
// Determinism: an epoch's batches are fixed index lists computed from (seed, epoch) before any
// worker starts, and example i of epoch e is loaded with the random stream SampleRng(seed, i, e).
// Workers may finish out of order, but the loader yields batch 0, 1, 2, ... in order, so the
// batches (order and contents) are the same for any num_workers and prefetch.
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "data/collate.h"
#include "data/dataset.h"

namespace precis::data {

/// The index lists of one epoch's batches, in the order they are yielded.
using BatchSampler = std::function<std::vector<std::vector<int64_t>>(int64_t epoch)>;

/// As torch.utils.data.DataLoader's arguments where they share a name (same defaults, except that
/// prefetch counts batches in total rather than per worker, and `seed` replaces a generator).
struct DataLoaderOptions {
  int64_t batch_size = 1;  ///< >= 1 examples per batch (the last may be smaller, see drop_last)
  /// Reshuffle every epoch: epoch e uses a permutation drawn from (seed, e).
  bool shuffle = false;
  /// Seeds the shuffle and every example's SampleRng.
  uint64_t seed = 0;
  /// Drop the last batch when it has fewer than batch_size examples.
  bool drop_last = false;
  /// Worker threads; 0 loads each batch on the consumer's thread when it is asked for.
  int num_workers = 0;
  /// Most batches loaded (or being loaded) ahead of the consumer; 0 means 2 * num_workers.
  int prefetch = 0;
  /// Builds a batch's tensors from its examples (runs on a worker thread).
  CollateFn collate = stack_examples;
  /// When set, gives each epoch's index lists and replaces batch_size/shuffle/drop_last
  /// (e.g. token_budget_batches for text).
  BatchSampler batch_sampler = nullptr;
  /// Copy every batch tensor into pinned host memory (Tensor::pin_memory) on the loading thread,
  /// so that `b[0].to(Device::cuda(0), /*non_blocking=*/true)` overlaps the copy with compute.
  /// Where pinned memory cannot be had (a build without CUDA, no visible device) the loader
  /// warns once and yields ordinary batches, as PyTorch's DataLoader does.
  bool pin_memory = false;
};

/// Where a loader stands: the next batch it yields is batch `batch` of epoch `epoch`. Saved in a
/// checkpoint, it resumes the data stream exactly (set_position).
struct DataPosition {
  int64_t epoch = 0;  ///< the epoch of the next batch
  int64_t batch = 0;  ///< its index within that epoch
  bool operator==(const DataPosition&) const = default;  ///< same epoch and batch
};

/// Iterates a Dataset in batches (see the file comment). Its own methods are for one thread (the
/// consumer); the workers it starts call the dataset's sample() concurrently. Not copyable.
class DataLoader {
  struct Run;

 public:
  /// Shares `dataset` (non-null) and checks the options (ValueError: batch_size >= 1,
  /// num_workers >= 0, prefetch >= 0, collate set). Starts no thread before begin().
  DataLoader(std::shared_ptr<const Dataset> dataset, DataLoaderOptions options = {});
  /// Stops and joins the workers of an iteration still in progress.
  ~DataLoader();
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  /// Input iterator over the batches of one epoch. Dereferencing hands the batch to the caller
  /// (and advances position()); destroying the iterator (loop end, break, exception) stops and
  /// joins the workers. An exception thrown while loading a batch (in get/sample or collate, on
  /// any thread) is rethrown here when that batch is reached.
  class Iterator {
   public:
    using value_type = Batch;                ///< the element yielded
    using difference_type = std::ptrdiff_t;  ///< for std::input_iterator
    /// The end iterator.
    Iterator() = default;
    /// The current batch, loaded or waited for on first access; the reference stays valid until
    /// the next ++ (move from it to keep the batch). StateError at the end.
    Batch& operator*() const;
    /// &operator*().
    Batch* operator->() const { return &**this; }
    /// Moves to the next batch (consuming the current one even if it was never dereferenced); at
    /// the epoch's end joins the workers and becomes the end iterator. StateError at the end.
    Iterator& operator++();
    /// Same as prefix ++ (returns nothing: an input iterator cannot be replayed).
    void operator++(int) { ++*this; }
    /// Equal when both are at the end or both are not (enough for a range-for against end()).
    bool operator==(const Iterator& other) const { return done() == other.done(); }

   private:
    friend class DataLoader;
    explicit Iterator(std::shared_ptr<Run> run) : run_(std::move(run)) {}
    bool done() const;
    std::shared_ptr<Run> run_;
  };

  /// Starts iterating the epoch of position() from its batch; at the epoch's end position()
  /// becomes {epoch + 1, 0}. One iteration at a time (StateError otherwise).
  Iterator begin();
  Iterator end() { return Iterator(); }  ///< the end iterator
  /// set_position(e, 0) and returns *this, for `for (Batch& b : loader.epoch(e))`.
  DataLoader& epoch(int64_t e);

  /// The next batch to be yielded (advanced by each dereference; save it with a checkpoint).
  DataPosition position() const { return position_; }
  /// The next batch yielded will be batch `batch` of epoch `epoch` (resuming from a checkpoint).
  void set_position(int64_t epoch, int64_t batch);

  /// The index lists of epoch e's batches (what the iteration will load).
  std::vector<std::vector<int64_t>> batch_indices(int64_t epoch) const;
  /// Number of batches in epoch e.
  int64_t num_batches(int64_t epoch = 0) const { return static_cast<int64_t>(batch_indices(epoch).size()); }

  /// Share of the current (or last) iteration's wall time the consumer spent waiting for a batch
  /// (loading it itself when num_workers is 0): near 1 means the data pipeline is the bottleneck.
  double wait_fraction() const;
  /// Seconds the consumer has waited for data in the current (or last) iteration.
  double wait_seconds() const { return wait_s_; }

  const DataLoaderOptions& options() const { return options_; }  ///< the options, as given
  /// The dataset (shared with the caller; alive as long as the loader).
  const Dataset& dataset() const { return *dataset_; }

 private:
  Batch load_batch(int64_t epoch, int64_t index, const std::vector<int64_t>& indices) const;

  std::shared_ptr<const Dataset> dataset_;
  DataLoaderOptions options_;
  bool pin_ = false;  // options_.pin_memory and pinned memory can be had
  DataPosition position_;
  std::weak_ptr<Run> active_;
  std::chrono::steady_clock::time_point run_start_{};
  std::chrono::steady_clock::time_point run_last_{};
  double wait_s_ = 0.0;
};

}  // namespace precis::data
