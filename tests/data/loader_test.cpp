// DataLoader: determinism across worker counts, shuffling, drop_last, the prefetch bound, early
// exit, worker exceptions and resuming from a saved position.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <thread>

#include "core/error.h"
#include "data/data_loader.h"
#include "tensor/factory.h"

using namespace precis;
using namespace precis::data;

namespace {

// Example i = {f32 [i, u] where u comes from the sample's random stream, i64 label i % 7}. Loads
// take a pseudo-random few hundred microseconds, so workers finish out of order.
class ProbeDataset : public Dataset {
 public:
  explicit ProbeDataset(int64_t n, int64_t fail_at = -1) : n_(n), fail_at_(fail_at) {}
  int64_t size() const override { return n_; }
  Example get(int64_t index) const override {
    SampleRng none(0, 0, 0);
    return sample(index, none);
  }
  Example sample(int64_t index, SampleRng& rng) const override {
    check_index("ProbeDataset", index, n_);
    int64_t seen = max_requested.load();
    while (index > seen && !max_requested.compare_exchange_weak(seen, index)) {}
    calls.fetch_add(1);
    if (index == fail_at_) throw ValueError("ProbeDataset: example " + std::to_string(index) + " is broken");
    std::this_thread::sleep_for(std::chrono::microseconds((index * 7919) % 300));
    return Example{from_vector<float>({static_cast<float>(index), static_cast<float>(rng.uniform())}, {2}),
                   scalar_tensor(index % 7, {.dtype = DType::i64})};
  }
  mutable std::atomic<int64_t> max_requested{-1};
  mutable std::atomic<int64_t> calls{0};

 private:
  int64_t n_;
  int64_t fail_at_;
};

struct Seen {
  std::vector<std::vector<int64_t>> indices;
  std::vector<std::vector<float>> values;
  std::vector<std::vector<int64_t>> labels;
  bool operator==(const Seen&) const = default;
};

Seen run_epochs(DataLoaderOptions opts, int64_t n, int64_t epochs) {
  DataLoader loader(std::make_shared<ProbeDataset>(n), opts);
  Seen seen;
  for (int64_t e = 0; e < epochs; ++e) {
    int64_t k = 0;
    for (Batch& b : loader.epoch(e)) {
      REQUIRE(b.epoch == e);
      REQUIRE(b.index == k++);
      seen.indices.push_back(b.indices);
      seen.values.push_back(b[0].to_vector<float>());
      seen.labels.push_back(b[1].to_vector<int64_t>());
    }
  }
  return seen;
}

}  // namespace

TEST_CASE("data loader: batches are identical for 0, 1, 2 and 4 workers", "[data]") {
  DataLoaderOptions opts{.batch_size = 5, .shuffle = true, .seed = 42};
  const Seen reference = run_epochs(opts, 53, 2);
  REQUIRE(reference.indices.size() == 2 * 11);
  for (int workers : {1, 2, 4}) {
    for (int prefetch : {0, 1, 7}) {
      opts.num_workers = workers;
      opts.prefetch = prefetch;
      INFO("workers " << workers << ", prefetch " << prefetch);
      REQUIRE(run_epochs(opts, 53, 2) == reference);
    }
  }
  // The random column is the sample's own stream, the first column its index.
  for (size_t b = 0; b < reference.indices.size(); ++b)
    for (size_t i = 0; i < reference.indices[b].size(); ++i) {
      REQUIRE(reference.values[b][2 * i] == static_cast<float>(reference.indices[b][i]));
      REQUIRE(reference.labels[b][i] == reference.indices[b][i] % 7);
    }
}

TEST_CASE("data loader: shuffle is a per-epoch permutation reproducible from the seed", "[data]") {
  auto ds = std::make_shared<ProbeDataset>(100);
  DataLoader a(ds, {.batch_size = 10, .shuffle = true, .seed = 7});
  DataLoader b(ds, {.batch_size = 10, .shuffle = true, .seed = 7});
  DataLoader c(ds, {.batch_size = 10, .shuffle = true, .seed = 8});
  DataLoader plain(ds, {.batch_size = 10});
  REQUIRE(a.batch_indices(0) == b.batch_indices(0));
  REQUIRE(a.batch_indices(3) == b.batch_indices(3));
  REQUIRE(a.batch_indices(0) != a.batch_indices(1));
  REQUIRE(a.batch_indices(0) != c.batch_indices(0));
  for (int64_t e : {0, 1, 5}) {
    std::vector<int64_t> all;
    for (const auto& batch : a.batch_indices(e)) all.insert(all.end(), batch.begin(), batch.end());
    std::vector<int64_t> sorted = all;
    std::sort(sorted.begin(), sorted.end());
    for (int64_t i = 0; i < 100; ++i) REQUIRE(sorted[static_cast<size_t>(i)] == i);
    REQUIRE(all != sorted);  // shuffled (probability of the identity: 1/100!)
  }
  // Without shuffle: in order, and the same every epoch.
  REQUIRE(plain.batch_indices(0) == plain.batch_indices(4));
  REQUIRE(plain.batch_indices(0)[1] == std::vector<int64_t>{10, 11, 12, 13, 14, 15, 16, 17, 18, 19});
  // Random draws of a sample differ between epochs.
  std::vector<float> u0, u1;
  for (Batch& batch : plain.epoch(0)) u0.push_back(batch[0].to_vector<float>()[1]);
  for (Batch& batch : plain.epoch(1)) u1.push_back(batch[0].to_vector<float>()[1]);
  REQUIRE(u0 != u1);
}

TEST_CASE("data loader: drop_last and the final partial batch", "[data]") {
  auto ds = std::make_shared<ProbeDataset>(10);
  DataLoader keep(ds, {.batch_size = 3});
  DataLoader drop(ds, {.batch_size = 3, .drop_last = true, .num_workers = 2});
  REQUIRE(keep.num_batches() == 4);
  REQUIRE(drop.num_batches() == 3);
  std::vector<int64_t> sizes;
  for (Batch& b : keep) sizes.push_back(b[0].size(0));
  REQUIRE(sizes == std::vector<int64_t>{3, 3, 3, 1});
  sizes.clear();
  for (Batch& b : drop) {
    sizes.push_back(b[0].size(0));
    REQUIRE(b[0].sizes() == Shape{3, 2});
    REQUIRE(b[1].sizes() == Shape{3});
    REQUIRE(b[1].dtype() == DType::i64);
  }
  REQUIRE(sizes == std::vector<int64_t>{3, 3, 3});
  REQUIRE(drop.position() == DataPosition{1, 0});
}

TEST_CASE("data loader: workers never run more than prefetch batches ahead", "[data]") {
  for (int prefetch : {1, 3}) {
    auto ds = std::make_shared<ProbeDataset>(40);
    DataLoader loader(ds, {.batch_size = 1, .num_workers = 4, .prefetch = prefetch});
    int64_t k = 0;
    for (Batch& b : loader) {
      REQUIRE(b.index == k);
      std::this_thread::sleep_for(std::chrono::milliseconds(2));  // let the workers run ahead
      INFO("prefetch " << prefetch << ", holding batch " << k);
      REQUIRE(ds->max_requested.load() <= k + prefetch);
      ++k;
    }
    REQUIRE(k == 40);
    REQUIRE(ds->calls.load() == 40);
  }
}

TEST_CASE("data loader: breaking out early stops the workers, and the loader can iterate again", "[data]") {
  auto ds = std::make_shared<ProbeDataset>(1000);
  DataLoader loader(ds, {.batch_size = 2, .num_workers = 4, .prefetch = 4});
  int n = 0;
  for (Batch& b : loader) {
    (void)b;
    if (++n == 3) break;
  }
  REQUIRE(loader.position() == DataPosition{0, 3});
  // The workers were joined: no more loads happen, and the loader resumes where it stopped.
  const int64_t calls = ds->calls.load();
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  REQUIRE(ds->calls.load() == calls);
  REQUIRE(calls <= 2 * (3 + 4));
  auto it = loader.begin();
  REQUIRE(it->index == 3);
  // One iteration at a time.
  REQUIRE_THROWS_AS(loader.begin(), StateError);
  REQUIRE_THROWS_AS(loader.set_position(0, 0), StateError);
}

TEST_CASE("data loader: destroying the loader mid-iteration joins its workers", "[data]") {
  auto ds = std::make_shared<ProbeDataset>(1000);
  auto loader = std::make_unique<DataLoader>(ds, DataLoaderOptions{.batch_size = 4, .num_workers = 3});
  auto it = loader->begin();
  REQUIRE(it->index == 0);
  loader.reset();
  const int64_t calls = ds->calls.load();
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  REQUIRE(ds->calls.load() == calls);
  REQUIRE_THROWS_AS(++it, StateError);
}

TEST_CASE("data loader: an exception while loading reaches the consumer at its batch", "[data]") {
  for (int workers : {0, 1, 3}) {
    INFO(workers << " workers");
    DataLoader loader(std::make_shared<ProbeDataset>(40, /*fail_at=*/17), {.batch_size = 4, .num_workers = workers});
    std::vector<int64_t> got;
    try {
      for (Batch& b : loader) got.push_back(b.index);
      FAIL("no exception");
    } catch (const ValueError& e) {
      REQUIRE_THAT(e.what(), Catch::Contains("example 17 is broken"));
    }
    REQUIRE(got == std::vector<int64_t>{0, 1, 2, 3});  // batch 4 holds example 17
    // The failure ended that iteration; the position still points at the failed batch, so the
    // next iteration retries it.
    REQUIRE(loader.position() == DataPosition{0, 4});
  }
}

TEST_CASE("data loader: resuming from a saved position gives the uninterrupted stream", "[data]") {
  const DataLoaderOptions opts{.batch_size = 6, .shuffle = true, .seed = 3, .num_workers = 2};
  const Seen full = run_epochs(opts, 50, 3);

  DataLoader first(std::make_shared<ProbeDataset>(50), opts);
  Seen seen;
  DataPosition saved;
  for (Batch& b : first.epoch(0)) {
    (void)b;
  }
  for (Batch& b : first) {  // epoch 1, interrupted after 4 batches
    seen.indices.push_back(b.indices);
    if (b.index == 3) break;
  }
  saved = first.position();
  REQUIRE(saved == DataPosition{1, 4});

  DataLoader resumed(std::make_shared<ProbeDataset>(50), {.batch_size = 6, .shuffle = true, .seed = 3, .num_workers = 3});
  resumed.set_position(saved.epoch, saved.batch);
  while (resumed.position().epoch < 3)
    for (Batch& b : resumed) {
      seen.indices.push_back(b.indices);
      seen.values.push_back(b[0].to_vector<float>());
    }
  const size_t per_epoch = full.indices.size() / 3;
  REQUIRE(seen.indices == std::vector<std::vector<int64_t>>(full.indices.begin() + static_cast<std::ptrdiff_t>(per_epoch),
                                                            full.indices.end()));
  REQUIRE(seen.values == std::vector<std::vector<float>>(full.values.begin() + static_cast<std::ptrdiff_t>(per_epoch + 4),
                                                         full.values.end()));
}

TEST_CASE("data loader: wait_fraction is a share and grows when loading is the bottleneck", "[data]") {
  auto ds = std::make_shared<ProbeDataset>(60);
  DataLoader loader(ds, {.batch_size = 3});
  for (Batch& b : loader) (void)b;
  // With no workers and no work between batches, the consumer does nothing but load.
  REQUIRE(loader.wait_fraction() > 0.5);
  REQUIRE(loader.wait_fraction() <= 1.0);
  REQUIRE(loader.wait_seconds() > 0.0);
}

TEST_CASE("data loader: custom batch sampler and collate", "[data]") {
  auto ds = std::make_shared<ProbeDataset>(10);
  DataLoader loader(ds, {.num_workers = 2,
                         .collate = [](std::vector<Example>& ex) {
                           return std::vector<Tensor>{scalar_tensor(static_cast<int64_t>(ex.size()), {.dtype = DType::i64})};
                         },
                         .batch_sampler = [](int64_t epoch) {
                           return std::vector<std::vector<int64_t>>{{9}, {0, 1, 2}, {static_cast<int64_t>(epoch)}};
                         }});
  std::vector<int64_t> sizes;
  for (Batch& b : loader.epoch(5)) sizes.push_back(b[0].item<int64_t>());
  REQUIRE(sizes == std::vector<int64_t>{1, 3, 1});
  REQUIRE(loader.batch_indices(5)[2] == std::vector<int64_t>{5});
  DataLoader bad(ds, {.batch_sampler = [](int64_t) { return std::vector<std::vector<int64_t>>{{10}}; }});
  REQUIRE_THROWS_AS(bad.begin(), IndexError);
}

TEST_CASE("data loader: TensorDataset and stack_examples", "[data]") {
  Tensor x = arange(24.0).reshape({6, 2, 2});
  Tensor y = arange(6.0, {.dtype = DType::i64});
  DataLoader loader(std::make_shared<TensorDataset>(std::vector<Tensor>{x, y}), {.batch_size = 4});
  auto it = loader.begin();
  REQUIRE(it->tensors[0].sizes() == Shape{4, 2, 2});
  REQUIRE(it->tensors[0].to_vector<float>()[15] == 15.0f);
  REQUIRE(it->tensors[1].to_vector<int64_t>() == std::vector<int64_t>{0, 1, 2, 3});
  ++it;
  REQUIRE(it->tensors[0].sizes() == Shape{2, 2, 2});

  std::vector<Example> mismatched = {Example{zeros({2})}, Example{zeros({3})}};
  REQUIRE_THROWS_AS(stack_examples(mismatched), ShapeError);
  std::vector<Example> mixed = {Example{zeros({2})}, Example{zeros({2}, {.dtype = DType::f64})}};
  REQUIRE_THROWS_AS(stack_examples(mixed), DTypeError);
  REQUIRE_THROWS_AS(TensorDataset({zeros({2}), zeros({3})}), ShapeError);
  REQUIRE_THROWS_AS(DataLoader(std::make_shared<TensorDataset>(std::vector<Tensor>{x}), {.batch_size = 0}), ValueError);
}
