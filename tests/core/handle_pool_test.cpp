// HandlePool (core/cuda/handle_pool.h), which gives every host thread its own cuDNN / cuBLAS /
// cuBLASLt handle per device, with integers for handles: no GPU needed.
#include <catch2/catch.hpp>

#include <atomic>
#include <barrier>
#include <set>
#include <stdexcept>
#include <thread>
#include <vector>

#include "core/cuda/handle_pool.h"

using precis::cuda::HandlePool;

// Pools outlive every thread that used them (the main thread's lease returns its handles at
// exit), as the backend's static pools do: each test's pool is a static pointer, never deleted
// (and so not a leak to LeakSanitizer).

TEST_CASE("handle pool: one handle per thread and device, the same on every call", "[core]") {
  static std::atomic<int> next{1};
  static HandlePool<int>* const pool_ptr = new HandlePool<int>([](int device) { return device * 1000 + next++; });
  HandlePool<int>& pool = *pool_ptr;
  const int a0 = pool.get(0);
  CHECK(pool.get(0) == a0);
  const int a1 = pool.get(1);
  CHECK(a1 != a0);
  CHECK(a1 / 1000 == 1);  // created for device 1
  CHECK(pool.get(1) == a1);
  CHECK(pool.created() == 2);
}

TEST_CASE("handle pool: threads running at once never share a handle", "[core]") {
  static std::atomic<int> next{1};
  static HandlePool<int>* const pool_ptr = new HandlePool<int>([](int device) { return device * 1000 + next++; });
  HandlePool<int>& pool = *pool_ptr;
  constexpr int kThreads = 6;
  std::vector<int> got(kThreads, -1), again(kThreads, -2);
  std::barrier sync(kThreads);
  {
    std::vector<std::jthread> threads;
    for (int i = 0; i < kThreads; ++i)
      threads.emplace_back([&, i] {  // no Catch2 assertions here: they are not thread-safe
        got[static_cast<size_t>(i)] = pool.get(0);
        sync.arrive_and_wait();  // every thread holds its handle now
        again[static_cast<size_t>(i)] = pool.get(0);
      });
  }
  CHECK(again == got);
  CHECK(std::set<int>(got.begin(), got.end()).size() == static_cast<size_t>(kThreads));
  CHECK(pool.created() == kThreads);
  CHECK(pool.idle(0) == kThreads);  // returned when the threads ended
}

TEST_CASE("handle pool: a thread that ends gives its handle to the next thread", "[core]") {
  static std::atomic<int> next{1};
  static HandlePool<int>* const pool_ptr = new HandlePool<int>([](int device) { return device * 1000 + next++; });
  HandlePool<int>& pool = *pool_ptr;
  int first = -1, second = -1;
  std::thread([&] { first = pool.get(2); }).join();
  CHECK(pool.idle(2) == 1);
  std::thread([&] { second = pool.get(2); }).join();
  CHECK(second == first);
  CHECK(pool.created() == 1);
  CHECK(pool.idle(0) == 0);
}

TEST_CASE("handle pool: a failed creation keeps nothing and the next call tries again", "[core]") {
  static int calls = 0;
  static HandlePool<int>* const pool_ptr = new HandlePool<int>([](int) {
    if (++calls == 1) throw std::runtime_error("cudnnCreate failed");
    return 7;
  });
  HandlePool<int>& pool = *pool_ptr;
  bool threw = false;
  size_t created_after_throw = 99;
  int got = -1;
  std::thread([&] {
    try {
      (void)pool.get(0);
    } catch (const std::runtime_error&) {
      threw = true;
    }
    created_after_throw = pool.created();
    got = pool.get(0);
  }).join();
  CHECK(threw);
  CHECK(created_after_throw == 0);
  CHECK(got == 7);
  CHECK(pool.created() == 1);
}
