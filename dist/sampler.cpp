// distributed_batch_sampler: equal contiguous shares of each global batch.
#include "dist/sampler.h"

#include "core/error.h"

namespace precis::dist {

BatchLists shard_batches(const BatchLists& global, int rank, int world_size) {
  PRECIS_CHECK(world_size >= 1, "dist::distributed_batch_sampler: world_size must be >= 1, got ", world_size);
  PRECIS_CHECK_INDEX(rank >= 0 && rank < world_size, "dist::distributed_batch_sampler: rank ", rank,
                     " is outside [0, ", world_size, ")");
  BatchLists out;
  out.reserve(global.size());
  for (const auto& batch : global) {
    const size_t share = batch.size() / static_cast<size_t>(world_size);
    if (share == 0) continue;
    const auto begin = batch.begin() + static_cast<std::ptrdiff_t>(share * static_cast<size_t>(rank));
    out.emplace_back(begin, begin + static_cast<std::ptrdiff_t>(share));
  }
  return out;
}

std::function<BatchLists(int64_t epoch)> distributed_batch_sampler(std::function<BatchLists(int64_t epoch)> global,
                                                                   int rank, int world_size) {
  PRECIS_CHECK(global != nullptr, "dist::distributed_batch_sampler: the global sampler is empty");
  shard_batches({}, rank, world_size);  // checks rank and world_size now, not at the first epoch
  return [global = std::move(global), rank, world_size](int64_t epoch) {
    return shard_batches(global(epoch), rank, world_size);
  };
}

}  // namespace precis::dist
