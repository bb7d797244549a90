// The intra-op thread pool, run on the OpenMP runtime.
//
// oneDNN (Debian's libdnnl is built with DNNL_CPU_RUNTIME=OMP) runs its GEMMs and convolutions on
// GNU OpenMP's thread team. precis's element-wise and reduction kernels used to run on a pool of
// their own; on a 2-core machine the two sets of workers then fought over the cores after every
// switch between a oneDNN call and an element-wise op (libgomp's workers spin before they sleep,
// so the next op's workers found the cores busy). Running parallel_for as an OpenMP parallel
// region puts both on one team: the thread that just finished a convolution picks up the next
// add, and the wait policy (OMP_WAIT_POLICY, GOMP_SPINCOUNT) is one knob for everything.
//
// One region runs at a time. A second host thread that calls parallel_for while a region is in
// flight (a data-loader worker, say) runs its range inline rather than starting a second team of
// threads on cores that are already busy.
#include "core/thread_pool.h"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <exception>
#include <mutex>

#include "core/error.h"

namespace precis {

namespace {

constexpr int kMaxThreads = 4096;

thread_local bool t_in_region = false;

int default_num_threads() {
  if (const char* env = std::getenv("PRECIS_NUM_THREADS"); env != nullptr && *env != '\0') {
    char* end = nullptr;
    const long n = std::strtol(env, &end, 10);
    PRECIS_CHECK(*end == '\0' && n >= 1 && n <= kMaxThreads, "PRECIS_NUM_THREADS='", env,
                 "' is not an integer in [1, ", kMaxThreads, "]");
    return static_cast<int>(n);
  }
  // OpenMP's default team size: OMP_NUM_THREADS when set (as PyTorch honours it), else the CPUs
  // this process may run on (its affinity mask, so `taskset -c 0` means one thread).
  return std::clamp(omp_get_max_threads(), 1, kMaxThreads);
}

std::atomic<int>& thread_count() {
  static std::atomic<int> n{default_num_threads()};
  return n;
}

std::mutex& region_mutex() {
  static std::mutex m;  // held by the host thread whose region is in flight
  return m;
}

// Runs fn over [begin, begin + range) split into n_chunks chunks (2 <= n_chunks) on an OpenMP
// team of n_chunks threads; the calling thread is thread 0 and runs chunk 0.
void run_region(int64_t begin, int64_t range, int n_chunks,
                const std::function<void(int64_t, int64_t)>& fn) {
  std::atomic<bool> failed{false};
  std::exception_ptr error;  // the first exception; written by whoever set `failed`
#pragma omp parallel num_threads(n_chunks)
  {
    t_in_region = true;
    // The runtime may give a smaller team than asked (OMP_DYNAMIC, OMP_THREAD_LIMIT): then a
    // thread runs several chunks, so every chunk still runs exactly once.
    const int team = omp_get_num_threads();
    for (int c = omp_get_thread_num(); c < n_chunks; c += team) {
      // Chunks differ in size by at most one item, so each holds >= range / n_chunks >= grain.
      const int64_t q = range / n_chunks;
      const int64_t r = range % n_chunks;
      const int64_t b = begin + q * c + std::min<int64_t>(c, r);
      const int64_t e = b + q + (c < r ? 1 : 0);
      // After a failure the chunks not yet started are skipped, so the caller learns of the
      // error as soon as the chunks already running are done. An exception must not leave an
      // OpenMP region, so it is carried out by hand.
      if (failed.load(std::memory_order_relaxed)) break;
      try {
        fn(b, e);
      } catch (...) {
        if (!failed.exchange(true, std::memory_order_relaxed)) error = std::current_exception();
      }
    }
    t_in_region = false;
  }
  // The region's implicit barrier has made `error` visible here.
  if (failed.load(std::memory_order_relaxed)) std::rethrow_exception(error);
}

}  // namespace

int get_num_threads() { return thread_count().load(std::memory_order_relaxed); }

void set_num_threads(int n) {
  PRECIS_CHECK(n >= 1 && n <= kMaxThreads, "set_num_threads(", n, "): expected a thread count in [1, ",
               kMaxThreads, "]");
  thread_count().store(n, std::memory_order_relaxed);
}

bool in_parallel_region() { return t_in_region; }

void parallel_for(int64_t begin, int64_t end, int64_t grain,
                  const std::function<void(int64_t, int64_t)>& fn) {
  if (end <= begin) return;
  const int64_t range = end - begin;
  grain = std::max<int64_t>(grain, 1);
  const int64_t n_chunks = std::min<int64_t>(get_num_threads(), range / grain);
  if (n_chunks <= 1 || t_in_region) {
    fn(begin, end);
    return;
  }
  std::unique_lock<std::mutex> lock(region_mutex(), std::try_to_lock);
  if (!lock.owns_lock()) {
    fn(begin, end);
    return;
  }
  run_region(begin, range, static_cast<int>(n_chunks), fn);
}

}  // namespace precis
