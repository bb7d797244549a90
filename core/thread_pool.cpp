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

// ThreadSanitizer sees neither the fork nor the join of an OpenMP region: GNU libgomp is not
// built with it and wakes its threads through futexes, so every hand-over between the caller and
// the team would be reported as a race. Under TSan the two edges libgomp guarantees are declared:
// everything the caller did before the region happens before each thread's chunks (fork), and
// everything the threads did happens before the caller continues (join). Races between chunks
// stay visible. (libgomp's own memory is invisible to TSan either way: it is not instrumented.)
#if defined(__SANITIZE_THREAD__)
#define PRECIS_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define PRECIS_TSAN 1
#endif
#endif

#ifdef PRECIS_TSAN
extern "C" void __tsan_acquire(void* addr);
extern "C" void __tsan_release(void* addr);
void tsan_acquire(void* addr) { __tsan_acquire(addr); }
void tsan_release(void* addr) { __tsan_release(addr); }
#else
void tsan_acquire(void*) {}
void tsan_release(void*) {}
#endif

// The region in flight. Written by the caller, under region_mutex, before the fork; the team
// reads it through this global rather than through captured locals, because the compiler fills
// the block of captured locals after any code the caller could run before the fork, and a
// thread's first read of it would come before its fork edge.
struct Region {
  int64_t begin = 0;
  int64_t range = 0;
  int n_chunks = 0;
  const std::function<void(int64_t, int64_t)>* fn = nullptr;
  std::atomic<bool> failed{false};
  std::exception_ptr error;  // the first exception; written by whoever set `failed`
};
Region* g_region = nullptr;
char g_fork_edge, g_join_edge;  // addresses naming the two TSan edges

// One thread's share of the region in flight.
void region_body() {
  tsan_acquire(&g_fork_edge);
  Region& r = *g_region;
  t_in_region = true;
  // The runtime may give a smaller team than asked (OMP_DYNAMIC, OMP_THREAD_LIMIT): then a
  // thread runs several chunks, so every chunk still runs exactly once.
  const int team = omp_get_num_threads();
  for (int c = omp_get_thread_num(); c < r.n_chunks; c += team) {
    // Chunks differ in size by at most one item, so each holds >= range / n_chunks >= grain.
    const int64_t q = r.range / r.n_chunks;
    const int64_t rem = r.range % r.n_chunks;
    const int64_t b = r.begin + q * c + std::min<int64_t>(c, rem);
    const int64_t e = b + q + (c < rem ? 1 : 0);
    // After a failure the chunks not yet started are skipped, so the caller learns of the
    // error as soon as the chunks already running are done. An exception must not leave an
    // OpenMP region, so it is carried out by hand.
    if (r.failed.load(std::memory_order_relaxed)) break;
    try {
      (*r.fn)(b, e);
    } catch (...) {
      if (!r.failed.exchange(true, std::memory_order_relaxed)) r.error = std::current_exception();
    }
  }
  t_in_region = false;
  tsan_release(&g_join_edge);
}

// Runs fn over [begin, begin + range) split into n_chunks chunks (2 <= n_chunks) on an OpenMP
// team of n_chunks threads; the calling thread is thread 0 and runs chunk 0. The caller holds
// region_mutex.
void run_region(int64_t begin, int64_t range, int n_chunks,
                const std::function<void(int64_t, int64_t)>& fn) {
  Region region;
  region.begin = begin;
  region.range = range;
  region.n_chunks = n_chunks;
  region.fn = &fn;
  g_region = &region;
  tsan_release(&g_fork_edge);
  // No locals inside the region: see Region.
#pragma omp parallel num_threads(n_chunks)
  region_body();
  tsan_acquire(&g_join_edge);
  g_region = nullptr;
  // The region's implicit barrier has made `error` visible here.
  if (region.failed.load(std::memory_order_relaxed)) std::rethrow_exception(region.error);
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
