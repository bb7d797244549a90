#pragma once
// The intra-op thread pool. Kernels split their work with parallel_for; the pool's size is
// set_num_threads (default: $PRECIS_NUM_THREADS, else $OMP_NUM_THREADS, else the CPUs the
// process may run on). Nested parallel_for calls run serially in the calling worker.
#include <cstdint>
#include <functional>

namespace precis {

/// Number of threads parallel_for uses (>= 1).
int get_num_threads();
/// Sets the intra-op thread count; n >= 1. Takes effect for the next parallel_for.
void set_num_threads(int n);
/// True while running inside the body of a parallel_for that was split over the pool (on a worker
/// or on the caller). A parallel_for that ran inline because its range was small or the pool had
/// one thread does not count, so its body may still parallelise inner loops.
bool in_parallel_region();

/// Calls fn(b, e) over disjoint chunks that cover [begin, end) (nothing when end <= begin). It
/// uses at most get_num_threads() chunks of at least `grain` items (grain < 1 counts as 1); the
/// caller runs one chunk itself. It runs fn(begin, end) inline when the range is smaller than
/// 2 * grain, with one thread, inside another region (nested), or while another thread's region
/// is in flight. The first exception thrown by fn is re-thrown on the caller once every chunk has
/// finished; chunks not yet started when it was thrown are skipped.
void parallel_for(int64_t begin, int64_t end, int64_t grain,
                  const std::function<void(int64_t, int64_t)>& fn);

}  // namespace precis
