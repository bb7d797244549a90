#pragma once
// Sharding a data set's batches over the ranks of a data-parallel job.
//
//   data::DataLoaderOptions g;  g.batch_size = B * world; g.shuffle = true; g.seed = seed;
//   data::DataLoader global_view(ds, g);                      // the global batches (not iterated)
//   data::DataLoaderOptions o = g;
//   o.batch_sampler = dist::distributed_batch_sampler(
//       [&](int64_t e) { return global_view.batch_indices(e); }, pg->rank(), pg->size());
//   data::DataLoader loader(ds, o);                           // this rank's shares
//
// Global batch i (the same for every world size: it depends on the seed and epoch only) is cut
// into world_size equal contiguous shares; rank r gets share r. So one process with
// --accum world_size over batches of B sees the same micro-batches, in the same order, that the
// ranks see in parallel. Same type as data::BatchSampler (dist/ does not depend on data/).
#include <cstdint>
#include <functional>
#include <vector>

namespace precis::dist {

using BatchLists = std::vector<std::vector<int64_t>>;

/// Rank `rank`'s share of each of `global`'s batches: a batch of n examples is cut to the largest
/// multiple of world_size not above n (so every rank gets an equal share and issues the same number
/// of steps), then rank r takes the r-th of world_size equal contiguous parts. A batch with fewer
/// than world_size examples is dropped for every rank. ValueError for rank outside
/// [0, world_size) or world_size < 1.
std::function<BatchLists(int64_t epoch)> distributed_batch_sampler(std::function<BatchLists(int64_t epoch)> global,
                                                                   int rank, int world_size);

/// The share itself, for one epoch's global batch lists.
BatchLists shard_batches(const BatchLists& global, int rank, int world_size);

}  // namespace precis::dist
