#pragma once
// Per-sample random numbers for data pipelines. A SampleRng is a pure function of
// (seed, stream, epoch): the loader gives sample `index` of epoch `e` the stream
// SampleRng(seed, index, e), so an augmentation draws the same numbers whichever worker thread
// runs it and in whatever order. Built on Philox (core/rng.h): key = seed, counter =
// (stream, epoch, block), so streams never overlap and cost nothing to create.
#include <cstdint>
#include <vector>

namespace precis::data {

/// One sample's random stream (see the file comment). Cheap to create; not thread-safe (each
/// sample gets its own). Its numbers are not PyTorch's.
class SampleRng {
 public:
  /// The stream of `stream` (a sample index, or a reserved id) in `epoch` under `seed`.
  SampleRng(uint64_t seed, uint64_t stream, uint64_t epoch) : seed_(seed), stream_(stream), epoch_(epoch) {}

  /// 32 uniformly random bits.
  uint32_t next_u32();
  /// 64 uniformly random bits.
  uint64_t next_u64();
  /// Uniform double in [0, 1) (53 significant bits).
  double uniform();
  /// Uniform integer in [0, n); n >= 1 (unbiased: rejection sampling).
  int64_t randint(int64_t n);
  /// True with probability p.
  bool bernoulli(double p) { return uniform() < p; }

 private:
  void refill();

  uint64_t seed_;
  uint64_t stream_;
  uint64_t epoch_;
  uint32_t block_ = 0;
  uint32_t buffer_[4] = {};
  int used_ = 4;
};

/// Stream ids reserved for the loader itself (sample indices are < 2^62).
inline constexpr uint64_t kShuffleStream = ~uint64_t{0};
inline constexpr uint64_t kBatchOrderStream = ~uint64_t{0} - 1;

/// A seeded permutation of 0..n-1 (Fisher–Yates on a SampleRng), the same on every machine.
std::vector<int64_t> random_permutation(int64_t n, SampleRng& rng);

/// The order of 0..n-1 for one epoch: the permutation of the (seed, kShuffleStream, epoch) stream
/// when `shuffle`, else 0, 1, ..., n-1. The DataLoader and the token batcher share it, so the
/// same seed and epoch visit examples in the same order in both.
std::vector<int64_t> epoch_order(int64_t n, bool shuffle, uint64_t seed, int64_t epoch);

}  // namespace precis::data
