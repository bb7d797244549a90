// The intra-op thread pool.
//
// parallel_for runs for every element-wise op, so a region must cost little: nothing is allocated
// per call, the job lives in the pool's own fields, workers claim chunks with one CAS each and wait
// on futexes (std::atomic::wait) after a short spin, and the caller works on chunk 0 itself instead
// of only waiting.
//
// One region runs at a time. A second thread that calls parallel_for while a region is in flight
// runs its range inline rather than queueing: the workers are busy anyway, and waiting could
// deadlock if the region's body were waiting on that thread.
//
// Chunk claims are packed into one 64-bit word: (generation << 32) | (num_chunks << 16) | next.
// The generation makes a late worker's stale compare-exchange fail once a new region has been
// published, so it can never run a chunk of the new region with the old region's bounds.
#include "core/thread_pool.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"

namespace precis {

namespace {

constexpr int kMaxThreads = 4096;  // chunk indices must fit in 16 bits
// Spin iterations before blocking on a futex. Back-to-back ops issue regions microseconds apart,
// and a futex wake-up costs tens of microseconds on the VMs here; a longer spin would steal the
// second vCPU from other work (MACHINE.md: it is shared).
constexpr int kSpinIterations = 2000;

thread_local bool t_in_region = false;

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

int default_num_threads() {
  if (const char* env = std::getenv("PRECIS_NUM_THREADS"); env != nullptr && *env != '\0') {
    char* end = nullptr;
    const long n = std::strtol(env, &end, 10);
    PRECIS_CHECK(*end == '\0' && n >= 1 && n <= kMaxThreads, "PRECIS_NUM_THREADS='", env,
                 "' is not an integer in [1, ", kMaxThreads, "]");
    return static_cast<int>(n);
  }
  const unsigned hw = std::thread::hardware_concurrency();
  return hw == 0 ? 1 : static_cast<int>(std::min<unsigned>(hw, kMaxThreads));
}

std::atomic<int>& thread_count() {
  static std::atomic<int> n{default_num_threads()};
  return n;
}

class ThreadPool {
 public:
  // Runs fn over [begin, begin + range) in n_chunks chunks (2 <= n_chunks <= num_threads).
  // Returns false, having run nothing, when another thread's region is in flight.
  bool run(int64_t begin, int64_t range, int n_chunks,
           const std::function<void(int64_t, int64_t)>& fn) {
    std::unique_lock<std::mutex> lock(busy_, std::try_to_lock);
    if (!lock.owns_lock()) return false;
    const int want_workers = thread_count().load(std::memory_order_relaxed) - 1;
    if (static_cast<int>(workers_.size()) != want_workers) resize(want_workers);

    fn_ = &fn;
    begin_ = begin;
    range_ = range;
    n_chunks_ = n_chunks;
    failed_.store(false, std::memory_order_relaxed);
    error_ = nullptr;
    remaining_.store(n_chunks, std::memory_order_relaxed);
    ++generation_;
    // Chunk 0 is the caller's, so claims start at 1. The release publishes the fields above.
    claim_.store((uint64_t{generation_} << 32) | (static_cast<uint64_t>(n_chunks) << 16) | 1u,
                 std::memory_order_release);
    epoch_.fetch_add(1, std::memory_order_release);
    epoch_.notify_all();

    t_in_region = true;
    run_chunk(0);
    while (claim_and_run()) {
    }
    t_in_region = false;

    for (int i = 0; i < kSpinIterations && remaining_.load(std::memory_order_acquire) != 0; ++i)
      cpu_relax();
    for (int r; (r = remaining_.load(std::memory_order_acquire)) != 0;)
      remaining_.wait(r, std::memory_order_acquire);

    if (failed_.load(std::memory_order_relaxed)) {
      std::exception_ptr e = std::move(error_);
      error_ = nullptr;
      std::rethrow_exception(e);
    }
    return true;
  }

 private:
  // Claims the next chunk of the current region and runs it; false when none is left.
  bool claim_and_run() {
    uint64_t v = claim_.load(std::memory_order_acquire);
    for (;;) {
      const uint32_t next = v & 0xffffu;
      const uint32_t n = (v >> 16) & 0xffffu;
      if (next >= n) return false;
      if (claim_.compare_exchange_weak(v, v + 1, std::memory_order_acq_rel,
                                       std::memory_order_acquire)) {
        run_chunk(static_cast<int>(next));
        return true;
      }
    }
  }

  // Runs chunk c of the current region. Chunks differ in size by at most one item, so each holds
  // at least range / n_chunks >= grain items.
  void run_chunk(int c) {
    const int64_t q = range_ / n_chunks_;
    const int64_t r = range_ % n_chunks_;
    const int64_t b = begin_ + q * c + std::min<int64_t>(c, r);
    const int64_t e = b + q + (c < r ? 1 : 0);
    // After a failure the remaining chunks are skipped (but still counted), so the caller learns
    // of the error as soon as the chunks already running are done.
    if (!failed_.load(std::memory_order_relaxed)) {
      try {
        (*fn_)(b, e);
      } catch (...) {
        if (!failed_.exchange(true, std::memory_order_relaxed)) error_ = std::current_exception();
      }
    }
    if (remaining_.fetch_sub(1, std::memory_order_acq_rel) == 1) remaining_.notify_all();
  }

  void worker_loop() {
    t_in_region = true;  // everything a worker runs is inside a region
    for (;;) {
      // Read the epoch before looking for work, so a region published in between is not missed.
      const uint32_t seen = epoch_.load(std::memory_order_acquire);
      if (stop_.load(std::memory_order_acquire)) return;
      while (claim_and_run()) {
      }
      bool woke = false;
      for (int i = 0; i < kSpinIterations; ++i) {
        if (epoch_.load(std::memory_order_acquire) != seen) {
          woke = true;
          break;
        }
        cpu_relax();
      }
      if (!woke) epoch_.wait(seen, std::memory_order_acquire);
    }
  }

  // Called with busy_ held and no region in flight.
  void resize(int n_workers) {
    if (!workers_.empty()) {
      stop_.store(true, std::memory_order_release);
      epoch_.fetch_add(1, std::memory_order_release);
      epoch_.notify_all();
      for (std::thread& t : workers_) t.join();
      workers_.clear();
      stop_.store(false, std::memory_order_relaxed);
    }
    workers_.reserve(static_cast<size_t>(n_workers));
    for (int i = 0; i < n_workers; ++i) workers_.emplace_back([this] { worker_loop(); });
  }

  std::mutex busy_;  // held by the thread whose region is in flight
  std::vector<std::thread> workers_;
  std::atomic<uint32_t> epoch_{0};  // bumped to wake workers
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> claim_{0};
  std::atomic<int> remaining_{0};  // chunks of the current region not yet finished
  std::atomic<bool> failed_{false};
  std::exception_ptr error_;  // the first exception; written by whoever set failed_
  uint32_t generation_ = 0;
  // The current region, written by its caller before claim_ is published.
  const std::function<void(int64_t, int64_t)>* fn_ = nullptr;
  int64_t begin_ = 0;
  int64_t range_ = 0;
  int n_chunks_ = 1;
};

ThreadPool& pool() {
  // Leaked on purpose: static destructors of other objects may still run ops, and joining
  // threads during exit is a classic source of hangs.
  static ThreadPool* const p = new ThreadPool();
  return *p;
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
  if (n_chunks <= 1 || t_in_region || !pool().run(begin, range, static_cast<int>(n_chunks), fn))
    fn(begin, end);
}

}  // namespace precis
