// distributed_batch_sampler: equal shares, the global batches independent of the world size, and
// the shares concatenated in rank order give back the global batch (the --accum equivalence).
#include <catch2/catch.hpp>

#include <algorithm>
#include <numeric>

#include "core/error.h"
#include "dist/sampler.h"

using namespace precis;

namespace {
// A shuffled epoch of 50 examples in global batches of 12 (the last has 2), from (seed, epoch).
dist::BatchLists global_batches(int64_t epoch) {
  std::vector<int64_t> perm(50);
  std::iota(perm.begin(), perm.end(), 0);
  uint64_t s = 1234 + static_cast<uint64_t>(epoch) * 77;
  for (size_t i = perm.size() - 1; i > 0; --i) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    std::swap(perm[i], perm[(s >> 33) % (i + 1)]);
  }
  dist::BatchLists out;
  for (size_t i = 0; i < perm.size(); i += 12)
    out.emplace_back(perm.begin() + static_cast<std::ptrdiff_t>(i),
                     perm.begin() + static_cast<std::ptrdiff_t>(std::min(perm.size(), i + 12)));
  return out;
}
}  // namespace

TEST_CASE("dist sampler: every rank an equal share; shares in rank order rebuild each global batch", "[dist][sampler]") {
  for (int world : {1, 2, 3, 4, 5}) {
    INFO("world size " << world);
    std::vector<dist::BatchLists> per_rank;
    for (int r = 0; r < world; ++r) per_rank.push_back(dist::distributed_batch_sampler(global_batches, r, world)(3));
    const auto global = global_batches(3);
    for (int r = 1; r < world; ++r) {
      REQUIRE(per_rank[r].size() == per_rank[0].size());
      for (size_t b = 0; b < per_rank[0].size(); ++b) CHECK(per_rank[r][b].size() == per_rank[0][b].size());
    }
    size_t kept = 0;
    for (const auto& batch : global) {
      const size_t share = batch.size() / static_cast<size_t>(world);
      if (share == 0) continue;  // fewer examples than ranks: dropped everywhere
      std::vector<int64_t> joined;
      for (int r = 0; r < world; ++r) joined.insert(joined.end(), per_rank[r][kept].begin(), per_rank[r][kept].end());
      CHECK(joined == std::vector<int64_t>(batch.begin(), batch.begin() + static_cast<std::ptrdiff_t>(share * world)));
      ++kept;
    }
    CHECK(per_rank[0].size() == kept);
  }
  // The same seed and epoch give the same order; another epoch another.
  CHECK(dist::distributed_batch_sampler(global_batches, 1, 2)(0) == dist::distributed_batch_sampler(global_batches, 1, 2)(0));
  CHECK(dist::distributed_batch_sampler(global_batches, 1, 2)(0) != dist::distributed_batch_sampler(global_batches, 1, 2)(1));
}

TEST_CASE("dist sampler: bad rank or world size are errors at construction", "[dist][sampler]") {
  CHECK_THROWS_AS(dist::distributed_batch_sampler(global_batches, 2, 2), IndexError);
  CHECK_THROWS_AS(dist::distributed_batch_sampler(global_batches, -1, 2), IndexError);
  CHECK_THROWS_AS(dist::distributed_batch_sampler(global_batches, 0, 0), ValueError);
  CHECK_THROWS_AS(dist::distributed_batch_sampler(nullptr, 0, 1), ValueError);
}
