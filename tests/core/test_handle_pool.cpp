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

namespace {

// Pools outlive every thread that used them (the main thread's lease returns its handles at
// exit), as the backend's static pools do: these are never destroyed.
HandlePool<int>& make_pool(std::atomic<int>& next) {
  return *new HandlePool<int>([&next](int device) { return device * 1000 + next++; });
}

}  // namespace

TEST_CASE("handle pool: one handle per thread and device, the same on every call", "[core]") {
  static std::atomic<int> next{1};
  HandlePool<int>& pool = make_pool(next);
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
  HandlePool<int>& pool = make_pool(next);
  constexpr int kThreads = 6;
  std::vector<int> got(kThreads, -1);
  std::barrier sync(kThreads);
  {
    std::vector<std::jthread> threads;
    for (int i = 0; i < kThreads; ++i)
      threads.emplace_back([&, i] {
        got[static_cast<size_t>(i)] = pool.get(0);
        sync.arrive_and_wait();  // every thread holds its handle now
        CHECK(pool.get(0) == got[static_cast<size_t>(i)]);
      });
  }
  CHECK(std::set<int>(got.begin(), got.end()).size() == static_cast<size_t>(kThreads));
  CHECK(pool.created() == kThreads);
  CHECK(pool.idle(0) == kThreads);  // returned when the threads ended
}

TEST_CASE("handle pool: a thread that ends gives its handle to the next thread", "[core]") {
  static std::atomic<int> next{1};
  HandlePool<int>& pool = make_pool(next);
  int first = -1, second = -1;
  std::thread([&] { first = pool.get(2); }).join();
  CHECK(pool.idle(2) == 1);
  std::thread([&] { second = pool.get(2); }).join();
  CHECK(second == first);
  CHECK(pool.created() == 1);
  CHECK(pool.idle(0) == 0);
}

TEST_CASE("handle pool: a failed creation keeps nothing and the next call tries again", "[core]") {
  int calls = 0;
  auto& pool = *new HandlePool<int>([&calls](int) {
    if (++calls == 1) throw std::runtime_error("cudnnCreate failed");
    return 7;
  });
  std::thread([&] {
    CHECK_THROWS_AS(pool.get(0), std::runtime_error);
    CHECK(pool.created() == 0);
    CHECK(pool.get(0) == 7);
    CHECK(pool.created() == 1);
  }).join();
}
