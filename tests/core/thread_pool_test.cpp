#include <catch2/catch.hpp>

#include <atomic>
#include <cstdlib>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>
#include <vector>

#include "core/error.h"
#include "core/thread_pool.h"

using namespace precis;

namespace {
// Restores the thread count a test changed.
struct ThreadsGuard {
  int saved = get_num_threads();
  ~ThreadsGuard() { set_num_threads(saved); }
};
}  // namespace

TEST_CASE("parallel_for covers every index exactly once", "[core][thread_pool]") {
  ThreadsGuard guard;
  for (int threads : {1, 2, 3, 4}) {
    set_num_threads(threads);
    for (int64_t n : {0, 1, 2, 7, 100, 1001, 100000}) {
      for (int64_t grain : {1, 3, 64, 5000}) {
        std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
        std::atomic<int> calls{0};
        std::atomic<int> empty_chunks{0};
        // Catch2 assertions are not thread-safe: chunks only count, the caller checks.
        parallel_for(10, 10 + n, grain, [&](int64_t b, int64_t e) {
          ++calls;
          if (b >= e) ++empty_chunks;
          for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i - 10)]++;
        });
        INFO("threads " << threads << " n " << n << " grain " << grain);
        for (int64_t i = 0; i < n; ++i) REQUIRE(hits[static_cast<size_t>(i)] == 1);
        REQUIRE(empty_chunks == 0);
        REQUIRE(calls <= threads);
        if (n == 0) REQUIRE(calls == 0);
      }
    }
  }
}

TEST_CASE("parallel_for respects the grain and runs small ranges inline", "[core][thread_pool]") {
  ThreadsGuard guard;
  set_num_threads(4);
  const auto caller = std::this_thread::get_id();
  std::mutex m;
  std::vector<std::pair<int64_t, int64_t>> chunks;
  std::set<std::thread::id> ids;
  auto record = [&](int64_t b, int64_t e) {
    std::lock_guard<std::mutex> lock(m);
    chunks.emplace_back(b, e);
    ids.insert(std::this_thread::get_id());
  };

  parallel_for(0, 99, 100, record);  // smaller than the grain: one inline call
  REQUIRE(chunks.size() == 1);
  REQUIRE(chunks[0] == std::make_pair(int64_t{0}, int64_t{99}));
  REQUIRE(ids == std::set<std::thread::id>{caller});

  chunks.clear();
  ids.clear();
  parallel_for(0, 1000, 300, record);  // 3 chunks of >= 300
  REQUIRE(chunks.size() == 3);
  for (auto [b, e] : chunks) REQUIRE(e - b >= 300);
  REQUIRE(ids.count(caller) == 1);  // the caller works too

  chunks.clear();
  parallel_for(0, 1000, 1, record);  // never more chunks than threads
  REQUIRE(chunks.size() == 4);
}

TEST_CASE("nested parallel_for runs inline in the calling thread", "[core][thread_pool]") {
  ThreadsGuard guard;
  set_num_threads(3);
  REQUIRE_FALSE(in_parallel_region());
  std::atomic<int> bad{0};
  std::atomic<int64_t> total{0};
  parallel_for(0, 3, 1, [&](int64_t b, int64_t e) {
    if (!in_parallel_region()) ++bad;
    const auto outer = std::this_thread::get_id();
    int inner_calls = 0;
    parallel_for(0, 1000, 1, [&](int64_t ib, int64_t ie) {
      ++inner_calls;
      if (std::this_thread::get_id() != outer || ib != 0 || ie != 1000) ++bad;
      total += ie - ib;
    });
    if (inner_calls != 1) ++bad;
  });
  REQUIRE(bad == 0);
  REQUIRE(total == 3000);
  REQUIRE_FALSE(in_parallel_region());
}

TEST_CASE("parallel_for re-throws the first exception after all chunks finish", "[core][thread_pool]") {
  ThreadsGuard guard;
  set_num_threads(4);
  std::atomic<int> running{0};
  std::atomic<int> max_after{0};
  REQUIRE_THROWS_AS(parallel_for(0, 4, 1,
                                 [&](int64_t b, int64_t) {
                                   ++running;
                                   if (b == 2) throw ShapeError("chunk 2 failed");
                                   std::this_thread::sleep_for(std::chrono::milliseconds(5));
                                   --running;
                                 }),
                    ShapeError);
  // Every chunk that started has finished (the throwing one never decrements).
  REQUIRE(running == 1);
  // The pool is usable afterwards.
  std::atomic<int64_t> sum{0};
  parallel_for(0, 1000, 1, [&](int64_t b, int64_t e) { sum += e - b; });
  REQUIRE(sum == 1000);
  // And an exception on the caller's own chunk propagates too.
  REQUIRE_THROWS_WITH(parallel_for(0, 100, 1,
                                   [&](int64_t b, int64_t) {
                                     if (b == 0) throw ValueError("first chunk");
                                   }),
                      "first chunk");
}

TEST_CASE("set_num_threads validates and resizes", "[core][thread_pool]") {
  ThreadsGuard guard;
  REQUIRE(get_num_threads() >= 1);
  REQUIRE_THROWS_AS(set_num_threads(0), ValueError);
  REQUIRE_THROWS_AS(set_num_threads(-3), ValueError);
  for (int n : {1, 5, 2}) {
    set_num_threads(n);
    REQUIRE(get_num_threads() == n);
    std::mutex m;
    std::set<std::thread::id> ids;
    std::atomic<int> chunks{0};
    // Chunks that wait for each other prove n threads really run at once.
    std::atomic<int> arrived{0};
    parallel_for(0, n, 1, [&](int64_t, int64_t) {
      ++chunks;
      ++arrived;
      while (arrived < n) std::this_thread::yield();
      std::lock_guard<std::mutex> lock(m);
      ids.insert(std::this_thread::get_id());
    });
    REQUIRE(chunks == n);
    REQUIRE(static_cast<int>(ids.size()) == n);
  }
}

TEST_CASE("parallel_for from several threads at once", "[core][thread_pool]") {
  ThreadsGuard guard;
  set_num_threads(2);
  std::atomic<int64_t> total{0};
  std::vector<std::thread> callers;
  for (int t = 0; t < 4; ++t)
    callers.emplace_back([&] {
      for (int i = 0; i < 200; ++i)
        parallel_for(0, 1000, 10, [&](int64_t b, int64_t e) { total += e - b; });
    });
  for (auto& c : callers) c.join();
  REQUIRE(total == 4 * 200 * 1000);
}

// Hidden from discovery ([.]): tests/CMakeLists.txt runs it with OMP_NUM_THREADS=3 and without
// PRECIS_NUM_THREADS, the one environment in which it means something.
TEST_CASE("the default thread count is OMP_NUM_THREADS", "[.][core][thread_pool][env]") {
  const char* omp = std::getenv("OMP_NUM_THREADS");
  REQUIRE(omp != nullptr);
  REQUIRE(std::getenv("PRECIS_NUM_THREADS") == nullptr);
  REQUIRE(get_num_threads() == std::atoi(omp));
}
