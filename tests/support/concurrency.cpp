#include "tests/support/concurrency.h"

#include <thread>
#include <vector>

#include <catch2/catch.hpp>

namespace precis::testing {

void check_concurrent_calls(int threads, int iterations, const std::function<bool(int thread, int iteration)>& matches) {
  std::vector<int> mismatches(static_cast<size_t>(threads), 0);
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      for (int i = 0; i < iterations; ++i)
        if (!matches(t, i)) ++mismatches[static_cast<size_t>(t)];
    });
  }
  for (std::thread& th : pool) th.join();
  for (int t = 0; t < threads; ++t) {
    INFO("thread " << t);
    CHECK(mismatches[static_cast<size_t>(t)] == 0);
  }
}

}  // namespace precis::testing
