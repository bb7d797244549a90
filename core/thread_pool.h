#pragma once
// The intra-op thread pool. Kernels split their work with parallel_for; the pool's size is
// set_num_threads (default: the number of hardware threads). Nested parallel_for calls run
// serially in the calling worker.
#include <cstdint>
#include <functional>

namespace precis {

/// Number of threads parallel_for uses (>= 1).
int get_num_threads();
/// Sets the intra-op thread count; n >= 1. Takes effect for the next parallel_for.
void set_num_threads(int n);
/// True while running inside a parallel_for body.
bool in_parallel_region();

/// Calls fn(b, e) over disjoint chunks that cover [begin, end). Chunks hold at least `grain`
/// items, so ranges smaller than `grain` run inline on the caller. Exceptions thrown by fn are
/// re-thrown on the caller after all chunks finish.
void parallel_for(int64_t begin, int64_t end, int64_t grain,
                  const std::function<void(int64_t, int64_t)>& fn);

}  // namespace precis
