#include "data/data_loader.h"

#include <condition_variable>
#include <exception>
#include <map>
#include <mutex>
#include <thread>

#include "core/allocator.h"
#include "core/error.h"
#include "core/warning.h"

namespace precis::data {

namespace {
using Clock = std::chrono::steady_clock;
double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }
}  // namespace

// One iteration over (the rest of) an epoch. Workers claim batch numbers in increasing order,
// never more than `prefetch` ahead of the batch the consumer asks for next, and park results in
// `ready` keyed by batch number; the consumer takes them in order.
struct DataLoader::Run {
  DataLoader* loader;  // null once the loader has been destroyed
  int64_t epoch;
  std::vector<std::vector<int64_t>> plan;
  int64_t next_take;   // next batch the consumer takes
  int64_t prefetch;

  std::mutex mutex;
  std::condition_variable work_cv;   // workers wait for room (or stop)
  std::condition_variable ready_cv;  // the consumer waits for its batch
  int64_t next_claim;
  bool stop = false;
  struct Slot {
    Batch batch;
    std::exception_ptr error;
  };
  std::map<int64_t, Slot> ready;
  std::vector<std::thread> workers;

  Batch current;
  bool has_current = false;

  Run(DataLoader* l, int64_t e, std::vector<std::vector<int64_t>> p, int64_t start)
      : loader(l), epoch(e), plan(std::move(p)), next_take(start), next_claim(start) {
    const int n_workers = l->options_.num_workers;
    prefetch = l->options_.prefetch > 0 ? l->options_.prefetch : 2 * std::max(n_workers, 1);
    workers.reserve(static_cast<size_t>(n_workers));
    try {
      for (int w = 0; w < n_workers; ++w) workers.emplace_back([this] { work(); });
    } catch (...) {
      shutdown();  // a destructor would not run: join the threads already started
      throw;
    }
  }

  ~Run() { shutdown(); }

  void shutdown() {
    {
      std::lock_guard<std::mutex> lock(mutex);
      stop = true;
    }
    work_cv.notify_all();
    for (std::thread& t : workers)
      if (t.joinable()) t.join();
    workers.clear();
  }

  int64_t size() const { return static_cast<int64_t>(plan.size()); }

  void work() {
    for (;;) {
      int64_t k;
      {
        std::unique_lock<std::mutex> lock(mutex);
        work_cv.wait(lock, [&] { return stop || next_claim >= size() || next_claim < next_take + prefetch; });
        if (stop || next_claim >= size()) return;
        k = next_claim++;
      }
      Slot slot;
      try {
        slot.batch = loader->load_batch(epoch, k, plan[static_cast<size_t>(k)]);
      } catch (...) {
        slot.error = std::current_exception();
      }
      {
        std::lock_guard<std::mutex> lock(mutex);
        ready.emplace(k, std::move(slot));
      }
      ready_cv.notify_all();
    }
  }

  // Makes batch next_take the current one (loading it or waiting for it) and advances.
  void take() {
    PRECIS_CHECK_T(StateError, loader != nullptr, "DataLoader: the loader was destroyed while iterating it");
    const int64_t k = next_take;
    const auto t0 = Clock::now();
    Slot slot;
    if (workers.empty()) {
      try {
        slot.batch = loader->load_batch(epoch, k, plan[static_cast<size_t>(k)]);
      } catch (...) {
        slot.error = std::current_exception();
      }
    } else {
      std::unique_lock<std::mutex> lock(mutex);
      ready_cv.wait(lock, [&] { return ready.count(k) != 0; });
      auto it = ready.find(k);
      slot = std::move(it->second);
      ready.erase(it);
    }
    const auto t1 = Clock::now();
    loader->wait_s_ += seconds(t1 - t0);
    loader->run_last_ = t1;
    {
      std::lock_guard<std::mutex> lock(mutex);
      next_take = k + 1;
    }
    work_cv.notify_all();
    if (slot.error) {
      has_current = false;
      std::rethrow_exception(slot.error);
    }
    current = std::move(slot.batch);
    has_current = true;
    loader->position_ = {epoch, k + 1};
  }
};

DataLoader::DataLoader(std::shared_ptr<const Dataset> dataset, DataLoaderOptions options)
    : dataset_(std::move(dataset)), options_(std::move(options)) {
  PRECIS_CHECK(dataset_ != nullptr, "DataLoader: the dataset is null");
  PRECIS_CHECK(options_.batch_size >= 1, "DataLoader: batch_size must be >= 1, got ", options_.batch_size);
  PRECIS_CHECK(options_.num_workers >= 0, "DataLoader: num_workers must be >= 0, got ", options_.num_workers);
  PRECIS_CHECK(options_.prefetch >= 0, "DataLoader: prefetch must be >= 0 (0 = 2 * num_workers), got ",
               options_.prefetch);
  PRECIS_CHECK(options_.collate != nullptr, "DataLoader: collate is empty (use data::stack_examples)");
  if (options_.pin_memory) {
    pin_ = pinned_memory_available();
    if (!pin_)
      warn("DataLoader: pin_memory is set, but pinned memory needs CUDA and a visible CUDA device (precis was built "
           "without CUDA, or no device is visible); batches are yielded in ordinary memory");
  }
}

DataLoader::~DataLoader() {
  if (auto run = active_.lock()) {
    run->shutdown();
    run->loader = nullptr;
  }
}

std::vector<std::vector<int64_t>> DataLoader::batch_indices(int64_t epoch) const {
  PRECIS_CHECK(epoch >= 0, "DataLoader: epoch must be >= 0, got ", epoch);
  if (options_.batch_sampler) {
    auto plan = options_.batch_sampler(epoch);
    const int64_t n = dataset_->size();
    for (size_t b = 0; b < plan.size(); ++b)
      for (int64_t i : plan[b])
        PRECIS_CHECK_INDEX(i >= 0 && i < n, "DataLoader: the batch sampler put index ", i, " in batch ", b,
                           " of epoch ", epoch, ", but the dataset has ", n, " examples");
    return plan;
  }
  const int64_t n = dataset_->size();
  const std::vector<int64_t> order = epoch_order(n, options_.shuffle, options_.seed, epoch);
  const int64_t bs = options_.batch_size;
  std::vector<std::vector<int64_t>> plan;
  plan.reserve(static_cast<size_t>((n + bs - 1) / bs));
  for (int64_t start = 0; start < n; start += bs) {
    const int64_t end = std::min(n, start + bs);
    if (end - start < bs && options_.drop_last) break;
    plan.emplace_back(order.begin() + start, order.begin() + end);
  }
  return plan;
}

Batch DataLoader::load_batch(int64_t epoch, int64_t index, const std::vector<int64_t>& indices) const {
  std::vector<Example> examples;
  examples.reserve(indices.size());
  for (int64_t i : indices) {
    SampleRng rng(options_.seed, static_cast<uint64_t>(i), static_cast<uint64_t>(epoch));
    examples.push_back(dataset_->sample(i, rng));
  }
  Batch batch;
  batch.tensors = options_.collate(examples);
  if (pin_)
    for (Tensor& t : batch.tensors)
      if (t.defined() && t.device().is_cpu()) t = t.pin_memory();
  batch.indices = indices;
  batch.epoch = epoch;
  batch.index = index;
  return batch;
}

DataLoader& DataLoader::epoch(int64_t e) {
  set_position(e, 0);
  return *this;
}

void DataLoader::set_position(int64_t epoch, int64_t batch) {
  PRECIS_CHECK_T(StateError, active_.expired(),
                 "DataLoader::set_position: an iteration is in progress; finish or break out of it first");
  PRECIS_CHECK(epoch >= 0 && batch >= 0, "DataLoader::set_position: epoch and batch must be >= 0, got (", epoch,
               ", ", batch, ")");
  position_ = {epoch, batch};
}

DataLoader::Iterator DataLoader::begin() {
  PRECIS_CHECK_T(StateError, active_.expired(),
                 "DataLoader::begin: another iteration over this loader is in progress (one at a time; "
                 "finish or destroy its iterator first)");
  auto plan = batch_indices(position_.epoch);
  wait_s_ = 0.0;
  run_start_ = run_last_ = Clock::now();
  if (position_.batch >= static_cast<int64_t>(plan.size())) {
    position_ = {position_.epoch + 1, 0};
    return Iterator();
  }
  auto run = std::make_shared<Run>(this, position_.epoch, std::move(plan), position_.batch);
  active_ = run;
  return Iterator(std::move(run));
}

double DataLoader::wait_fraction() const {
  const auto end = active_.expired() ? run_last_ : Clock::now();
  const double total = seconds(end - run_start_);
  return total > 0.0 ? std::min(1.0, wait_s_ / total) : 0.0;
}

bool DataLoader::Iterator::done() const {
  return run_ == nullptr || (!run_->has_current && run_->next_take >= run_->size());
}

Batch& DataLoader::Iterator::operator*() const {
  PRECIS_CHECK_T(StateError, !done(), "DataLoader::Iterator: dereferencing the end iterator");
  if (!run_->has_current) run_->take();
  return run_->current;
}

DataLoader::Iterator& DataLoader::Iterator::operator++() {
  PRECIS_CHECK_T(StateError, !done(), "DataLoader::Iterator: incrementing the end iterator");
  PRECIS_CHECK_T(StateError, run_->loader != nullptr, "DataLoader: the loader was destroyed while iterating it");
  if (!run_->has_current) run_->take();  // ++ without * still consumes the batch
  run_->has_current = false;
  run_->current = Batch();
  if (run_->next_take >= run_->size()) {
    if (run_->loader != nullptr) run_->loader->position_ = {run_->epoch + 1, 0};
    run_.reset();  // joins the workers now rather than when the loop variable dies
  }
  return *this;
}

}  // namespace precis::data
