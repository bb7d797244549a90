#include "data/sample_rng.h"

#include <numeric>

#include "core/error.h"
#include "core/rng.h"

namespace precis::data {

void SampleRng::refill() {
  // The 32-bit block counter allows 2^34 draws per stream: far beyond any one sample's needs.
  const auto out = philox4x32({static_cast<uint32_t>(stream_), static_cast<uint32_t>(stream_ >> 32),
                               static_cast<uint32_t>(epoch_), block_++},
                              seed_ ^ (epoch_ >> 32) * 0x9E3779B97F4A7C15ULL);
  for (int i = 0; i < 4; ++i) buffer_[i] = out[i];
  used_ = 0;
}

uint32_t SampleRng::next_u32() {
  if (used_ == 4) refill();
  return buffer_[used_++];
}

uint64_t SampleRng::next_u64() {
  const uint64_t hi = next_u32();
  return (hi << 32) | next_u32();
}

double SampleRng::uniform() { return static_cast<double>(next_u64() >> 11) * 0x1.0p-53; }

int64_t SampleRng::randint(int64_t n) {
  PRECIS_CHECK(n >= 1, "SampleRng::randint: n must be >= 1, got ", n);
  const auto range = static_cast<uint64_t>(n);
  // Reject the top partial copy of [0, range) so every value is equally likely.
  const uint64_t limit = ~uint64_t{0} - (~uint64_t{0} % range + 1) % range;
  uint64_t x;
  do {
    x = next_u64();
  } while (x > limit);
  return static_cast<int64_t>(x % range);
}

std::vector<int64_t> random_permutation(int64_t n, SampleRng& rng) {
  std::vector<int64_t> perm(static_cast<size_t>(n));
  std::iota(perm.begin(), perm.end(), int64_t{0});
  for (int64_t i = n - 1; i > 0; --i) std::swap(perm[i], perm[rng.randint(i + 1)]);
  return perm;
}

std::vector<int64_t> epoch_order(int64_t n, bool shuffle, uint64_t seed, int64_t epoch) {
  if (shuffle) {
    SampleRng rng(seed, kShuffleStream, static_cast<uint64_t>(epoch));
    return random_permutation(n, rng);
  }
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), int64_t{0});
  return order;
}

}  // namespace precis::data
