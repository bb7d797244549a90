#pragma once
// Thread-safety checks of ops that keep shared state (oneDNN primitive caches, per-thread scratch):
// several threads call the op at once and compare with a serial result.
#include <functional>

namespace precis::testing {

/// Runs `matches(thread, iteration)` from `threads` threads at once, `iterations` times each, and
/// CHECKs that every call returned true (each thread's count of false is reported).
void check_concurrent_calls(int threads, int iterations, const std::function<bool(int thread, int iteration)>& matches);

}  // namespace precis::testing
